#!/usr/bin/env bash
# Runs the end-to-end suite with every tierproxy (and the tierctl the tests run themselves)
# under valgrind's memcheck, and prints what it found: how many processes ran, which had
# leaks ("definitely"/"indirectly lost") or memory errors (invalid reads/writes/frees,
# uninitialised values), with their logs, and pytest's counts. Exits non-zero when a test
# failed or valgrind found anything. A test fails on its own when a proxy it ran leaked
# (tests/e2e/conftest.py, E2E_VALGRIND); the summary here is over the whole run.
#
#   etc/valgrind.sh [--builddir DIR] [--tierctl tests|all|no] [-k EXPR] [PYTEST ARGS...]
#
#   --builddir DIR   a plain (unsanitized) build, set up and built here if needed;
#                    default build/ (the one etc/test.sh makes)
#   --tierctl MODE   tests: the tierctl runs the tests make themselves (default); all: also
#                    the catalog set-up of every test (~1 s per run more); no: none
#   -k EXPR          pytest's test filter, passed through (so are other pytest arguments)
#
# Logs go to DIR/valgrind-logs/ (emptied first): tierproxy.<test>.proxyN.log per proxy,
# <program>.<test>.pid<PID>.log per other run, pytest.log, junit.xml. valgrind makes the
# proxy 20-50 times slower: the whole suite takes about half an hour on two cores; the
# harness's waits and the tests' latency bounds are scaled by SLOW (E2E_VALGRIND_SLOW,
# default 6). E2E_VALGRIND_OPTS adds valgrind options, e.g. "--track-origins=yes".
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)

builddir=build
tierctl_mode=tests
pytest_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --builddir) builddir=${2:?--builddir needs a directory}; shift 2 ;;
        --builddir=*) builddir=${1#*=}; shift ;;
        --tierctl) tierctl_mode=${2:?--tierctl needs tests, all or no}; shift 2 ;;
        --tierctl=*) tierctl_mode=${1#*=}; shift ;;
        -k) pytest_args+=(-k "${2:?-k needs an expression}"); shift 2 ;;
        -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) pytest_args+=("$1"); shift ;;
    esac
done
case "$tierctl_mode" in
    tests|all|no) ;;
    *) echo "etc/valgrind.sh: --tierctl: tests, all or no, not \"$tierctl_mode\"" >&2; exit 2 ;;
esac

etc/setup.sh || { echo "etc/valgrind.sh: etc/setup.sh failed" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "etc/valgrind.sh: valgrind is not installed" >&2; exit 1; }

# A plain build: valgrind and the sanitizers' runtimes do not mix.
if [[ ! -f $builddir/build.ninja ]]; then
    echo "==> setting up a plain build in $builddir" >&2
    meson setup "$builddir" -Dtests=true -Db_sanitize=none >/dev/null ||
        { echo "etc/valgrind.sh: meson setup $builddir failed" >&2; exit 1; }
fi
sanitize=$(meson introspect --buildoptions "$builddir" 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; print(next((o["value"] for o in json.load(sys.stdin) if o["name"] == "b_sanitize"), "none"))')
if [[ ${sanitize:-none} != none ]]; then
    echo "etc/valgrind.sh: $builddir is built with -Db_sanitize=$sanitize; valgrind needs a plain build (--builddir)" >&2
    exit 2
fi
ninja -C "$builddir" >/dev/null || { ninja -C "$builddir" 2>&1 | tail -40 >&2; exit 1; }
builddir=$(cd "$builddir" && pwd)

logs=$builddir/valgrind-logs
rm -rf "$logs"
mkdir -p "$logs"

echo "==> e2e suite under valgrind (logs in $logs)" >&2
start=$(date +%s)
E2E_VALGRIND=1 E2E_VALGRIND_DIR=$logs E2E_VALGRIND_TIERCTL=$tierctl_mode \
TIERPROXY_BIN=$builddir/proxy/tierproxy TIERCTL_BIN=$builddir/tiers/tierctl \
PYTHONDONTWRITEBYTECODE=1 \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider -rfEs -o junit_family=xunit1 \
    --junitxml="$logs/junit.xml" \
    tests/e2e "${pytest_args[@]}" 2>&1 | tee "$logs/pytest.log"
pytest_rc=${PIPESTATUS[0]}
wall=$(( $(date +%s) - start ))

/usr/bin/python3 - "$ROOT/tests/e2e" "$logs" "$pytest_rc" "$wall" <<'PY'
import pathlib, re, sys
sys.path.insert(0, sys.argv[1])
from conftest import valgrind_log_problems      # the same reading as the tests'
logs, pytest_rc, wall = pathlib.Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

kinds = {"proxy": "tierproxy daemons started by the tests",
         "tierproxy": "other tierproxy runs (--check, --version)",
         "tierctl": "tierctl runs"}
runs = {k: [] for k in kinds}
for log in sorted(logs.glob("*.log")):
    if log.name == "pytest.log":
        continue
    if re.search(r"\.proxy\d+\.log$", log.name):
        kind = "proxy"
    else:
        kind = log.name.split(".", 1)[0]
        if kind not in runs:
            continue
    problems, finished = valgrind_log_problems(log)
    runs[kind].append((log, problems, finished))

bad = 0
print()
print("valgrind summary (%s)" % logs)
for kind, what in kinds.items():
    rs = runs[kind]
    if not rs and kind != "proxy":
        continue
    with_problems = [r for r in rs if r[1]]
    unfinished = sum(1 for r in rs if not r[2])
    bad += len(with_problems)
    print("  %-42s %4d run, %d with leaks or errors%s" % (
        what + ":", len(rs), len(with_problems),
        (", %d without a leak check (killed)" % unfinished) if unfinished else ""))
    for log, problems, _ in with_problems:
        print("    %s\n      %s" % (log, "; ".join(problems)))

# pytest's own last line: "N passed, N failed, N skipped, N xfailed, ... in S s"
final = ""
log = logs / "pytest.log"
if log.exists():
    for line in log.read_text(errors="replace").splitlines():
        m = re.match(r"^=*\s*((\d+ [a-z]+,? ?)+) in [\d.]+s", line.strip())
        if m:
            final = m.group(1).strip().rstrip(",")
print("  pytest: %s (exit %d); wall time %dm%02ds"
      % (final or "no summary line (see %s)" % log, pytest_rc, wall // 60, wall % 60))
sys.exit(1 if bad or pytest_rc != 0 else 0)
PY
