#!/usr/bin/env bash
# Builds the libFuzzer harnesses (tests/fuzz) in build-fuzz/ with clang, ASan and UBSan,
# and runs each one for RUNS executions, one after the other on one core. Prints, per
# harness, the executions, the speed, the final coverage (libFuzzer's cov:) and the
# crashes found (leaks, timeouts and invariant failures count as crashes). Exits non-zero
# when any harness found one; the reproducer is in build-fuzz/fuzz-artifacts/<name>/.
#
#   etc/fuzz.sh [RUNS] [HARNESS...]     RUNS defaults to 10000000; HARNESS: config, limit,
#                                       headers, ws_frame, head_screen, later_head,
#                                       request_target, gate, catalog_import
#                                       (default: all)
#   FUZZ_MAX_TIME=S etc/fuzz.sh ...     also stop each harness after S seconds
#
# Needs clang and its libFuzzer runtime (Debian: clang libclang-rt-14-dev; etc/setup.sh
# --fuzz installs them). New inputs go to build-fuzz/fuzz-corpus/<name>/; the seeds in
# tests/fuzz/corpus/<name>/ are only read. Reproduce a crash with
#   build-fuzz/tests/fuzz/fuzz_<name> build-fuzz/fuzz-artifacts/<name>/crash-...
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

runs=10000000
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    runs=$1
    shift
fi
case "${1:-}" in
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
harnesses=("$@")
[[ ${#harnesses[@]} -eq 0 ]] && harnesses=(config limit headers ws_frame head_screen later_head request_target gate catalog_import)

etc/setup.sh --fuzz || { echo "etc/fuzz.sh: etc/setup.sh --fuzz failed" >&2; exit 1; }
if [[ ! -f build-fuzz/build.ninja ]]; then
    CC=clang meson setup build-fuzz -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
        >build-fuzz.setup.log 2>&1 || { cat build-fuzz.setup.log >&2; exit 1; }
    rm -f build-fuzz.setup.log
fi
ninja -C build-fuzz >/dev/null || { ninja -C build-fuzz; exit 1; }

extra=()
[[ -n ${FUZZ_MAX_TIME:-} ]] && extra+=("-max_total_time=$FUZZ_MAX_TIME")

failed=0
printf '%-16s %12s %9s %7s %8s\n' harness executions exec/s cov crashes
for name in "${harnesses[@]}"; do
    exe=build-fuzz/tests/fuzz/fuzz_$name
    if [[ ! -x $exe ]]; then
        echo "etc/fuzz.sh: no harness $exe" >&2
        failed=1
        continue
    fi
    work=build-fuzz/fuzz-corpus/$name
    art=build-fuzz/fuzz-artifacts/$name
    log=build-fuzz/fuzz-logs/$name.log
    mkdir -p "$work" "$art" build-fuzz/fuzz-logs
    dict=()
    [[ -f tests/fuzz/$name.dict ]] && dict=("-dict=tests/fuzz/$name.dict")
    before=$(find "$art" -type f | wc -l)
    start=$(date +%s)
    "$exe" -runs="$runs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/" "${dict[@]}" "${extra[@]}" "$work" "tests/fuzz/corpus/$name" \
        >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    crashes=$(( $(find "$art" -type f | wc -l) - before ))
    [[ $rc -ne 0 && $crashes -eq 0 ]] && crashes=1   # e.g. a crash while loading the corpus
    rate=$(( ${execs:-0} / (secs > 0 ? secs : 1) ))
    printf '%-16s %12s %9s %7s %8s\n' "$name" "${execs:-?}" "$rate" "${cov:-?}" "$crashes"
    if [[ $crashes -ne 0 ]]; then
        failed=1
        grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|invariant failed' "$log" | sed 's/^/    /'
        echo "    log: $log; artifacts: $art/"
    fi
done
exit $failed
