# etc/bench/bench_lib.sh - the helpers etc/bench.sh runs on: the processes it starts (each
# in its own process group, stopped by its leader), their CPU ticks, Redis' and SQLite's
# counters and system calls per request. Sourced by etc/bench.sh, whose variables
# (RUNDIR, RESULTS_DIR, the arrays below) it uses; not a program of its own.
# shellcheck shell=bash disable=SC2034,SC2154  # the variables are bench.sh's

# ------------------------------------------------------------------ process management
declare -a STARTED=()        # pids we started; each leads its own process group
declare -A PID_OF=() CMD_OF=() PORT_OF=()

stop_group() {               # stop_group PID: the process group we started, by its leader
  local pid=$1 i
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
  for i in $(seq 1 120); do  # tierproxy drains for up to 10 s on SIGTERM
    kill -0 -- "-$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

CLEANED=0
WRK_TPID=""
cleanup() {
  local rc=$? i f
  [[ $CLEANED -eq 1 ]] && return
  CLEANED=1
  trap - EXIT INT TERM
  if [[ -n ${WRK_TPID:-} ]] && kill -0 "$WRK_TPID" 2>/dev/null; then   # timeout(1) passes TERM on to wrk
    kill -TERM "$WRK_TPID" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$WRK_TPID" 2>/dev/null || break; sleep 0.1; done
  fi
  for (( i=${#STARTED[@]}-1; i>=0; i-- )); do stop_group "${STARTED[$i]}"; done
  if [[ -d $RUNDIR ]]; then
    for f in "$RUNDIR"/*.log; do
      [[ -f $f ]] && { tail -c 65536 "$f" >"$RESULTS_DIR/logs/$(basename "$f")" 2>/dev/null || true; }
    done
    rm -rf "$RUNDIR"
  fi
  [[ $rc -ne 0 ]] && log "exited with status $rc; logs in $RESULTS_DIR/logs"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_bg() {                 # start_bg NAME CMD... : in the background, own session and process group
  local name=$1 pid i pg=""
  shift
  setsid "$@" >"$RUNDIR/$name.out.log" 2>&1 </dev/null &
  pid=$!
  STARTED+=("$pid")
  PID_OF[$name]=$pid
  CMD_OF[$name]=$(printf '%q ' "$@")
  # setsid() happens after the fork: wait until the child leads its own group, so that a
  # group kill can never reach this script's group
  for i in $(seq 1 200); do
    pg=$(awk '{ sub(/^.*\) /, ""); print $3 }' "/proc/$pid/stat" 2>/dev/null || true)
    [[ $pg == "$pid" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.01
  done
  [[ $pg == "$pid" ]] || die "$name (pid $pid) did not start in its own process group: $(tail -5 "$RUNDIR/$name.out.log" 2>/dev/null)"
  log "started $name pid=$pid"
}

declare -A USED_PORT=()
free_port() {                # free_port VAR : a free TCP port below the ephemeral range
  local lo _ p tries=0
  read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
  (( lo > 12000 )) || lo=32768
  while :; do
    p=$(( 10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000) ))
    if [[ -z ${USED_PORT[$p]:-} && -z $(ss -Htan "sport = :$p") ]]; then
      USED_PORT[$p]=1
      printf -v "$1" '%s' "$p"
      return 0
    fi
    tries=$((tries + 1))
    (( tries < 500 )) || die "could not find a free port"
  done
}

wait_http() {                # wait_http NAME PORT KEY TIMEOUT_S : until it answers 200
  local name=$1 port=$2 key=$3 deadline=$((SECONDS + $4)) code
  while (( SECONDS < deadline )); do
    kill -0 "${PID_OF[$name]}" 2>/dev/null || die "$name exited during startup: $(tail -5 "$RUNDIR/$name.out.log" "$RUNDIR/$name.error.log" 2>/dev/null)"
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 -H "Authorization: Bearer $key" "http://127.0.0.1:$port/" || true)
    [[ $code == 200 ]] && return 0
    sleep 0.1
  done
  die "$name not answering 200 on 127.0.0.1:$port after $4 s (last: $code): $(tail -5 "$RUNDIR/$name.out.log" 2>/dev/null)"
}

render() {                   # render TEMPLATE OUTFILE KEY=VALUE...
  local tmpl=$1 out=$2 kv content
  shift 2
  content=$(<"$tmpl")
  for kv in "$@"; do content=${content//@${kv%%=*}@/${kv#*=}}; done
  printf '%s\n' "$content" >"$out"
  if grep -n '@[A-Z_][A-Z_]*@' "$out" >&2; then die "unrendered placeholder in $out"; fi
  cp -f "$out" "$RESULTS_DIR/conf/"
}

start_nginx() {              # start_nginx NAME TEMPLATE UPSTREAM_PORT [KEY=VALUE...] (more placeholders)
  local name=$1 tmpl=$2 up=$3 port
  shift 3
  free_port port
  render "$BENCH/$tmpl" "$RUNDIR/$name.conf" NAME="$name" PORT="$port" RUNDIR="$RUNDIR" \
    UPSTREAM_PORT="$up" USER_LINE="$USER_LINE" BODY="$BODY" "$@"
  mkdir -p "$RUNDIR/$name.tmp"
  nginx -t -q -p "$RUNDIR/" -e "$RUNDIR/$name.error.log" -c "$RUNDIR/$name.conf" || die "nginx config test failed for $name"
  start_bg "$name" nginx -p "$RUNDIR/" -e "$RUNDIR/$name.error.log" -c "$RUNDIR/$name.conf"
  PORT_OF[$name]=$port
}

# ------------------------------------------------------------------ CPU accounting
# A snapshot: /proc/stat busy/idle/steal ticks, utime+stime of each process group we
# started, of kernel threads, and of all other processes. Deltas over a run give each
# server's CPU, and how much CPU processes not ours took from the run (disturbance).
declare -A S0=() S1=()
snapshot() {                 # snapshot ARRAYNAME
  local -n _s=$1
  local k v
  _s=()
  while read -r k v; do _s[$k]=$v; done < <(
    { head -n1 /proc/stat; cat /proc/[0-9]*/stat 2>/dev/null; } | awk -v want="${STARTED[*]}" '
      BEGIN { n = split(want, a, " "); for (i = 1; i <= n; i++) w[a[i]] = 1 }
      NR == 1 { print "busy", $2 + $3 + $4 + $7 + $8; print "steal", $9; next }
      {
        pid = $1; s = $0; sub(/^.*\) /, "", s); split(s, f, " ")
        t = f[12] + f[13]                      # utime + stime (f[k] is stat field k+2)
        if (f[3] in w) g[f[3]] += t            # by process group
        else if (pid == 2 || f[2] == 2) kth += t
        else oth += t
      }
      END { for (p in w) print "g" p, g[p] + 0; print "kth", kth + 0; print "procs_other", oth + 0 }')
  _s[t]=$(date +%s.%N)
}

ticks_of() {                 # ticks_of NAME : CPU ticks of that process group between S0 and S1
  [[ -n ${PID_OF[$1]:-} ]] || { echo 0; return; }
  local g=g${PID_OF[$1]}
  echo $(( ${S1[$g]:-0} - ${S0[$g]:-0} ))
}

ours_ticks() {
  local g sum=0
  for g in "${STARTED[@]}"; do sum=$(( sum + ${S1[g$g]:-0} - ${S0[g$g]:-0} )); done
  echo "$sum"
}

wait_quiet() {               # wait (up to QUIET_MAX s) until processes not ours use < BUSY_PCT % of a core
  local deadline=$((SECONDS + QUIET_MAX)) other
  while :; do
    snapshot S0; sleep 2; snapshot S1
    other=$(awk -v b=$(( S1[busy] - S0[busy] )) -v o="$(ours_ticks)" -v k=$(( S1[kth] - S0[kth] )) \
        -v w="$(awk -v a="${S0[t]}" -v b="${S1[t]}" 'BEGIN { print b - a }')" -v hz="$CLK_TCK" \
        'BEGIN { x = (b - o - k) / hz / w * 100; printf "%.1f", (x < 0 ? 0 : x) }')
    awk -v x="$other" -v t="$BUSY_PCT" 'BEGIN { exit !(x < t) }' && return 0
    (( SECONDS < deadline )) || { log "box still busy (${other}% of a core used by other processes); going on"; return 0; }
    log "box busy (other processes use ${other}% of a core); waiting"
  done
}

# ------------------------------------------------------------------ Redis and SQLite counters
redis_stats() {              # one line: cpu_s=... evalsha_calls=... evalsha_usec=... eval_calls=... all_calls=...
  [[ -n ${REDIS_PORT:-} ]] || { echo "cpu_s=0 evalsha_calls=0 evalsha_usec=0 eval_calls=0 all_calls=0"; return; }
  redis-cli -p "$REDIS_PORT" info all | tr -d '\r' | awk -F'[:,=]' '
    $1 == "used_cpu_sys" || $1 == "used_cpu_user" { cpu += $2 }
    $1 ~ /^cmdstat_/ { all += $3; if ($1 == "cmdstat_evalsha") { es = $3; eu = $5 } if ($1 == "cmdstat_eval") ev = $3 }
    END { printf "cpu_s=%.6f evalsha_calls=%d evalsha_usec=%d eval_calls=%d all_calls=%d\n", cpu, es, eu, ev, all }'
}
sqlite_count() {             # sqlite_count NAME : statements (sqlite3_step + sqlite3_exec) so far
  local f=$RUNDIR/$1.sqlite-count
  [[ -f $f ]] || { echo 0; return; }
  od -An -t u8 -N16 "$f" | awk '{ print $1 + $2 }'
}
kv() {                       # kv KEY LINE
  awk -v k="$1" '{ for (i = 1; i <= NF; i++) { split($i, a, "="); if (a[1] == k) { print a[2]; exit } } }' <<<"$2"
}

# ------------------------------------------------------------------ system calls
# The S5 runs' warm-ups count the proxy's system calls: perf stat on the tracepoint
# raw_syscalls:sys_enter, every thread of the process (root, or perf_event_paranoid <= -1).
# Only in warm-ups, so that the counting costs nothing in a measured run.
HAVE_PERF=0
if command -v perf >/dev/null 2>&1 && perf stat -e raw_syscalls:sys_enter -x, -o /dev/null true >/dev/null 2>&1; then
  HAVE_PERF=1
fi
SYSCALLS_OF=""               # set by measure: the row whose warm-up counts its system calls
SYSCALLS_PER_REQ=-1          # run_wrk's count per request (-1: not counted)
syscalls_start() {           # syscalls_start NAME OUT : perf stat on NAME's process, in the background
  perf stat -e raw_syscalls:sys_enter -x, -o "$2" -p "${PID_OF[$1]}" >/dev/null 2>&1 &
  PERF_PID=$!
  sleep 0.2                  # perf attaches to every thread before wrk starts
}
syscalls_stop() {            # syscalls_stop OUT REQUESTS : sets SYSCALLS_PER_REQ
  kill -INT "$PERF_PID" 2>/dev/null || true
  wait "$PERF_PID" 2>/dev/null || true
  SYSCALLS_PER_REQ=$(awk -F, -v n="$2" '$3 == "raw_syscalls:sys_enter" && $1 ~ /^[0-9]+$/ && n > 0 { printf "%.2f", $1 / n; f = 1 }
                                        END { if (!f) print -1 }' "$1" 2>/dev/null || echo -1)
}
