#!/usr/bin/env bash
# etc/bench.sh - tierproxy throughput benchmark, side by side with nginx proxy_pass, on
# loopback (127.0.0.1 only). Reproduces the README's "Benchmark" figures with one command:
#
#   etc/setup.sh --bench     # once: installs wrk, nginx and its Lua module (this script installs nothing)
#   etc/bench.sh             # builds if needed, runs ~7 minutes, prints a markdown report
#
# Starts (each in its own process group, all stopped by PID on exit):
#   upstream          nginx, 1 worker, 200 with a fixed ~100-byte JSON body (without nginx:
#                     etc/bench/upstream.c, a small epoll server compiled on the fly)
#   redis-server      on a free port, --save '' --appendonly no (for tierproxy_redis)
#   nginx_proxy       nginx proxy_pass, 1 worker, upstream keepalive (only when nginx exists)
#   nginx_lua_redis   the peer doing our job: nginx + access_by_lua, one EVALSHA of a
#                     sliding-log script per request in the same redis-server
#                     (etc/bench/peer/, copied from ../shared/bench/lua/); skipped, and said
#                     so in the report, when nginx's Lua module or lua-resty-redis is missing
#   floor_proxy_opt   etc/bench/floor's libmicrohttpd + libcurl proxy that does nothing else
#                     (built with etc/bench/floor/build.sh into $BUILD_DIR/floor): the floor
#                     of tierproxy's design
#   tierproxy_memory  tierproxy, workers = 1, store = memory
#   tierproxy_redis   tierproxy, workers = 1, store = redis
# with a catalog made by build/tiers/tierctl: plan "bench" (sliding-log, 1000000000/s:
# nothing is rejected) with 100 users and a key each, and plan "bench429" (1/min: all but
# the first request of each key get 429) with 100 more. wrk drives each row in turn
# (-t1 -c$CONNS --latency, keys rotating per request, a $WARMUP s unrecorded warm-up right
# before each $DURATION s measured run), the whole cycle $CYCLES times (rows interleaved).
# Each cycle also runs, for P7, both tierproxy rows at -c$P7_CONNS and with the bench429 keys,
# and, for S5, tierproxy_memory at -c$S5_CONNS with the bench keys and with the bench429 keys
# back to back (their order swapped every cycle): a refusal kept alive against a forward. Their
# warm-ups count the proxy's system calls (perf stat, raw_syscalls:sys_enter), when perf can.
#
# Before/after: BASELINE_TIERPROXY_BIN=/path/to/older/tierproxy adds, for each tierproxy row
# in ROWS, its pair (or list them in ROWS yourself, next to their pair):
#   tierproxy_memory_baseline, tierproxy_redis_baseline   that binary, same config, same Redis
# Each runs right after its pair in odd cycles and right before it in even ones, so drift of
# the host within a cycle falls on both sides; no P7 runs for them. They read the same catalog
# unless BASELINE_TIERCTL_BIN is given, which makes them a catalog (and keys) of their own
# with that tierctl, for an older proxy that cannot read the newer catalog (the sanity checks
# fail on a catalog a proxy cannot read). BASELINE_FLOOR_BIN=/path/to/older/floor_proxy_opt
# (an older etc/bench/floor built with its build.sh) adds floor_proxy_opt_baseline beside
# floor_proxy_opt the same way. The report compares each pair's proxy CPU µs per
# request: after/before is the median of per-cycle ratios (both rows from the same cycle), and
# the run's noise is the min-max of those ratios: "within noise" when that range holds 1.00,
# "worse" ("better") when every cycle is above (below) 1.00; 3 cycles at least to judge.
#
# Reported: median req/s, ratios to nginx_proxy and direct (medians of per-cycle ratios),
# p50/p99, CPU µs per request of every process (utime+stime of its process group from
# /proc/PID/stat; wrk's own from `times`), Redis EVALSHA calls and Redis CPU per request
# (INFO commandstats, INFO cpu), SQLite statements per request (an LD_PRELOAD counter,
# etc/bench/sqlite_count.c, in both tierproxy processes), a verdict per target P1-P7, and
# one per target S1-S6 of issue 15 (against floor_proxy_opt and nginx_lua_redis; S5 from
# the P7 runs and the S5 runs; S6 from etc/ws_idle.py, run once after the cycles: WS_IDLE=1).
# A run during which processes not ours (or the hypervisor: steal) took more than BUSY_PCT %
# of a core is "disturbed" and repeated, up to MAX_RETRY times.
#
# Output: the report on stdout and in $RESULTS_DIR/report.md; raw wrk outputs, per-run
# figures (runs.txt), configs and logs in $RESULTS_DIR (default build/bench-results/<UTC time>).
# Progress goes to stderr.
#
# Knobs (environment):
#   DURATION=10 WARMUP=2 CYCLES=3 CONNS=64 P7_CONNS=2*CONNS THREADS=1
#   ROWS="direct nginx_proxy nginx_lua_redis floor_proxy_opt tierproxy_memory tierproxy_redis"
#   P7=1 (0: skip the P7 runs, and so S5's goodput)
#   S5=1 S5_CONNS=16 (S5=0: skip the S5 runs, the refusal kept alive against a forward)
#   WS_IDLE=1 WS_IDLE_N=9900 (0: skip etc/ws_idle.py's idle WebSockets, and so S6)
#   BUSY_PCT=15 MAX_RETRY=2 RETRY_PAUSE=10 QUIET_MAX=60 (s to wait for a quiet box at start)
#   UPSTREAM=auto|nginx|builtin   BUILD_DIR=build NO_BUILD=0   TIERPROXY_BIN TIERCTL_BIN
#   BENCH_PLAN_FLAGS="--quota 1000000000/month" (more LIMIT-FLAGS for plan bench)
#   BENCH_COST=N (plan bench's requests cost N: tierctl cost set bench "* /" N)
#   BASELINE_TIERPROXY_BIN BASELINE_TIERCTL_BIN BASELINE_FLOOR_BIN   RESULTS_DIR
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/etc/bench
cd "$ROOT"

case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "etc/bench.sh: no arguments expected (knobs are environment variables; see --help)" >&2; exit 2 ;;
esac

