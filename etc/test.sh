#!/usr/bin/env bash
# The one test command. Installs what is missing (etc/setup.sh), then builds and runs the
# whole suite (unit + end-to-end) twice, the two runs side by side (each one's output is
# printed when both are done):
#   build/        plain build
#   build-asan/   AddressSanitizer + UndefinedBehaviorSanitizer; any report aborts
# and prints, as its last line, "N passed, N failed" over both runs (every pytest case
# counted on its own). Exits non-zero when anything failed.
#
#   etc/test.sh [--plain-only | --asan-only] [extra args for meson test, e.g. --suite e2e]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

runs=(plain asan)
meson_test_args=()
for arg in "$@"; do
    case "$arg" in
        --plain-only) runs=(plain) ;;
        --asan-only) runs=(asan) ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) meson_test_args+=("$arg") ;;
    esac
done

etc/setup.sh || { echo "etc/test.sh: etc/setup.sh failed" >&2; echo "0 passed, 1 failed"; exit 1; }

total_passed=0
total_failed=0

# Counts results in a build dir: meson tests from meson-logs/testlog.json, except the e2e
# test, whose pytest cases are counted one by one from e2e-junit.xml.
count_results() {
    /usr/bin/python3 - "$1" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET
d = sys.argv[1]
passed = failed = 0
log = os.path.join(d, "meson-logs", "testlog.json")
tests = []
if os.path.exists(log):
    with open(log) as f:
        tests = [json.loads(ln) for ln in f if ln.strip()]
for t in tests:
    result = t.get("result", "")
    ok = result in ("OK", "EXPECTEDFAIL")
    suites = t.get("suite") or []
    # meson names it "tierproxy:e2e / e2e" (project:suite / name)
    if t.get("name", "").split(" / ")[-1] == "e2e" or \
            any(s == "e2e" or s.endswith(":e2e") for s in suites):
        junit = os.path.join(d, "e2e-junit.xml")
        cases = {}
        if os.path.exists(junit):
            try:
                for tc in ET.parse(junit).getroot().iter("testcase"):
                    key = (tc.get("classname"), tc.get("name"))
                    bad = any(c.tag in ("failure", "error") for c in tc)
                    skipped = any(c.tag == "skipped" for c in tc)
                    prev = cases.get(key, "passed")
                    cases[key] = "failed" if bad or prev == "failed" else \
                        ("skipped" if skipped and prev != "failed" else prev)
            except ET.ParseError:
                cases = {}
        p = sum(1 for v in cases.values() if v == "passed")
        fl = sum(1 for v in cases.values() if v == "failed")
        if not ok and fl == 0:
            fl = 1          # pytest crashed or timed out: the run itself failed
        passed += p
        failed += fl
    elif result == "SKIP":
        pass
    elif ok:
        passed += 1
    else:
        failed += 1
print(passed, failed)
PY
}

# The build directory, meson options and sanitizer environment of a kind of run.
kind_setup() {
    local kind=$1
    if [[ $kind == plain ]]; then
        dir=build
        opts=(-Dtests=true -Db_sanitize=none)
        unset ASAN_OPTIONS UBSAN_OPTIONS
    else
        dir=build-asan
        opts=(-Dtests=true -Db_sanitize=address,undefined -Db_lundef=false)
        export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:detect_leaks=1
        export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1
    fi
}

build_one() {
    local kind=$1 dir opts
    kind_setup "$kind"
    echo "==> $kind build in $dir" >&2
    if [[ -f $dir/build.ninja ]]; then
        meson setup --reconfigure "$dir" "${opts[@]}" >/dev/null ||
            meson setup --wipe "$dir" "${opts[@]}" >/dev/null
    else
        rm -rf "$dir"
        meson setup "$dir" "${opts[@]}" >/dev/null
    fi
    local rc=$?
    if [[ $rc -eq 0 ]]; then
        ninja -C "$dir" >/dev/null
        rc=$?
        [[ $rc -ne 0 ]] && ninja -C "$dir" 2>&1 | tail -40 >&2
    fi
    [[ $rc -eq 0 ]] || echo "==> $kind: build failed" >&2
    return $rc
}

# Runs one kind's suite, its output into $dir/test-run.log (run in a subshell of its own).
test_one() {
    local kind=$1 dir opts
    kind_setup "$kind"
    rm -f "$dir/e2e-junit.xml" "$dir/meson-logs/testlog.json"
    { echo "==> $kind: meson test -C $dir --print-errorlogs ${meson_test_args[*]:-}"
      meson test -C "$dir" --print-errorlogs "${meson_test_args[@]}"; } > "$dir/test-run.log" 2>&1
}

built=()
for kind in "${runs[@]}"; do
    if build_one "$kind"; then
        built+=("$kind")
    else
        total_failed=$((total_failed + 1))
    fi
done
# The two runs go side by side: the end-to-end tests spend most of their time waiting
# (store timeouts, failovers, drains), so both together take little more than the longer
# one alone (CI on the 2-core box: 29.6 min one after the other).
for kind in "${built[@]}"; do
    ( test_one "$kind" ) &
done
wait
for kind in "${built[@]}"; do
    kind_setup "$kind"
    cat "$dir/test-run.log" >&2
    counts=$(count_results "$ROOT/$dir")
    p=${counts% *} f=${counts#* }
    echo "==> $kind: $p passed, $f failed" >&2
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
done

echo "$total_passed passed, $total_failed failed"
[[ $total_failed -eq 0 && $total_passed -gt 0 ]]
