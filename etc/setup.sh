#!/usr/bin/env bash
# Installs the Debian 12 packages tierproxy needs to build and test (and, with --bench,
# to benchmark). Only missing packages are installed; `apt-get update` runs only when
# something is missing. Idempotent and silent when there is nothing to do.
#
#   etc/setup.sh            build + test packages: everything etc/demo.sh and etc/test.sh run
#   etc/setup.sh --build-only   the build packages only: what etc/package.sh needs
#   etc/setup.sh --bench    also nginx, and what ../shared/bench/run.sh needs (haproxy, nginx lua)
#   etc/setup.sh --fuzz     also clang and its libFuzzer runtime, for etc/fuzz.sh
set -euo pipefail

# scdoc: the man pages (man/*.scd); dpkg-dev: etc/package.sh (dpkg-buildflags, dpkg-shlibdeps);
# dpkg: dpkg-deb, which package.sh and test_day2_install.py run (essential, named to be sure)
build_pkgs=(gcc libc6-dev meson ninja-build pkg-config libmicrohttpd-dev libcurl4-openssl-dev
            libhiredis-dev libsqlite3-dev libevent-dev libinih-dev libjansson-dev
            libssl-dev libcmocka-dev libsystemd-dev scdoc dpkg dpkg-dev)
# Every program the demo and the test suite start, by the package that has it (a minimal
# Debian 12, debootstrap --variant=minbase or the debian:12 image, has none of them):
#   python3, python3-pytest   /usr/bin/python3 -m pytest (tests/e2e), upstream.py (demo too)
#   python3-pytest-xdist      the sanitizer run's two pytest workers (tests/e2e/meson.build)
#   redis-server              tests/e2e (RedisServer), tests/unit/store/test_limiter_redis
#   redis-tools               redis-cli, for looking at the tests' servers by hand
#   wrk                       test_faults.py::test_redis_killed_and_restarted_under_wrk
#   systemd                   systemd-analyze (test_systemd.py::test_systemd_analyze_verify);
#                             installing it starts nothing where systemd is not PID 1
#   valgrind                  etc/valgrind.sh (E2E_VALGRIND=1)
#   curl                      the demo's curl line
#   iproute2                  ss: etc/demo.sh stop finds a demo left without PID files
#   procps                    /bin/kill: etc/tierproxy.service's ExecReload, which
#                             systemd-analyze verify checks (a minimal Debian lacks it)
#   man-db                    man: test_day2_install.py renders and finds the man pages
#   chromium                  test_browser.py: a real browser's WebSockets through the proxy
#                             (headless, driven over DevTools with python3-websocket)
# A test whose program is missing fails naming the package (tests/e2e/conftest.py:
# require_program), so add a program here when a test starts using it.
test_pkgs=(python3 python3-pytest python3-pytest-xdist python3-requests python3-websocket redis-server redis-tools
           wrk systemd procps valgrind curl iproute2 openssl man-db chromium)
bench_pkgs=(wrk nginx haproxy libnginx-mod-http-lua lua-nginx-redis redis-tools curl)
fuzz_pkgs=(clang libclang-rt-14-dev)

want=("${build_pkgs[@]}" "${test_pkgs[@]}")
for arg in "$@"; do
    case "$arg" in
        --build-only) want=("${build_pkgs[@]}") ;;
        --bench) want+=("${bench_pkgs[@]}") ;;
        --fuzz) want+=("${fuzz_pkgs[@]}") ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${want[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [[ "$status" == installed ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]]; then
    SUDO=sudo
else
    SUDO=
fi
echo "setup.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# The tests and the demo start their own redis-server (and nginx) on ports they pick, so
# the services these packages start on 6379/80 are not used. Keep them from starting at
# all while installing, in case the machine has systemd: a policy-rc.d that denies
# service starts, removed again afterwards.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    made_policy=1
fi
cleanup() { if [[ $made_policy -eq 1 ]]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