# the exact command, as typed: the knobs given in the environment, then the script
KNOBS=(DURATION WARMUP CYCLES CONNS P7_CONNS THREADS ROWS P7 S5 S5_CONNS WS_IDLE BUSY_PCT MAX_RETRY RETRY_PAUSE QUIET_MAX
       UPSTREAM BUILD_DIR NO_BUILD TIERPROXY_BIN TIERCTL_BIN BASELINE_TIERPROXY_BIN BASELINE_TIERCTL_BIN BASELINE_FLOOR_BIN RESULTS_DIR)
COMMAND=""
for v in "${KNOBS[@]}"; do
  [[ -n ${!v+x} ]] && COMMAND+="$v=$(printf '%q' "${!v}") "
done
COMMAND+="etc/bench.sh"

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
CYCLES=${CYCLES:-3}
CONNS=${CONNS:-64}
P7_CONNS=${P7_CONNS:-$((2 * CONNS))}
THREADS=${THREADS:-1}
ROWS=${ROWS:-"direct nginx_proxy nginx_lua_redis floor_proxy_opt tierproxy_memory tierproxy_redis"}
P7=${P7:-1}
S5=${S5:-1}
S5_CONNS=${S5_CONNS:-16}
WS_IDLE=${WS_IDLE:-1}
WS_IDLE_N=${WS_IDLE_N:-9900}
BUSY_PCT=${BUSY_PCT:-15}
MAX_RETRY=${MAX_RETRY:-2}
RETRY_PAUSE=${RETRY_PAUSE:-10}
QUIET_MAX=${QUIET_MAX:-60}
UPSTREAM=${UPSTREAM:-auto}
BUILD_DIR=${BUILD_DIR:-build}
NO_BUILD=${NO_BUILD:-0}
KEYS=100
HIGH_RATE=1000000000/s
DENY_RATE=1/min
PEER_WINDOW_MS=1000          # nginx_lua_redis: the sliding log's window and a limit nothing reaches,
PEER_LIMIT=1000000000        # as ../shared/bench/run.sh's defaults (and plan bench's 1000000000/s)
BODY='{"status":"ok","service":"bench-upstream","message":"fixed response body","id":1234567890,"v":1}'

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for r in $ROWS; do
  case $r in
    direct|nginx_proxy|nginx_lua_redis|floor_proxy_opt|tierproxy_memory|tierproxy_redis) ;;
    tierproxy_memory_baseline|tierproxy_redis_baseline)
      [[ -n ${BASELINE_TIERPROXY_BIN:-} ]] || die "row $r needs BASELINE_TIERPROXY_BIN"
      [[ " $ROWS " == *" ${r%_baseline} "* ]] || die "row $r needs its pair ${r%_baseline} in ROWS" ;;
    floor_proxy_opt_baseline)
      [[ -n ${BASELINE_FLOOR_BIN:-} ]] || die "row $r needs BASELINE_FLOOR_BIN"
      [[ " $ROWS " == *" floor_proxy_opt "* ]] || die "row $r needs its pair floor_proxy_opt in ROWS" ;;
    *) die "unknown row in ROWS: $r" ;;
  esac
done
if [[ -n ${BASELINE_TIERPROXY_BIN:-} ]]; then   # given a baseline, compare every tierproxy row in ROWS
  for r in tierproxy_memory tierproxy_redis; do
    [[ " $ROWS " == *" $r "* && " $ROWS " != *" ${r}_baseline "* ]] && ROWS+=" ${r}_baseline"
  done
fi
if [[ -n ${BASELINE_FLOOR_BIN:-} && " $ROWS " == *" floor_proxy_opt "* && " $ROWS " != *" floor_proxy_opt_baseline "* ]]; then
  ROWS=${ROWS/floor_proxy_opt/floor_proxy_opt floor_proxy_opt_baseline}
fi
for tool in wrk redis-server redis-cli curl ss awk setsid timeout getconf cc; do
  command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool (etc/setup.sh --bench installs what the benchmark needs)"
done
PY=/usr/bin/python3
[[ -x $PY ]] || PY=$(command -v python3) || die "missing python3"
HAVE_NGINX=0
command -v nginx >/dev/null 2>&1 && HAVE_NGINX=1
# nginx_lua_redis needs nginx's Lua module (Debian: libnginx-mod-http-lua, a dynamic module;
# OpenResty: built in) and lua-resty-redis (Debian: lua-nginx-redis, module "nginx.redis").
# Without them the row is skipped, and the report says why.
PEER_WHY=""                  # why nginx_lua_redis cannot run here ("" = it can)
PEER_LOAD_MODULES=""         # the load_module lines its config needs
peer_candidate() {           # peer_candidate PKG : "; Debian's candidate is VERSION" when apt knows one
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" { print $2 }')
  [[ -n $c ]] && echo "; $1 $c is installable: etc/setup.sh --bench"
  return 0
}
if [[ " $ROWS " == *" nginx_lua_redis "* ]]; then
  if [[ $HAVE_NGINX != 1 ]]; then
    PEER_WHY="nginx not installed (etc/setup.sh --bench installs nginx, libnginx-mod-http-lua, lua-nginx-redis)"
  else
    nginx_v=$(nginx -V 2>&1)
    mods=$(grep -o -- '--modules-path=[^ ]*' <<<"$nginx_v" | cut -d= -f2)
    mods=${mods:-/usr/lib/nginx/modules}
    if grep -q -- 'lua-nginx-module' <<<"$nginx_v"; then
      :                      # built in (OpenResty)
    elif [[ -f $mods/ngx_http_lua_module.so && -f $mods/ndk_http_module.so ]]; then
      PEER_LOAD_MODULES="load_module $mods/ndk_http_module.so;"$'\n'"load_module $mods/ngx_http_lua_module.so;"
    else
      PEER_WHY="libnginx-mod-http-lua not installed (no ngx_http_lua_module.so in $mods, nor Lua built into nginx -V)$(peer_candidate libnginx-mod-http-lua)"
    fi
    if [[ -z $PEER_WHY ]]; then
      PEER_WHY="lua-resty-redis not installed (Debian: lua-nginx-redis)$(peer_candidate lua-nginx-redis)"
      for f in /usr/share/lua/5.1/resty/redis.lua /usr/share/lua/5.1/nginx/redis.lua /usr/local/share/lua/5.1/resty/redis.lua \
               /usr/local/openresty/lualib/resty/redis.lua; do
        [[ -f $f ]] && { PEER_WHY=""; break; }
      done
    fi
  fi
  [[ -n $PEER_WHY ]] && log "nginx_lua_redis will be skipped: $PEER_WHY"
