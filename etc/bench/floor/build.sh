#!/bin/bash
# etc/bench/floor/build.sh [OUTDIR]: the floor binaries (see README.md here). The _opt ones
# are the same sources with -DOPT (the two event-loop tricks tierproxy uses too).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
out=${1:-../../../build/floor}
mkdir -p "$out"
L="$(pkg-config --cflags --libs libmicrohttpd libcurl libevent)"
cc -O2 -Wall -o "$out/floor_mhd" floor_mhd.c $L
cc -O2 -Wall -o "$out/floor_proxy" floor_proxy.c $L
cc -O2 -Wall -DOPT -o "$out/floor_proxy_opt" floor_proxy.c $L
cc -O2 -Wall -D_GNU_SOURCE -o "$out/floor_proxy_raw" floor_proxy_raw.c $L
cc -O2 -Wall -D_GNU_SOURCE -DOPT -o "$out/floor_proxy_raw_opt" floor_proxy_raw.c $L
echo "built in $out"
