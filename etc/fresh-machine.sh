#!/usr/bin/env bash
# Runs the README's two commands on a fresh Debian 12, as a newcomer would: builds a
# minimal root file system (debootstrap --variant=minbase bookworm, what the debian:12
# image holds), puts a fresh clone of the repository in /root/tierproxy, and inside a
# chroot, as root:
#   etc/demo.sh            then the curl line it printed, which must answer 200
#   etc/demo.sh stop
#   etc/test.sh            whose last line must be "N passed, 0 failed"
#   etc/package.sh         the Debian package, then installed with `apt install ./*.deb` in
#                          a second fresh root (a copy of the debootstrapped one, nothing
#                          else installed), where etc/check-installed.sh starts the
#                          installed tierproxy by hand with the installed configuration and
#                          a catalog made with the installed tierctl, curls its /health,
#                          runs systemd-analyze verify on the installed unit and man -w
# Everything the commands need comes from Debian's archive inside the chroot (etc/setup.sh),
# none of the host's packages are visible. Prints the test command's last line, the
# package's and a verdict; exits 0 only when every command kept its promise. Run as root on
# a Debian host (the archive is the one this host's apt sources name).
#
#   etc/fresh-machine.sh [--keep] [--rootfs BASE] [--dir DIR] [--package-only] [REPO [COMMIT]]
#
#   REPO           a git repository (path or URL; default: the one this script is in)
#   COMMIT         what to check out (default: REPO's HEAD); uncommitted changes are not
#                  part of a clone, so they are not tested
#   --dir DIR      where the root file system (DIR/rootfs) and the logs (DIR/logs) go;
#                  default a new /var/tmp/tierproxy-fresh.XXXXXX
#   --keep         keep DIR/rootfs afterwards (the logs are always kept)
#   --rootfs BASE  start from a copy of the debootstrapped tree BASE instead of running
#                  debootstrap (BASE is made first when it does not exist, and is never
#                  changed after that); saves a minute or two when iterating. A verdict
#                  worth reporting comes from a run without it.
#   --package-only the package steps alone (no demo, no test suite): a few minutes, for
#                  iterating on them; its verdict says so
set -euo pipefail

usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; }

keep=0 base= dir= repo= commit= package_only=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --keep) keep=1 ;;
        --package-only) package_only=1 ;;
        --rootfs) base=${2:?--rootfs needs a directory}; shift ;;
        --dir) dir=${2:?--dir needs a directory}; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "fresh-machine.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
        *)
            if [[ -z $repo ]]; then repo=$1
            elif [[ -z $commit ]]; then commit=$1
            else echo "fresh-machine.sh: too many arguments" >&2; exit 2
            fi ;;
    esac
    shift
done
[[ $(id -u) -eq 0 ]] || { echo "fresh-machine.sh: run as root (debootstrap, mount, chroot)" >&2; exit 2; }

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=${repo:-$(git -C "$script_dir" rev-parse --show-toplevel)}
# the repository named here may belong to another user: reading it is all we do
git_() { git -c safe.directory='*' "$@"; }
if [[ -d $repo ]]; then
    commit=$(git_ -C "$repo" rev-parse --verify "${commit:-HEAD}^{commit}")
fi

say() { echo "fresh-machine.sh: $*" >&2; }