fi
case $UPSTREAM in
  auto) [[ $HAVE_NGINX == 1 ]] && UPSTREAM=nginx || UPSTREAM=builtin ;;
  nginx) [[ $HAVE_NGINX == 1 ]] || die "UPSTREAM=nginx but nginx is not installed (etc/setup.sh --bench)" ;;
  builtin) ;;
  *) die "UPSTREAM must be auto, nginx or builtin" ;;
esac

# ------------------------------------------------------------------ build
if [[ $NO_BUILD != 1 ]]; then
  if [[ -f $BUILD_DIR/build.ninja ]]; then
    ninja -C "$BUILD_DIR" >/dev/null || die "build failed: ninja -C $BUILD_DIR"
  else
    meson setup "$BUILD_DIR" >/dev/null && ninja -C "$BUILD_DIR" >/dev/null || die "build failed in $BUILD_DIR"
  fi
fi
TIERPROXY_BIN=$(realpath "${TIERPROXY_BIN:-$BUILD_DIR/proxy/tierproxy}")
TIERCTL_BIN=$(realpath "${TIERCTL_BIN:-$BUILD_DIR/tiers/tierctl}")
[[ -x $TIERPROXY_BIN && -x $TIERCTL_BIN ]] || die "not built: $TIERPROXY_BIN / $TIERCTL_BIN"
if [[ -n ${BASELINE_TIERPROXY_BIN:-} ]]; then
  BASELINE_TIERPROXY_BIN=$(realpath "$BASELINE_TIERPROXY_BIN")
  [[ -x $BASELINE_TIERPROXY_BIN ]] || die "BASELINE_TIERPROXY_BIN is not an executable: $BASELINE_TIERPROXY_BIN"
fi
if [[ -n ${BASELINE_TIERCTL_BIN:-} ]]; then
  BASELINE_TIERCTL_BIN=$(realpath "$BASELINE_TIERCTL_BIN")
  [[ -x $BASELINE_TIERCTL_BIN ]] || die "BASELINE_TIERCTL_BIN is not an executable: $BASELINE_TIERCTL_BIN"
fi
if [[ -n ${BASELINE_FLOOR_BIN:-} ]]; then
  BASELINE_FLOOR_BIN=$(realpath "$BASELINE_FLOOR_BIN")
  [[ -x $BASELINE_FLOOR_BIN ]] || die "BASELINE_FLOOR_BIN is not an executable: $BASELINE_FLOOR_BIN"
fi
FLOOR_BIN="" FLOOR_LIBS=""
if [[ " $ROWS " == *" floor_proxy_opt "* ]]; then
  # the floor is built from its sources the way etc/bench/floor/README.md says (seconds);
  # with NO_BUILD=1 an existing binary is used as it is
  mkdir -p "$BUILD_DIR/floor"
  FLOOR_BIN=$(cd "$BUILD_DIR/floor" && pwd)/floor_proxy_opt
  if [[ $NO_BUILD != 1 || ! -x $FLOOR_BIN ]]; then
    "$BENCH/floor/build.sh" "$(dirname "$FLOOR_BIN")" >/dev/null ||
      die "could not build the floor: etc/bench/floor/build.sh $(dirname "$FLOOR_BIN") (needs libmicrohttpd, libcurl, libevent headers)"
  fi
  [[ -x $FLOOR_BIN ]] || die "not built: $FLOOR_BIN"
  FLOOR_LIBS=$(for lib in libmicrohttpd libcurl libevent; do printf '%s %s, ' "$lib" "$(pkg-config --modversion "$lib" 2>/dev/null || echo '?')"; done)
  FLOOR_LIBS=${FLOOR_LIBS%, }
fi
build_info() {               # build_info BIN : "buildtype b_sanitize=..., commit" of the meson build dir holding BIN
  local d bt="?"
  d=$(dirname "$1")
  while [[ $d != / && ! -d $d/meson-info ]]; do d=$(dirname "$d"); done
  if [[ -f $d/meson-info/intro-buildoptions.json ]]; then
    bt=$("$PY" -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(open(sys.argv[1]))}; print(o.get("buildtype","?"), "b_sanitize=" + str(o.get("b_sanitize","none")))' \
      "$d/meson-info/intro-buildoptions.json" 2>/dev/null || echo "?")
  fi
  echo "$bt, $(git -C "$(dirname "$1")" describe --always --dirty 2>/dev/null || echo '?')"
}

CLK_TCK=$(getconf CLK_TCK)
NPROC=$(nproc)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

