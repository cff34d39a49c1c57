#!/usr/bin/env bash
# Builds tierproxy and starts a demo in the background:
#   an upstream (tests/e2e/upstream.py, echoes every request as JSON) on 127.0.0.1:3000
#   tierproxy on 127.0.0.1:8080 (admin: 127.0.0.1:9090), in-memory limiter store
#   a catalog demo/plans.db with user "demo" on plan "free" (100 requests/min) and a key
# then prints a curl command that goes through the proxy. Logs are in demo/.
#
#   etc/demo.sh          (re)start the demo; re-running replaces the previous one
#   etc/demo.sh stop     stop it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
DEMO=$ROOT/demo
PROXY_PORT=8080 UPSTREAM_PORT=3000 ADMIN_PORT=9090

# Stops what a previous run started (PID files), then anything of ours still holding
# the demo's ports. Something else on those ports is reported, not killed.
stop_demo() {
    local f pid
    for f in "$DEMO/proxy.pid" "$DEMO/upstream.pid"; do
        [[ -f $f ]] || continue
        pid=$(cat "$f")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            kill -9 "$pid" 2>/dev/null || true
        fi
        rm -f "$f"
    done
    local port cmd
    for port in $PROXY_PORT $UPSTREAM_PORT $ADMIN_PORT; do
        for pid in $(ss -Htlnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
            cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)
            if [[ $cmd == *tierproxy* || $cmd == *upstream.py* ]]; then
                kill "$pid" 2>/dev/null || true
                for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
                kill -9 "$pid" 2>/dev/null || true
            fi
        done
    done
}

# Something accepts connections on 127.0.0.1:PORT. bash's /dev/tcp, so that the check
# needs no program a minimal Debian lacks (ss is in iproute2, not installed there).
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {   # wait_port PORT PID NAME LOG
    for _ in $(seq 100); do
        if ! kill -0 "$2" 2>/dev/null; then
            echo "demo.sh: $3 exited; last lines of $4:" >&2
            tail -20 "$4" >&2
            exit 1
        fi
        port_busy "$1" && return 0
        sleep 0.1
    done
    echo "demo.sh: $3 is not listening on port $1 after 10 s; see $4" >&2
    exit 1
}

if [[ ${1:-} == stop ]]; then
    stop_demo
    echo "demo stopped"
    exit 0
elif [[ -n ${1:-} ]]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi

etc/setup.sh
if [[ -f build/build.ninja ]]; then
    ninja -C build >/dev/null
else
    meson setup build >/dev/null
    ninja -C build >/dev/null
fi
TIERCTL=$ROOT/build/tiers/tierctl
TIERPROXY=$ROOT/build/proxy/tierproxy

stop_demo
for port in $PROXY_PORT $UPSTREAM_PORT $ADMIN_PORT; do
    if port_busy "$port"; then
        echo "demo.sh: port $port is in use by another program:" >&2
        ss -Htlnp "sport = :$port" >&2 2>/dev/null || true
        exit 1
    fi
done

mkdir -p "$DEMO"
rm -f "$DEMO/plans.db" "$DEMO/plans.db-wal" "$DEMO/plans.db-shm" "$DEMO/plans.db-journal"
# The demo's settings come from the command line; keep TIERPROXY_* from the caller's
# environment out of it (they would override the flags).
for v in $(compgen -e | grep '^TIERPROXY_' || true); do unset "$v"; done
"$TIERCTL" --db "$DEMO/plans.db" init >/dev/null
"$TIERCTL" --db "$DEMO/plans.db" user add demo --plan free >/dev/null
KEY=$("$TIERCTL" --db "$DEMO/plans.db" key create demo --label demo)

nohup /usr/bin/python3 "$ROOT/tests/e2e/upstream.py" --port $UPSTREAM_PORT \
    >"$DEMO/upstream.log" 2>&1 </dev/null &
echo $! >"$DEMO/upstream.pid"
wait_port $UPSTREAM_PORT "$(cat "$DEMO/upstream.pid")" upstream "$DEMO/upstream.log"

nohup "$TIERPROXY" --listen 127.0.0.1:$PROXY_PORT --upstream http://127.0.0.1:$UPSTREAM_PORT \
    --db "$DEMO/plans.db" --admin 127.0.0.1:$ADMIN_PORT \
    >"$DEMO/proxy.log" 2>&1 </dev/null &
echo $! >"$DEMO/proxy.pid"
wait_port $PROXY_PORT "$(cat "$DEMO/proxy.pid")" tierproxy "$DEMO/proxy.log"

cat <<MSG

tierproxy demo is running (pid $(cat "$DEMO/proxy.pid")), upstream pid $(cat "$DEMO/upstream.pid").
  proxy     http://127.0.0.1:$PROXY_PORT   -> upstream http://127.0.0.1:$UPSTREAM_PORT (echoes requests)
  admin     http://127.0.0.1:$ADMIN_PORT/health  and /metrics
  catalog   demo/plans.db: user "demo" on plan "free" (100 requests/min)
  logs      demo/proxy.log (access log, one JSON line per request), demo/upstream.log
  manage    build/tiers/tierctl --db demo/plans.db plan list
  stop      etc/demo.sh stop

Try it (the key was created just now and is shown only here):

MSG
echo "curl -i -H \"Authorization: Bearer $KEY\" http://127.0.0.1:$PROXY_PORT/hello"
