#!/usr/bin/env bash
# Installs the Debian 12 packages tierproxy needs to build and test (and, with --bench,
# to benchmark). Only missing packages are installed; `apt-get update` runs only when
# something is missing. Idempotent and silent when there is nothing to do.
#
#   etc/setup.sh            build + test packages
#   etc/setup.sh --bench    also wrk, nginx, and what ../shared/bench/run.sh needs (haproxy, nginx lua)
#   etc/setup.sh --fuzz     also clang and its libFuzzer runtime, for etc/fuzz.sh
set -euo pipefail

build_pkgs=(gcc meson ninja-build pkg-config libmicrohttpd-dev libcurl4-openssl-dev
            libhiredis-dev libsqlite3-dev libevent-dev libinih-dev libjansson-dev
            libssl-dev libcmocka-dev libsystemd-dev)
test_pkgs=(redis-server redis-tools python3-pytest python3-requests python3-websocket
           valgrind curl)
bench_pkgs=(wrk nginx haproxy libnginx-mod-http-lua lua-nginx-redis redis-tools curl)
fuzz_pkgs=(clang libclang-rt-14-dev)

want=("${build_pkgs[@]}" "${test_pkgs[@]}")
for arg in "$@"; do
    case "$arg" in
        --bench) want+=("${bench_pkgs[@]}") ;;
        --fuzz) want+=("${fuzz_pkgs[@]}") ;;
        -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