RESULTS_DIR=${RESULTS_DIR:-$ROOT/$BUILD_DIR/bench-results/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$RESULTS_DIR/wrk" "$RESULTS_DIR/conf" "$RESULTS_DIR/logs"
RESULTS_DIR=$(cd "$RESULTS_DIR" && pwd)
RUNDIR=$(mktemp -d /tmp/tierproxy-bench.XXXXXX)
chmod 755 "$RUNDIR"          # nginx workers run as nobody when we are root
if [[ $EUID -eq 0 ]]; then USER_LINE="user nobody nogroup;"; else USER_LINE=""; fi

# the processes, their CPU and their counters
source "$ROOT/etc/bench/bench_lib.sh"

# ------------------------------------------------------------------ one wrk run
# run_wrk RUN TARGET PORT SECONDS CONNS KEYFILE OUT : sets R_LINE (key=value facts)
run_wrk() {
  local run=$1 target=$2 port=$3 secs=$4 conns=$5 keyfile=$6 out=$7 rc rb ra q0=0 q1=0
  rb=$(redis_stats)
  [[ $target == tierproxy_* ]] && q0=$(sqlite_count "$target")
  SYSCALLS_PER_REQ=-1
  local counting=0
  [[ $HAVE_PERF == 1 && $SYSCALLS_OF == "$target" ]] && { counting=1; syscalls_start "$target" "$out.syscalls"; }
  snapshot S0
  set +e
  # wrk runs in the background and we wait for it, so that a signal stops the benchmark at
  # once (cleanup stops wrk through WRK_TPID); the subshell's `times` gives wrk's CPU
  rm -f "$out.pid"
  (
    WRK_KEYFILE=$keyfile timeout $((secs + 30)) wrk -t"$THREADS" -c"$conns" -d"${secs}s" --latency --timeout 5s \
      -s "$BENCH/wrk-keys.lua" "http://127.0.0.1:$port/" >"$out" 2>&1 &
    echo $! >"$out.pid"
    wait $!
    rc=$?
    times >"$out.times"
    exit $rc
  ) &
  local sub=$!
  while [[ ! -s $out.pid ]] && kill -0 "$sub" 2>/dev/null; do sleep 0.01; done
  WRK_TPID=$(cat "$out.pid" 2>/dev/null || true)
  wait "$sub"
  rc=$?
  WRK_TPID=""
  rm -f "$out.pid"
  set -e
  snapshot S1
  [[ $target == tierproxy_* ]] && q1=$(sqlite_count "$target")
  ra=$(redis_stats)
  [[ $rc -eq 0 ]] || die "wrk failed (rc=$rc) for $run: $(tail -5 "$out")"
  grep -q '^RESULT ' "$out" || die "no RESULT line from wrk for $run: $(tail -5 "$out")"
  [[ $counting == 1 ]] && syscalls_stop "$out.syscalls" "$(sed -n 's/^RESULT requests=\([0-9]*\).*/\1/p' "$out")"
  local wk px=0
  wk=$(awk -v hz="$CLK_TCK" 'NR == 2 { n = split($0, a, " "); s = 0
      for (i = 1; i <= n; i++) { split(a[i], mm, "m"); sub(/s$/, "", mm[2]); s += mm[1] * 60 + mm[2] }
      printf "%d", s * hz + 0.5 }' "$out.times")
  [[ $target != direct ]] && px=$(ticks_of "$target")
  R_LINE=$(awk -v hz="$CLK_TCK" -v t0="${S0[t]}" -v t1="${S1[t]}" -v up="$(ticks_of upstream)" -v px="$px" \
      -v rd="$(ticks_of redis)" -v wk="$wk" -v kth=$(( S1[kth] - S0[kth] )) -v busy=$(( S1[busy] - S0[busy] )) \
      -v ours="$(ours_ticks)" -v steal=$(( S1[steal] - S0[steal] )) -v q=$(( q1 - q0 )) -v rb="$rb" -v ra="$ra" '
    function field(line, k,   n, a, i, p) { n = split(line, a, " "); for (i = 1; i <= n; i++) { split(a[i], p, "="); if (p[1] == k) return p[2] } return 0 }
    /^RESULT / {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); r[kv[1]] = kv[2] }
      wall = t1 - t0; pct = 100 / hz / wall
      n = r["requests"] > 0 ? r["requests"] : 1
      us = 1e6 / hz / n
      other = (busy - ours - wk - kth) * pct; if (other < 0) other = 0
      printf "rps=%.1f requests=%d non2xx=%d sockerr=%d p50_us=%d p90_us=%d p99_us=%d mean_us=%.1f ", \
        r["requests"] / (r["duration_us"] / 1e6), r["requests"], r["err_status"], \
        r["err_connect"] + r["err_read"] + r["err_write"] + r["err_timeout"], \
        r["lat_p50_us"], r["lat_p90_us"], r["lat_p99_us"], r["lat_mean_us"]
      printf "cpu_proxy=%.1f cpu_up=%.1f cpu_redis=%.1f cpu_wrk=%.1f cpu_kth=%.1f cpu_other=%.1f steal=%.1f busy_pct=%.1f ", \
        px * pct, up * pct, rd * pct, wk * pct, kth * pct, other, steal * pct, busy * pct
      printf "us_proxy=%.2f us_up=%.2f us_redis=%.2f us_wrk=%.2f ", px * us, up * us, rd * us, wk * us
      printf "redis_info_cpu_us=%.3f evalsha_calls=%d evalsha_usec=%d eval_calls=%d redis_all_calls=%d sqlite_stmts=%d wall=%.2f\n", \
        (field(ra, "cpu_s") - field(rb, "cpu_s")) * 1e6 / n, field(ra, "evalsha_calls") - field(rb, "evalsha_calls"), \
        field(ra, "evalsha_usec") - field(rb, "evalsha_usec"), field(ra, "eval_calls") - field(rb, "eval_calls"), \
        field(ra, "all_calls") - field(rb, "all_calls"), q, wall
    }' "$out")
}

RUNS=$RESULTS_DIR/runs.txt
: >"$RUNS"

# measure CYCLE RUN TARGET CONNS KEYFILE : warm-up + measured run, repeated while disturbed
measure() {
  local cycle=$1 run=$2 target=$3 conns=$4 keyfile=$5 attempt=0 other steal dist
  local port=${PORT_OF[$target]} syscalls
  while :; do
    [[ $run == *@s5-* ]] && SYSCALLS_OF=$target
    run_wrk "$run" "$target" "$port" "$WARMUP" "$conns" "$keyfile" "$RESULTS_DIR/wrk/$run.c$cycle.a$attempt.warmup.txt"
    syscalls=$SYSCALLS_PER_REQ
    SYSCALLS_OF=""
    run_wrk "$run" "$target" "$port" "$DURATION" "$conns" "$keyfile" "$RESULTS_DIR/wrk/$run.c$cycle.a$attempt.txt"
    R_LINE+=" syscalls_per_req=$syscalls"
    other=$(kv cpu_other "$R_LINE"); steal=$(kv steal "$R_LINE")
    dist=$(awk -v x="$other" -v y="$steal" -v t="$BUSY_PCT" 'BEGIN { print (x + y > t) ? 1 : 0 }')
    if [[ $dist == 1 ]] && (( attempt < MAX_RETRY )); then
      log "  $run cycle $cycle: disturbed (other processes ${other}% + steal ${steal}% of a core); repeating"
      echo "cycle=$cycle run=$run target=$target conns=$conns attempt=$attempt kept=0 dist=1 $R_LINE" >>"$RUNS"
      attempt=$((attempt + 1))
      sleep "$RETRY_PAUSE"
      wait_quiet
      continue
    fi
    echo "cycle=$cycle run=$run target=$target conns=$conns attempt=$attempt kept=1 dist=$dist $R_LINE" >>"$RUNS"
    log "  $run cycle $cycle: $(kv rps "$R_LINE") req/s p50=$(kv p50_us "$R_LINE")us p99=$(kv p99_us "$R_LINE")us non2xx=$(kv non2xx "$R_LINE") µs/req proxy=$(kv us_proxy "$R_LINE") up=$(kv us_up "$R_LINE") redis=$(kv us_redis "$R_LINE") wrk=$(kv us_wrk "$R_LINE") other=${other}% steal=${steal}%$([[ $dist == 1 ]] && echo ' (disturbed, kept)')"
    break
  done
}

