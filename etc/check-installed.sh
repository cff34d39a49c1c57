#!/usr/bin/env bash
# Checks tierproxy as its Debian package installed it (etc/package.sh), from inside the
# machine: etc/fresh-machine.sh runs it in a fresh Debian 12 root right after
# `apt install ./tierproxy_*.deb`. In turn:
#   - every file in its place, the service's state and log directories, the first catalog
#   - a user and a key added to that catalog with the installed tierctl
#   - the installed tierproxy started by hand (a chroot has no systemd) with the installed
#     /etc/tierproxy/tierproxy.ini, on free ports (--listen, --admin): /health answers 200,
#     a request with the key reaches the (absent) upstream: 502, not 401; the access log
#     grows where the configuration puts it
#   - systemd-analyze verify of the installed unit, without a word (its man pages found)
#   - man -w finds tierctl(1) and tierproxy(8)
# One line per check ("ok ..." or "FAIL ..."), then "N checks, N failed"; exits 0 only when
# none failed. Needs curl, man-db, systemd (systemd-analyze) and procps (the unit's
# /bin/kill), which the package itself does not.
set -uo pipefail

unit=/lib/systemd/system/tierproxy.service
config=/etc/tierproxy/tierproxy.ini
catalog=/var/lib/tierproxy/plans.db
access_log=/var/log/tierproxy/access.log
work=$(mktemp -d)
checks=0 failed=0 proxy_pid=

finish() {
    [[ -n $proxy_pid ]] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
    rm -rf "$work"
}
trap finish EXIT

# check WHAT COMMAND...: runs COMMAND in this shell (what it sets stays set), ok when it
# exits 0; the line shows what it printed
check() {
    local what=$1 out
    shift
    checks=$((checks + 1))
    if "$@" >"$work/check.out" 2>&1; then
        out=$(tr '\n' ' ' <"$work/check.out" | sed 's/ *$//' | cut -c1-300)
        echo "ok    $what${out:+: $out}"
        return 0
    fi
    failed=$((failed + 1))
    echo "FAIL  $what: $(tr '\n' ' ' <"$work/check.out" | cut -c1-400)"
    return 1
}

files_in_place() {
    local f missing=()
    for f in /usr/bin/tierproxy /usr/bin/tierctl "$config" "$unit" /etc/logrotate.d/tierproxy \
             /usr/share/man/man8/tierproxy.8.gz /usr/share/man/man1/tierctl.1.gz "$catalog"; do
        [[ -f $f ]] || missing+=("$f")
    done
    for f in /var/lib/tierproxy /var/log/tierproxy; do
        [[ -d $f ]] || missing+=("$f/")
    done
    [[ ${#missing[@]} -eq 0 ]] || { echo "missing ${missing[*]}"; return 1; }
}

make_user_and_key() {
    tierctl --db "$catalog" user add alice --plan free || return 1
    tierctl --db "$catalog" key create alice --label fresh-machine >"$work/key" || return 1
    [[ -s $work/key ]] || { echo "key create printed no key"; return 1; }
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {   # a port nothing listens on, from a range no other check here uses
    local p
    for _ in $(seq 200); do
        p=$((20000 + RANDOM % 20000))
        port_busy "$p" || { echo "$p"; return 0; }
    done
    return 1
}

start_proxy() {
    proxy_port=$(free_port) && admin_port=$(free_port) || { echo "no free port"; return 1; }
    tierproxy -c "$config" --listen "127.0.0.1:$proxy_port" --admin "127.0.0.1:$admin_port" \
        >"$work/proxy.out" 2>"$work/proxy.err" </dev/null &
    proxy_pid=$!
    for _ in $(seq 100); do
        port_busy "$admin_port" && return 0
        kill -0 "$proxy_pid" 2>/dev/null || { cat "$work/proxy.err"; proxy_pid=; return 1; }
        sleep 0.1
    done
    echo "not listening on 127.0.0.1:$admin_port after 10 s"; cat "$work/proxy.err"
    return 1
}

health_200() {
    local status
    status=$(curl -sS -o "$work/health" -w '%{http_code}' "http://127.0.0.1:$admin_port/health") ||
        return 1
    echo "/health $status $(cat "$work/health")"
    [[ $status == 200 ]]
}

key_accepted() {    # no upstream listens: an accepted key gets 502, a refused one 401
    local with without
    with=$(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(cat "$work/key")" \
        "http://127.0.0.1:$proxy_port/")
    without=$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$proxy_port/")
    echo "with the key: $with, without: $without"
    [[ $with == 502 && $without == 401 ]]
}

access_logged() {
    for _ in $(seq 20); do
        [[ $(wc -l <"$access_log" 2>/dev/null || echo 0) -ge 2 ]] && return 0
        sleep 0.1
    done
    echo "$access_log has $(wc -l <"$access_log" 2>/dev/null || echo no) lines"
    return 1
}

unit_verifies() {
    local out rc
    out=$(systemd-analyze verify "$unit" 2>&1)
    rc=$?
    echo "$out"
    [[ $rc -eq 0 && -z $out ]]
}

check "files in place" files_in_place
check "user and key made with the installed tierctl" make_user_and_key
if check "tierproxy -c $config started" start_proxy; then
    check "GET /health answers 200" health_200
    check "a request with the key is served (502: no upstream), without it 401" key_accepted
    check "access log written to $access_log" access_logged
fi
check "systemd-analyze verify $unit" unit_verifies
check "man -w tierctl" man -w tierctl
check "man -w 8 tierproxy" man -w 8 tierproxy
echo "$checks checks, $failed failed"
[[ $failed -eq 0 ]]