# --------------------------------------------------------------------------------------
# the Debian archive, as this host's apt sources name it: "URI SUITE COMPONENTS" lines for
# bookworm, bookworm-updates and bookworm-security, from one-line (.list) and deb822
# (.sources) files alike
host_debian_sources() {
    local f files=()
    [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] && files+=("$f")
    done
    [[ ${#files[@]} -gt 0 ]] || return 0
    awk '
        function flush(   i, n, u, s, nu, ns) {
            if (types ~ /(^| )deb( |$)/ && enabled != "no") {
                nu = split(uris, u, " "); ns = split(suites, s, " ")
                for (i = 1; i <= nu; i++) for (n = 1; n <= ns; n++) emit(u[i], s[n], comps)
            }
            types = uris = suites = comps = enabled = ""
        }
        function emit(uri, suite, comps) {
            if (suite ~ /^bookworm(-updates|-security)?$/ && comps != "") print uri, suite, comps
        }
        FILENAME ~ /\.sources$/ {
            if (FILENAME != cur) { flush(); cur = FILENAME }
            if ($0 ~ /^[ \t]*$/) { flush(); next }     # a blank line ends a stanza
            if ($0 ~ /^[ \t]*#/) next                  # a comment line does not
            key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
            if (key == "types") types = $0
            else if (key == "uris") uris = $0
            else if (key == "suites") suites = $0
            else if (key == "components") comps = $0
            else if (key == "enabled") enabled = tolower($0)
            next
        }
        {
            if (cur != "") { flush(); cur = "" }
            sub(/#.*/, "")
            if ($1 != "deb") next
            i = 2
            if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            uri = $i; suite = $(i + 1); comps = ""
            for (j = i + 2; j <= NF; j++) comps = comps (comps == "" ? "" : " ") $j
            emit(uri, suite, comps)
        }
        END { flush() }
    ' "${files[@]}"
}

sources=$(host_debian_sources | awk '!seen[$0]++')
mirror=$(awk '$2 == "bookworm" { print $1; exit }' <<<"$sources")
if [[ -z $mirror ]]; then
    say "no 'deb URI bookworm main' entry in /etc/apt/sources.list*; this script needs a Debian 12 archive the host already uses"
    exit 1
fi

# --------------------------------------------------------------------------------------
# the work directory, and cleaning up whatever happens

if [[ -z $dir ]]; then
    dir=$(mktemp -d /var/tmp/tierproxy-fresh.XXXXXX)
fi
mkdir -p "$dir/logs"
dir=$(cd "$dir" && pwd)
root=$dir/rootfs
pkgroot=$dir/pkgroot        # where the package is installed: fresh, but for the package
logs=$dir/logs
if [[ -e $root || -e $pkgroot ]]; then
    say "$root or $pkgroot exists already; give a new --dir"
    exit 2
fi

mounted=()
# Processes whose root is the chroot (a demo or a test server left running): they would
# keep the mounts busy.
kill_chroot_processes() {
    local p r sig
    for sig in TERM KILL; do
        for p in /proc/[0-9]*; do
            r=$(readlink "$p/root" 2>/dev/null) || continue
            if [[ $r == "$root" || $r == "$root"/* ||
                  $r == "$pkgroot" || $r == "$pkgroot"/* ]]; then
                kill -s "$sig" "${p#/proc/}" 2>/dev/null || true
            fi
        done
        if [[ $sig == TERM ]]; then sleep 1; fi
    done
}
cleanup() {
    local i
    set +e          # clean up all there is, whatever fails on the way
    kill_chroot_processes
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true
    done
    mounted=()
    local tree
    for tree in "$root" "$pkgroot"; do
        if [[ $keep -eq 0 && -d $tree ]]; then
            if grep -q " $tree/" /proc/mounts; then
                say "something is still mounted under $tree; not removing it"
            else
                rm -rf --one-file-system "$tree"
            fi
        fi
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_in() {    # mount_in TARGET mount-arguments...
    local target=$1; shift
    mkdir -p "$target"
    mount "$@" "$target"
    mounted+=("$target")
}

# --------------------------------------------------------------------------------------
# the root file system

ensure_debootstrap() {
    command -v debootstrap >/dev/null && return 0
    say "installing debootstrap on the host"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
}

make_base() {   # make_base DIR
    ensure_debootstrap
    say "debootstrap --variant=minbase bookworm $1 $mirror"
    local t0=$SECONDS
    if ! debootstrap --variant=minbase bookworm "$1" "$mirror" >"$logs/debootstrap.log" 2>&1; then
        tail -20 "$logs/debootstrap.log" >&2
        say "debootstrap failed; log: $logs/debootstrap.log"
        exit 1
    fi
    say "debootstrap took $((SECONDS - t0)) s"
}

if [[ -n $base ]]; then
    if [[ ! -e $base/usr/bin/apt-get ]]; then
        [[ -e $base ]] && [[ -n $(ls -A "$base") ]] &&
            { say "--rootfs $base is not a debootstrapped tree"; exit 2; }
        make_base "$base"
    fi
    say "copying the base $base to $root"
    cp -a "$base" "$root"
else
    make_base "$root"
fi

# What a real installation has and a bare debootstrap lacks: the archive's updates and
# security suites as the host has them, a resolver, and /etc/hosts (the installer writes
# one; the debian:12 image gets one from the container runtime).
{
    echo "# written by etc/fresh-machine.sh from the host's apt sources"
    while read -r uri suite comps; do
        [[ -n $uri ]] && echo "deb $uri $suite $comps"
    done <<<"$sources"
} >"$root/etc/apt/sources.list"
rm -f "$root/etc/resolv.conf"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if [[ ! -e $root/etc/hosts ]]; then
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
        "$(cat /proc/sys/kernel/hostname)" >"$root/etc/hosts"
fi

# the root the package will be installed in: the same fresh system, before anything else
say "copying $root to $pkgroot (for the package)"
cp -a "$root" "$pkgroot"

for tree in "$root" "$pkgroot"; do
    mount_in "$tree/proc" -t proc proc
    mount_in "$tree/sys" -t sysfs sysfs
    mount_in "$tree/dev" -t devtmpfs devtmpfs
    mount_in "$tree/dev/pts" -t devpts -o gid=5,mode=620,ptmxmode=666 devpts
    mount_in "$tree/dev/shm" -t tmpfs -o mode=1777,nosuid,nodev shm
done

# --------------------------------------------------------------------------------------
# a fresh clone, made from the host (a newcomer has one before typing the README's
# commands; git itself is not among what the commands install)

dest=$root/root/tierproxy
say "cloning $repo at ${commit:-its HEAD} into $dest"
git_ clone --quiet --no-hardlinks --no-checkout "$repo" "$dest"
if [[ -n $commit ]]; then
    git_ -C "$dest" cat-file -e "$commit^{commit}" 2>/dev/null ||
        git_ -C "$dest" fetch --quiet "$repo" "$commit"
    git_ -C "$dest" checkout --quiet --detach "$commit"
else
    git_ -C "$dest" checkout --quiet
    commit=$(git_ -C "$dest" rev-parse HEAD)
fi
say "testing commit $(git_ -C "$dest" log -1 --format='%h %s' | cut -c1-100)"

# --------------------------------------------------------------------------------------
# the README's commands, in the chroot, with the environment of a root login on a
# fresh machine: no locale set (as in the debian:12 image), no systemd running

in_root() {     # in_root TREE DIR SHELL-COMMAND: runs it in DIR of TREE
    chroot "$1" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
        TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        /bin/bash -c "cd $2 && $3"
}
in_chroot() { in_root "$root" /root/tierproxy "$1"; }    # in the clone, in the build root
in_pkgroot() { in_root "$pkgroot" /root "$1"; }

demo_ok=0 test_line= test_rc=1
if [[ $package_only -eq 1 ]]; then
    say "--package-only: no etc/demo.sh, no etc/test.sh"
else

    say "etc/demo.sh (installs the packages and builds: a few minutes); log: $logs/demo.log"
    t0=$SECONDS
    if in_chroot 'etc/demo.sh' >"$logs/demo.log" 2>&1; then
        say "etc/demo.sh took $((SECONDS - t0)) s"
        curl_line=$(grep -m1 '^curl ' "$logs/demo.log" || true)
        if [[ -z $curl_line ]]; then
            say "etc/demo.sh printed no curl line"
        else
            echo "\$ $curl_line" >"$logs/demo-curl.log"
            in_chroot "$curl_line" >>"$logs/demo-curl.log" 2>&1 || true
            status=$(grep -a -m1 '^HTTP/' "$logs/demo-curl.log" | tr -d '\r' || true)
            say "the demo's curl line answered: ${status:-nothing}"
            [[ $status =~ ^HTTP/[0-9.]+\ 200 ]] && demo_ok=1
        fi
    else
        say "etc/demo.sh failed (exit $?) after $((SECONDS - t0)) s; last lines:"
        tail -20 "$logs/demo.log" >&2
    fi
    in_chroot 'etc/demo.sh stop' >>"$logs/demo.log" 2>&1 || say "etc/demo.sh stop failed"

    say "etc/test.sh (the whole suite, plain and ASan/UBSan); log: $logs/test.log"
    t0=$SECONDS
    set +e
    in_chroot 'etc/test.sh' >"$logs/test.log" 2>&1
    test_rc=$?
    set -e
    test_line=$(tail -n 1 "$logs/test.log")
    say "etc/test.sh took $((SECONDS - t0)) s, exit $test_rc"
    grep -E '^(FAILED|ERROR) |^==> ' "$logs/test.log" | tail -40 >&2 || true
fi

# --------------------------------------------------------------------------------------
# the package: built in the build root, installed in the second root as an operator would
# (apt resolves its Depends from the archive), then checked there from the inside

package_ok=0 package_line="etc/package.sh failed"
say "etc/package.sh (builds the Debian package); log: $logs/package.log"
t0=$SECONDS
if in_chroot 'etc/package.sh' >"$logs/package.log" 2>&1; then
    deb=$(tail -n 1 "$logs/package.log")        # its path in the build root
    say "etc/package.sh took $((SECONDS - t0)) s: $deb"
    cp "$root$deb" "$pkgroot/root/"
    cp "$dest/etc/check-installed.sh" "$pkgroot/root/"
    say "apt install ./${deb##*/} in a fresh root; log: $logs/package-install.log"
    package_line="apt install ./${deb##*/} failed"
    apt_install="DEBIAN_FRONTEND=noninteractive apt-get install -y -q"
    if in_pkgroot "apt-get update -qq && $apt_install ./${deb##*/}" \
            >"$logs/package-install.log" 2>&1; then
        # what the checks run, not what the package needs: curl, man, systemd-analyze, and
        # /bin/kill, which the unit's ExecReload names (a Debian 12 system has procps)
        package_line="installing curl man-db systemd procps failed"
        if in_pkgroot "$apt_install --no-install-recommends curl man-db systemd procps" \
                >>"$logs/package-install.log" 2>&1; then
            say "etc/check-installed.sh in that root; log: $logs/package-check.log"
            set +e
            in_pkgroot './check-installed.sh' >"$logs/package-check.log" 2>&1
            check_rc=$?
            set -e
            grep -E '^(ok|FAIL) ' "$logs/package-check.log" >&2 || true
            package_line="installed in a fresh root: $(tail -n 1 "$logs/package-check.log")"
            [[ $check_rc -eq 0 ]] && package_ok=1
        fi
    fi
    [[ $package_ok -eq 1 ]] || tail -20 "$logs/package-install.log" >&2
else
    say "etc/package.sh failed after $((SECONDS - t0)) s; last lines:"
    tail -20 "$logs/package.log" >&2
fi

echo "commit:        $commit"
if [[ $package_only -eq 1 ]]; then
    echo "package:       $package_line"
    if [[ $package_ok -eq 1 ]]; then
        echo "verdict:       PACKAGE ONLY, PASS: no demo, no test suite (logs: $logs)"
        exit 0
    fi
    echo "verdict:       PACKAGE ONLY, FAIL (logs: $logs)"
    exit 1
fi
echo "demo:          $([[ $demo_ok -eq 1 ]] && echo 'curl line answered 200' || echo 'FAILED')"
echo "etc/test.sh:   $test_line"
echo "package:       $package_line"
if [[ $demo_ok -eq 1 && $test_rc -eq 0 && $test_line =~ ^[0-9]+\ passed,\ 0\ failed$ &&
      $package_ok -eq 1 ]]; then
    echo "verdict:       PASS: a fresh Debian 12 keeps the README's promise and the package's" \
         "(logs: $logs)"
    exit 0
fi
echo "verdict:       FAIL (logs: $logs)"
exit 1