want() { [[ " $ROWS " == *" $1 "* ]]; }

# ------------------------------------------------------------------ catalog: plans, users, keys
log "run dir $RUNDIR, results $RESULTS_DIR"
DB=$RUNDIR/plans.db
KEYFILE=$RESULTS_DIR/keys.txt            # API keys of plan "bench" (nothing rejected)
DENYFILE=$RESULTS_DIR/keys-429.txt       # API keys of plan "bench429" (1/min)
# make_catalog TIERCTL DB KEYFILE DENYFILE
make_catalog() {
  local ctl=$1 db=$2 keyfile=$3 denyfile=$4 i
  : >"$keyfile"; : >"$denyfile"
  log "making the catalog $(basename "$db"): plan bench ($HIGH_RATE${BENCH_PLAN_FLAGS:+ $BENCH_PLAN_FLAGS}${BENCH_COST:+, cost $BENCH_COST})$([[ $P7 == 1 || $S5 == 1 ]] && echo ", plan bench429 ($DENY_RATE)"), $KEYS users each"
  # tierctl says each change on stderr: kept in the run dir, not on the terminal; the key is
  # the last line of key create's stdout (before 62f439e tierctl printed a heading line first)
  "$ctl" --db "$db" init >/dev/null 2>>"$RUNDIR/tierctl.log"
  # shellcheck disable=SC2086 # BENCH_PLAN_FLAGS is a list of flags
  "$ctl" --db "$db" plan add bench --rate "$HIGH_RATE" --algorithm sliding-log ${BENCH_PLAN_FLAGS:-} >/dev/null \
    2>>"$RUNDIR/tierctl.log" || die "tierctl plan add bench ${BENCH_PLAN_FLAGS:-} failed (see $RUNDIR/tierctl.log)"
  if [[ -n ${BENCH_COST:-} ]]; then
    "$ctl" --db "$db" cost set bench "* /" "$BENCH_COST" >/dev/null 2>>"$RUNDIR/tierctl.log" ||
      die "tierctl cost set bench failed (see $RUNDIR/tierctl.log)"
  fi
  "$ctl" --db "$db" plan add bench429 --rate "$DENY_RATE" --algorithm sliding-log >/dev/null 2>>"$RUNDIR/tierctl.log"
  for i in $(seq 1 "$KEYS"); do
    "$ctl" --db "$db" user add "bench-$i" --plan bench >/dev/null 2>>"$RUNDIR/tierctl.log"
    "$ctl" --db "$db" key create "bench-$i" 2>>"$RUNDIR/tierctl.log" | tail -n 1 >>"$keyfile"
    if [[ $P7 == 1 || $S5 == 1 ]]; then
      "$ctl" --db "$db" user add "bench429-$i" --plan bench429 >/dev/null 2>>"$RUNDIR/tierctl.log"
      "$ctl" --db "$db" key create "bench429-$i" 2>>"$RUNDIR/tierctl.log" | tail -n 1 >>"$denyfile"
    fi
  done
  [[ $(grep -c . "$keyfile") == "$KEYS" ]] || die "expected $KEYS keys in $keyfile"
}
declare -A DB_OF=() KEYFILE_OF=() DENYFILE_OF=()   # per tierproxy row; other rows use KEYFILE
if want tierproxy_memory || want tierproxy_redis; then
  make_catalog "$TIERCTL_BIN" "$DB" "$KEYFILE" "$DENYFILE"
else
  : >"$KEYFILE"; : >"$DENYFILE"
  for i in $(seq 1 "$KEYS"); do echo "key-$i" >>"$KEYFILE"; done   # no proxy checks them
fi
for store in memory redis; do
  DB_OF[tierproxy_$store]=$DB; KEYFILE_OF[tierproxy_$store]=$KEYFILE; DENYFILE_OF[tierproxy_$store]=$DENYFILE
  DB_OF[tierproxy_${store}_baseline]=$DB; KEYFILE_OF[tierproxy_${store}_baseline]=$KEYFILE
  DENYFILE_OF[tierproxy_${store}_baseline]=$DENYFILE
done
if [[ -n ${BASELINE_TIERCTL_BIN:-} ]] && { want tierproxy_memory_baseline || want tierproxy_redis_baseline; }; then
  make_catalog "$BASELINE_TIERCTL_BIN" "$RUNDIR/plans-baseline.db" "$RESULTS_DIR/keys-baseline.txt" "$RESULTS_DIR/keys-429-baseline.txt"
  for store in memory redis; do
    DB_OF[tierproxy_${store}_baseline]=$RUNDIR/plans-baseline.db
    KEYFILE_OF[tierproxy_${store}_baseline]=$RESULTS_DIR/keys-baseline.txt
    DENYFILE_OF[tierproxy_${store}_baseline]=$RESULTS_DIR/keys-429-baseline.txt
  done
fi
KEY1=$(head -n 1 "$KEYFILE")

# ------------------------------------------------------------------ start everything
wait_quiet

if [[ $UPSTREAM == nginx ]]; then
  start_nginx upstream upstream.nginx.conf.tmpl 0
  UP_DESC="nginx $(nginx -v 2>&1 | sed 's/^nginx version: nginx\///'), 1 worker, \`return 200\` with a fixed ${#BODY}-byte JSON body, keepalive"
else
  cc -O2 -o "$RUNDIR/upstream" "$BENCH/upstream.c" || die "could not compile $BENCH/upstream.c"
  free_port port
  start_bg upstream "$RUNDIR/upstream" "$port" "$BODY"
  PORT_OF[upstream]=$port
  UP_DESC="etc/bench/upstream.c (nginx not installed), 1 thread, epoll, fixed ${#BODY}-byte JSON body, keepalive"
fi
UP_PORT=${PORT_OF[upstream]}
PORT_OF[direct]=$UP_PORT
wait_http upstream "$UP_PORT" "$KEY1" 15
body=$(curl -s --max-time 2 "http://127.0.0.1:$UP_PORT/")
[[ $body == "$BODY" ]] || die "upstream answered an unexpected body: $body"

declare -a ACTIVE=()
declare -A SKIP_WHY=() DESC_OF=()
DESC_OF[direct]="wrk -> upstream directly (what the box can do for the upstream + wrk pair)"
want direct && ACTIVE+=(direct)
if want nginx_proxy; then
  if [[ $HAVE_NGINX == 1 ]]; then
    start_nginx nginx_proxy proxy.nginx.conf.tmpl "$UP_PORT"
    wait_http nginx_proxy "${PORT_OF[nginx_proxy]}" "$KEY1" 15
    ACTIVE+=(nginx_proxy)
    DESC_OF[nginx_proxy]="nginx proxy_pass, 1 worker, upstream keepalive, no limiting"
  else
    SKIP_WHY[nginx_proxy]="nginx not installed (etc/setup.sh --bench)"
  fi
fi

PEER_RUN=0
if want nginx_lua_redis; then
  if [[ -z $PEER_WHY ]]; then PEER_RUN=1; else SKIP_WHY[nginx_lua_redis]=$PEER_WHY; fi
fi
if want tierproxy_redis || want tierproxy_redis_baseline || [[ $PEER_RUN == 1 ]]; then
  free_port REDIS_PORT
  start_bg redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --dir "$RUNDIR"
  for i in $(seq 1 100); do
    [[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null || true) == PONG ]] && break
    kill -0 "${PID_OF[redis]}" 2>/dev/null || die "redis-server exited: $(tail -5 "$RUNDIR/redis.out.log")"
    sleep 0.1
  done
  [[ $(redis-cli -p "$REDIS_PORT" ping) == PONG ]] || die "redis-server not answering on $REDIS_PORT"
  log "redis-server on 127.0.0.1:$REDIS_PORT"
fi

if [[ $PEER_RUN == 1 ]]; then
  # the peer's script is loaded once here, as ../shared/bench/run.sh does; bench_rl.lua falls
  # back to EVAL on NOSCRIPT all the same
  PEER_SHA=$(redis-cli -p "$REDIS_PORT" -x script load <"$BENCH/peer/sliding_log.redis.lua")
  [[ $PEER_SHA == "$(sha1sum <"$BENCH/peer/sliding_log.redis.lua" | cut -d' ' -f1)" ]] ||
    die "redis-server gave an unexpected sha for etc/bench/peer/sliding_log.redis.lua: $PEER_SHA"
  start_nginx nginx_lua_redis peer/nginx-lua-redis.nginx.conf.tmpl "$UP_PORT" LOAD_MODULES="$PEER_LOAD_MODULES" \
    PEER_DIR="$BENCH/peer" REDIS_PORT="$REDIS_PORT" SCRIPT_SHA="$PEER_SHA" WINDOW_MS="$PEER_WINDOW_MS" RL_LIMIT="$PEER_LIMIT"
  wait_http nginx_lua_redis "${PORT_OF[nginx_lua_redis]}" "$KEY1" 15
  ACTIVE+=(nginx_lua_redis)
  DESC_OF[nginx_lua_redis]="the peer doing our job: nginx + access_by_lua (lua-resty-redis, pooled connections), 1 worker, upstream keepalive, one EVALSHA per request of the sliding-log script (ZREMRANGEBYSCORE+ZCARD+ZADD+PEXPIRE; etc/bench/peer/, as ../shared/bench/lua/) in the same redis-server as tierproxy_redis, key per Authorization, window $PEER_WINDOW_MS ms, limit $PEER_LIMIT (nothing rejected)"
fi

if want floor_proxy_opt; then
  free_port port
  start_bg floor_proxy_opt "$FLOOR_BIN" "$port" "$UP_PORT"
  PORT_OF[floor_proxy_opt]=$port
  wait_http floor_proxy_opt "$port" "$KEY1" 15
  ACTIVE+=(floor_proxy_opt)
  DESC_OF[floor_proxy_opt]="etc/bench/floor floor_proxy_opt: libmicrohttpd (external epoll on libevent) + libcurl multi-socket with pooled handles, forwarding to the same upstream and nothing else (no auth, no limits, no header rewriting): the floor of tierproxy's design"
fi
if want floor_proxy_opt_baseline; then
  free_port port
  start_bg floor_proxy_opt_baseline "$BASELINE_FLOOR_BIN" "$port" "$UP_PORT"
  PORT_OF[floor_proxy_opt_baseline]=$port
  wait_http floor_proxy_opt_baseline "$port" "$KEY1" 15
  ACTIVE+=(floor_proxy_opt_baseline)
  DESC_OF[floor_proxy_opt_baseline]="the same with BASELINE_FLOOR_BIN $BASELINE_FLOOR_BIN"
fi

SHIM=$RUNDIR/sqlite_count.so
cc -O2 -shared -fPIC -o "$SHIM" "$BENCH/sqlite_count.c" -ldl || die "could not compile $BENCH/sqlite_count.c"
for name in tierproxy_memory tierproxy_memory_baseline tierproxy_redis tierproxy_redis_baseline; do
  want "$name" || continue
  store=${name#tierproxy_}; store=${store%_baseline}
  bin=$TIERPROXY_BIN; [[ $name == *_baseline ]] && bin=$BASELINE_TIERPROXY_BIN
  free_port port
  cat >"$RUNDIR/$name.ini" <<INI
[proxy]
listen = 127.0.0.1:$port
upstream = http://127.0.0.1:$UP_PORT
workers = 1
[admin]
listen =
[plans]
db = ${DB_OF[$name]}
[limits]
store = $store
redis = redis://127.0.0.1:${REDIS_PORT:-6379}/0
[log]
access = off
INI
  cp -f "$RUNDIR/$name.ini" "$RESULTS_DIR/conf/"
  truncate -s 4096 "$RUNDIR/$name.sqlite-count"
  start_bg "$name" env LD_PRELOAD="$SHIM" TP_BENCH_SQLITE_COUNTER="$RUNDIR/$name.sqlite-count" \
    "$bin" -c "$RUNDIR/$name.ini"
  PORT_OF[$name]=$port
  wait_http "$name" "$port" "$(head -n 1 "${KEYFILE_OF[$name]}")" 30
  ACTIVE+=("$name")
  DESC_OF[$name]="tierproxy, workers = 1, store = $store, access log off; plan bench: sliding-log $HIGH_RATE (nothing rejected)"
  if [[ $name == *_baseline ]]; then
    DESC_OF[$name]="the same with BASELINE_TIERPROXY_BIN $bin ($(build_info "$bin"))${BASELINE_TIERCTL_BIN:+, its own catalog made by $BASELINE_TIERCTL_BIN}"
  fi
done
[[ ${#ACTIVE[@]} -gt 0 ]] || die "no row to run (ROWS=$ROWS)"

# ------------------------------------------------------------------ sanity checks
for row in "${ACTIVE[@]}"; do
  code=$(curl -s -o "$RUNDIR/check.body" -w '%{http_code}' --max-time 3 -H "Authorization: Bearer $(head -n 1 "${KEYFILE_OF[$row]:-$KEYFILE}")" "http://127.0.0.1:${PORT_OF[$row]}/")
  [[ $code == 200 ]] || die "sanity: $row answered $code for an allowed key"
  [[ $(<"$RUNDIR/check.body") == "$BODY" ]] || die "sanity: $row returned a different body: $(head -c 200 "$RUNDIR/check.body")"
done
for row in tierproxy_memory tierproxy_memory_baseline tierproxy_redis tierproxy_redis_baseline; do
  [[ -n ${PORT_OF[$row]:-} ]] || continue
  c=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer bench-no-such-key" "http://127.0.0.1:${PORT_OF[$row]}/")
  [[ $c == 401 ]] || die "sanity: $row answered $c for an unknown key (expected 401)"
  if [[ $P7 == 1 || $S5 == 1 ]]; then
    k=$(head -n 1 "${DENYFILE_OF[$row]}")
    c1=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $k" "http://127.0.0.1:${PORT_OF[$row]}/")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $k" "http://127.0.0.1:${PORT_OF[$row]}/")
    [[ $c2 == 429 ]] || die "sanity: $row answered $c1 then $c2 for a bench429 key (expected 429 the second time)"
  fi
done
for row in tierproxy_redis tierproxy_redis_baseline; do
  [[ -n ${PORT_OF[$row]:-} ]] || continue
  b=$(redis_stats)
  curl -s -o /dev/null -H "Authorization: Bearer $(head -n 1 "${KEYFILE_OF[$row]}")" "http://127.0.0.1:${PORT_OF[$row]}/"
  a=$(redis_stats)
  (( $(kv evalsha_calls "$a") + $(kv eval_calls "$a") > $(kv evalsha_calls "$b") + $(kv eval_calls "$b") )) \
    || die "sanity: $row made no EVAL/EVALSHA call in redis-server for a request"
done
if [[ -n ${PORT_OF[nginx_lua_redis]:-} ]]; then
  b=$(redis_stats)
  curl -s -o /dev/null -H "Authorization: Bearer $KEY1" "http://127.0.0.1:${PORT_OF[nginx_lua_redis]}/"
  a=$(redis_stats)
  (( $(kv evalsha_calls "$a") + $(kv eval_calls "$a") > $(kv evalsha_calls "$b") + $(kv eval_calls "$b") )) \
    || die "sanity: nginx_lua_redis made no EVAL/EVALSHA call in redis-server for a request"
  n=$(redis-cli -p "$REDIS_PORT" zcard "rl:Bearer $KEY1")
  [[ $n -ge 1 ]] || die "sanity: nginx_lua_redis left no sliding-log entry in redis-server (zcard 'rl:Bearer <key 1>' = $n)"
fi
log "all rows answer correctly: ${ACTIVE[*]}"

# ------------------------------------------------------------------ load runs
declare -a P7_TARGETS=()
if [[ $P7 == 1 ]]; then
  for row in tierproxy_memory tierproxy_redis; do [[ -n ${PORT_OF[$row]:-} ]] && P7_TARGETS+=("$row"); done
fi
# the floor at -c$P7_CONNS too: what the design itself keeps of its goodput under twice the load
P7_FLOOR=""
[[ $P7 == 1 && -n ${PORT_OF[floor_proxy_opt]:-} ]] && P7_FLOOR=floor_proxy_opt
# S5: a refusal kept alive against a forward, memory store, -c$S5_CONNS, back to back
S5_TARGET=""
[[ $S5 == 1 && -n ${PORT_OF[tierproxy_memory]:-} ]] && S5_TARGET=tierproxy_memory
nruns=$(( ${#ACTIVE[@]} + 2 * ${#P7_TARGETS[@]} + (${#P7_FLOOR} > 0 ? 1 : 0) + (${#S5_TARGET} > 0 ? 2 : 0) ))
log "$CYCLES cycles x $nruns runs x $((WARMUP + DURATION)) s: about $(( CYCLES * nruns * (WARMUP + DURATION + 1) / 60 + 1 )) min"
for cycle in $(seq 1 "$CYCLES"); do
  log "cycle $cycle/$CYCLES"
  order=("${ACTIVE[@]}")
  if (( cycle % 2 == 0 )); then              # even cycles: each baseline row just before its pair
    for i in "${!order[@]}"; do
      if [[ ${order[$i]} == *_baseline && $i -gt 0 && ${order[$((i - 1))]} == "${order[$i]%_baseline}" ]]; then
        order[$i]=${order[$((i - 1))]}; order[$((i - 1))]=${order[$i]}_baseline
      fi
    done
  fi
  for row in "${order[@]}"; do measure "$cycle" "$row" "$row" "$CONNS" "${KEYFILE_OF[$row]:-$KEYFILE}"; done
  for row in "${P7_TARGETS[@]}"; do measure "$cycle" "${row}@c$P7_CONNS" "$row" "$P7_CONNS" "$KEYFILE"; done
  [[ -n $P7_FLOOR ]] && measure "$cycle" "$P7_FLOOR@c$P7_CONNS" "$P7_FLOOR" "$P7_CONNS" "$KEYFILE"
  for row in "${P7_TARGETS[@]}"; do measure "$cycle" "${row}@429" "$row" "$CONNS" "$DENYFILE"; done
  if [[ -n $S5_TARGET ]]; then
    s5=("$S5_TARGET@s5-fwd $KEYFILE" "$S5_TARGET@s5-429 $DENYFILE")
    (( cycle % 2 == 0 )) && s5=("${s5[1]}" "${s5[0]}")
    for r in "${s5[@]}"; do measure "$cycle" "${r%% *}" "$S5_TARGET" "$S5_CONNS" "${r#* }"; done
  fi
done

# ------------------------------------------------------------------ S6: idle WebSockets
# etc/ws_idle.py starts its own upstream and tierproxy (memory store, one worker) with the
# binaries under test, holds WS_IDLE_N idle tunnels and reads the proxy's RSS and CPU.
WS_IDLE_OUT=$RESULTS_DIR/ws_idle.txt
if [[ $WS_IDLE == 1 ]] && want tierproxy_memory; then
  log "S6: $WS_IDLE_N idle WebSockets through one tierproxy (etc/ws_idle.py)"
  "$PY" "$ROOT/etc/ws_idle.py" -n "$WS_IDLE_N" --workers 1 --proxy-bin "$TIERPROXY_BIN" \
    --tierctl-bin "$TIERCTL_BIN" >"$WS_IDLE_OUT" 2>&1 || log "etc/ws_idle.py exited with $? (see $WS_IDLE_OUT)"
fi

# ------------------------------------------------------------------ report
META=$RESULTS_DIR/meta.txt
{
  printf 'date=%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')"
  printf 'command=%s\n' "$COMMAND"
  printf 'machine=%s\n' "$(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), kernel $(uname -r), $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), $(awk '/MemTotal/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo)"
  printf 'tools=%s\n' "$( [[ $HAVE_NGINX == 1 ]] && nginx -v 2>&1 | sed 's/^nginx version: //')$( [[ $PEER_RUN == 1 ]] && printf ' with libnginx-mod-http-lua %s and lua-resty-redis %s' "$(dpkg-query -W -f='${Version}' libnginx-mod-http-lua 2>/dev/null || echo '?')" "$(dpkg-query -W -f='${Version}' lua-nginx-redis 2>/dev/null || echo '?')"), $(redis-server --version | awk '{ print "redis", $3 }' | sed 's/v=//'), $(wrk -v 2>&1 | head -n1 | sed 's/ *Copyright.*//'), $("$TIERPROXY_BIN" --version 2>/dev/null | head -n1) ($(build_info "$TIERPROXY_BIN"))${FLOOR_LIBS:+, floor_proxy_opt on $FLOOR_LIBS}"
  printf 'load=wrk -t%s -c%s -d%ss --latency --timeout 5s -s etc/bench/wrk-keys.lua (after a %ss unrecorded warm-up), Authorization: Bearer KEY rotating per request over %s API keys made with tierctl; rows interleaved, %s cycles; every server has one worker\n' \
    "$THREADS" "$CONNS" "$DURATION" "$WARMUP" "$KEYS" "$CYCLES"
  printf 'floor_bin=%s\n' "$FLOOR_BIN"
  printf 'conns=%s\np7_conns=%s\nbusy_pct=%s\nmax_retry=%s\nnproc=%s\nresults=%s\nduration=%s\n' "$CONNS" "$P7_CONNS" "$BUSY_PCT" "$MAX_RETRY" "$NPROC" "$RESULTS_DIR" "$DURATION"
  printf 'active=%s\n' "${ACTIVE[*]}"
  printf 'p7_targets=%s\n' "${P7_TARGETS[*]}"
  printf 'p7_floor=%s\n' "$P7_FLOOR"
  printf 's5_target=%s\ns5_conns=%s\nhave_perf=%s\n' "$S5_TARGET" "$S5_CONNS" "$HAVE_PERF"
  if [[ -s $WS_IDLE_OUT ]]; then
    printf 'ws_idle.opened=%s\n' "$(sed -n 's/^connections opened *: \([0-9]*\) of \([0-9]*\).*/\1 \2/p' "$WS_IDLE_OUT")"
    printf 'ws_idle.bytes=%s\n' "$(sed -n 's/^per connection *: .*(\([0-9]*\) bytes).*/\1/p' "$WS_IDLE_OUT")"
    printf 'ws_idle.cpu=%s\n' "$(sed -n 's/^CPU while idle *: \([0-9.]*\) s over \([0-9.]*\) s.*/\1 \2/p' "$WS_IDLE_OUT")"
    printf 'ws_idle.echo=%s\n' "$(sed -n 's/^echo first\/last *: //p' "$WS_IDLE_OUT")"
  fi
  for row in "${ACTIVE[@]}"; do printf 'desc.%s=%s\n' "$row" "${DESC_OF[$row]}"; done
  for row in "${!SKIP_WHY[@]}"; do printf 'skip.%s=%s\n' "$row" "${SKIP_WHY[$row]}"; done
  printf 'desc.upstream=%s\n' "$UP_DESC"
  for name in upstream "${ACTIVE[@]}" redis; do
    [[ -n ${CMD_OF[$name]:-} ]] && printf 'cmd.%s=setsid %s\n' "$name" "${CMD_OF[$name]//$RUNDIR/<rundir>}"
  done
} >"$META"
"$PY" "$BENCH/report.py" "$RUNS" "$META" >"$RESULTS_DIR/report.md" || die "report.py failed"
cat "$RESULTS_DIR/report.md"
log "report written to $RESULTS_DIR/report.md"
