#!/usr/bin/env bash
# etc/bench/cluster_load/run.sh - what one Redis Cluster master sustains of the proxy's real
# limiter checks, and what three sustain (issue 14), with Redis CPU per check, on loopback.
#
#   etc/bench/cluster_load/run.sh          # builds cluster_load if needed, ~1 min per cycle
#
# Starts, on free loopback ports, each process remembered by PID and stopped by it on exit:
#   a private Redis Cluster of 3 masters + 3 replicas (redis-server --cluster-enabled yes,
#   bus ports picked free too, --cluster-node-timeout 2000, --save '' --appendonly no; made
#   with redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes, then waited for
#   until every node says cluster_state:ok and CLUSTER SLOTS lists 3 masters with a replica
#   each, as tests/e2e/cluster.py does), and one plain redis-server for reference.
# Then, per cycle, three runs of cluster_load (cluster_load.c here: the proxy's limiter_redis,
# EVALSHA of check.lua, K checks in flight per master, subjects whose slot the master owns):
#   plain      the plain redis-server (every subject)
#   1 master   one cluster master, only subjects of its slots
#   3 masters  the three masters at once, K in flight each
# Every node is emptied (FLUSHALL) before each run, so each starts from the same empty store.
# Prints a markdown table (also in $RESULTS_DIR/report.md); raw outputs in $RESULTS_DIR.
#
# A run during which processes other than these Redis servers and cluster_load took more than
# BUSY_PCT % of a core (cluster_load's "other_cpu_pct": the box's busy CPU from /proc/stat
# minus the servers' INFO cpu and its own) is disturbed: repeated up to MAX_RETRY times
# after RETRY_PAUSE s, the last one kept whatever it shows (the table says which).
#
# Knobs (environment): DURATION=10 WARMUP=2 INFLIGHT=64 SUBJECTS=10000 CYCLES=1
#   BUSY_PCT=15 MAX_RETRY=2 RETRY_PAUSE=10
#   BUILD_DIR=build-bench (meson setup -Dtests=false -Dbench=true when missing)
#   CLUSTER_LOAD_BIN (skip the build) RESULTS_DIR (default $BUILD_DIR/cluster-load-results/<UTC time>)
set -euo pipefail
export LC_ALL=C

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$ROOT"

case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "run.sh: no arguments expected (knobs are environment variables; see --help)" >&2; exit 2 ;;
esac

KNOBS=(DURATION WARMUP INFLIGHT SUBJECTS CYCLES BUSY_PCT MAX_RETRY RETRY_PAUSE BUILD_DIR CLUSTER_LOAD_BIN RESULTS_DIR)
COMMAND=""
for v in "${KNOBS[@]}"; do
  [[ -n ${!v+x} ]] && COMMAND+="$v=$(printf '%q' "${!v}") "
done
COMMAND+="etc/bench/cluster_load/run.sh"

DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
INFLIGHT=${INFLIGHT:-64}
SUBJECTS=${SUBJECTS:-10000}
CYCLES=${CYCLES:-1}
BUSY_PCT=${BUSY_PCT:-15}
MAX_RETRY=${MAX_RETRY:-2}
RETRY_PAUSE=${RETRY_PAUSE:-10}
BUILD_DIR=${BUILD_DIR:-build-bench}
RESULTS_DIR=${RESULTS_DIR:-$BUILD_DIR/cluster-load-results/$(date -u +%Y%m%dT%H%M%SZ)}
NODES=6

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

for tool in redis-server redis-cli ss awk setsid; do
  command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool"
done

# ------------------------------------------------------------------ build
if [[ -z ${CLUSTER_LOAD_BIN:-} ]]; then
  if [[ ! -f $BUILD_DIR/build.ninja ]]; then
    meson setup "$BUILD_DIR" -Dtests=false -Dbench=true >/dev/null || die "meson setup $BUILD_DIR failed"
  elif ! meson introspect "$BUILD_DIR" --buildoptions 2>/dev/null | grep -q '"name": "bench", "value": true'; then
    meson configure "$BUILD_DIR" -Dbench=true >/dev/null || die "meson configure $BUILD_DIR -Dbench=true failed"
  fi
  ninja -C "$BUILD_DIR" etc/bench/cluster_load/cluster_load >/dev/null || die "build failed: ninja -C $BUILD_DIR"
  CLUSTER_LOAD_BIN=$BUILD_DIR/etc/bench/cluster_load/cluster_load
fi
CLUSTER_LOAD_BIN=$(realpath "$CLUSTER_LOAD_BIN")
[[ -x $CLUSTER_LOAD_BIN ]] || die "not an executable: $CLUSTER_LOAD_BIN"

mkdir -p "$RESULTS_DIR"
RESULTS_DIR=$(realpath "$RESULTS_DIR")
RUNDIR=$(mktemp -d /tmp/cluster-load.XXXXXX)

# ------------------------------------------------------------------ processes, stopped by PID
declare -a STARTED=()
declare -A USED_PORT=()
CLEANED=0
cleanup() {
  local rc=$? pid
  [[ $CLEANED -eq 1 ]] && return
  CLEANED=1
  trap - EXIT INT TERM
  for pid in "${STARTED[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${STARTED[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
  done
  if [[ -d $RUNDIR ]]; then
    mkdir -p "$RESULTS_DIR/logs"
    find "$RUNDIR" -name '*.log' -exec sh -c 'tail -c 65536 "$1" >"$2/logs/$(echo "${1#$3/}" | tr / _)"' _ {} "$RESULTS_DIR" "$RUNDIR" \;
    rm -rf "$RUNDIR"
  fi
  [[ $rc -ne 0 ]] && log "exited with status $rc; logs in $RESULTS_DIR/logs"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

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

start_redis() {              # start_redis DIR PORT ARGS... : redis-server in the foreground, our child
  local dir=$1 port=$2
  shift 2
  mkdir -p "$dir"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --protected-mode no --dir "$dir" "$@" >"$dir/redis.log" 2>&1 </dev/null &
  STARTED+=("$!")
}

wait_ping() {                # wait_ping PORT
  for _ in $(seq 1 100); do
    [[ $(redis-cli -p "$1" ping 2>/dev/null || true) == PONG ]] && return 0
    sleep 0.1
  done
  die "redis-server on port $1 does not answer PING (logs in $RESULTS_DIR/logs)"
}

# ------------------------------------------------------------------ the cluster and the plain redis
declare -a PORTS=()
port="" bus=""
for _ in $(seq 1 "$NODES"); do
  free_port port
  free_port bus
  PORTS+=("$port")
  start_redis "$RUNDIR/node-$port" "$port" --cluster-enabled yes \
    --cluster-config-file "$RUNDIR/node-$port/nodes.conf" --cluster-port "$bus" --cluster-node-timeout 2000
done
free_port PLAIN_PORT
start_redis "$RUNDIR/plain" "$PLAIN_PORT"
for p in "${PORTS[@]}" "$PLAIN_PORT"; do wait_ping "$p"; done

create=()
for p in "${PORTS[@]}"; do create+=("127.0.0.1:$p"); done
redis-cli --cluster create "${create[@]}" --cluster-replicas 1 --cluster-yes >"$RUNDIR/cluster-create.log" 2>&1 \
  </dev/null || die "redis-cli --cluster create failed: $(tail -5 "$RUNDIR/cluster-create.log")"

masters_of() {               # masters_of PORT : ports of the masters that serve slots, as PORT sees them
  redis-cli -p "$1" cluster nodes 2>/dev/null |
    awk '$3 ~ /master/ && $3 !~ /fail/ && NF > 8 { split($2, a, "[:@]"); print a[2] }' | sort -n
}
cluster_ready() {            # every node ok, 3 masters serving, a replica listed for every range
  local p
  for p in "${PORTS[@]}"; do
    redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    [[ $(masters_of "$p" | wc -l) == 3 ]] || return 1
  done
  # 3 replicas in sync: CLUSTER SLOTS lists a replica only once it is (right after the
  # create it lists the masters alone for a few seconds), and cluster_load reads its CPU
  [[ $(redis-cli -p "${PORTS[0]}" cluster nodes | awk '$3 ~ /slave/ && $3 !~ /fail/' | wc -l) == 3 ]] || return 1
  for p in "${PORTS[@]}"; do
    if redis-cli -p "$p" info replication | grep -q '^role:slave'; then
      redis-cli -p "$p" info replication | grep -q '^master_link_status:up' || return 1
    fi
  done
  local slots
  slots=$(redis-cli -p "${PORTS[0]}" cluster slots)
  for p in "${PORTS[@]}"; do grep -qx "$p" <<<"$slots" || return 1; done
}
for _ in $(seq 1 150); do
  cluster_ready && break
  sleep 0.2
done
cluster_ready || die "the cluster did not reach cluster_state:ok with 3 masters and 3 replicas in 30 s"
mapfile -t MASTERS < <(masters_of "${PORTS[0]}")
log "cluster: masters ${MASTERS[*]}, all nodes ${PORTS[*]}; plain redis $PLAIN_PORT"

# ------------------------------------------------------------------ runs
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }
RUNS=$RESULTS_DIR/runs.txt
: >"$RUNS"
run_load() {                 # run_load CYCLE NAME URL... : one cluster_load run, repeated while disturbed
  local cycle=$1 name=$2 attempt=0
  shift 2
  while ! run_once "$cycle" "$name" "$attempt" "$@"; do
    attempt=$((attempt + 1))
    sleep "$RETRY_PAUSE"
  done
}
run_once() {                 # run_once CYCLE NAME ATTEMPT URL... : 1 when disturbed and to be repeated
  local cycle=$1 name=$2 attempt=$3 out load total per other kept=1
  shift 3
  for p in "${PORTS[@]}" "$PLAIN_PORT"; do
    # replicas refuse writes; FLUSHALL on a master reaches its replica
    redis-cli -p "$p" flushall >/dev/null 2>&1 || true
  done
  out=$RESULTS_DIR/$name.c$cycle.a$attempt.txt
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  "$CLUSTER_LOAD_BIN" -k "$INFLIGHT" -s "$SUBJECTS" -d "$DURATION" -w "$WARMUP" "$@" >"$out" 2>"$out.err" ||
    die "cluster_load failed for $name: $(tail -3 "$out.err")"
  total=$(grep '^RESULT master=total' "$out")
  per=$(grep '^RESULT master=' "$out" | grep -v 'master=total' | awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^checks_per_s=/) { sub(/.*=/, "", $i); printf "%s%.0f", sep, $i; sep = "/" } }')
  other=$(kv other_cpu_pct "$total")
  if awk -v o="$other" -v t="$BUSY_PCT" 'BEGIN { exit !(o > t) }' && (( attempt < MAX_RETRY )); then
    kept=0
  fi
  echo "cycle=$cycle run=$name attempt=$attempt kept=$kept loadavg_before=${load// /,} per_master=$per $total" >>"$RUNS"
  log "  $name: $(kv checks_per_s "$total") checks/s (per master $per); box busy $(kv box_busy_pct "$total")% of $((100 * $(nproc)))%, of which not ours ${other}%; load before $load$([[ $kept == 0 ]] && echo "; disturbed (not ours > ${BUSY_PCT}%), repeating")"
  [[ $kept == 1 ]]
}

PLAIN_URL=redis://127.0.0.1:$PLAIN_PORT
M_URLS=()
for p in "${MASTERS[@]}"; do M_URLS+=("redis://127.0.0.1:$p"); done
for cycle in $(seq 1 "$CYCLES"); do
  log "cycle $cycle/$CYCLES: plain, 1 master, 3 masters (${WARMUP} s warm-up + ${DURATION} s each)"
  run_load "$cycle" plain "$PLAIN_URL"
  run_load "$cycle" 1master "${M_URLS[0]}"
  run_load "$cycle" 3masters "${M_URLS[@]}"
done

# ------------------------------------------------------------------ report
{
  echo "# cluster_load: checks/s of Redis masters under the proxy's real check.lua calls"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); command: \`$COMMAND\`"
  echo "- machine: $(nproc) CPUs ($(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)), $(redis-server --version | awk '{ print "redis", $3 }' | sed 's/v=//')"
  echo "- plan: $(sed -n 's/^# plan: \([^;]*\);.*/\1/p' "$RESULTS_DIR/plain.c1.a0.txt"); ${INFLIGHT} checks in flight per master, ${SUBJECTS} subjects per master, ${WARMUP} s warm-up + ${DURATION} s measured; every node FLUSHALLed before each run"
  echo "- cluster: 3 masters + 3 replicas (each master's writes replicated to its replica on the same box), node timeout 2000 ms"
  echo
  echo "| cycle | run | checks/s total | per master | rejected | errors | Redis CPU µs/check (INFO cpu) | EVALSHA µs/call (commandstats) | replica CPU µs/check | generator µs/check (% core) | box busy % (of $((100 * $(nproc)))) | not ours % | load avg before |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  while read -r line; do
    [[ $(kv kept "$line") == 1 ]] || continue
    printf '| %s | %s | %.0f | %s | %s | %s | %.2f | %.2f | %.2f | %.2f (%s%%) | %.0f | %.0f | %s |\n' \
      "$(kv cycle "$line")" "$(kv run "$line")" "$(kv checks_per_s "$line")" "$(kv per_master "$line")" \
      "$(kv rejected "$line")" "$(( $(kv unavailable "$line") + $(kv send_failed "$line") ))" \
      "$(kv redis_cpu_us_per_check "$line")" "$(kv evalsha_us_per_call "$line")" \
      "$(kv replica_cpu_us_per_check "$line")" "$(kv gen_cpu_us_per_check "$line")" "$(kv gen_cpu_pct "$line")" \
      "$(kv box_busy_pct "$line")" "$(kv other_cpu_pct "$line")" "$(kv loadavg_before "$line" | tr , ' ')"
  done <"$RUNS"
  disturbed=$(grep -c ' kept=0 ' "$RUNS" || true)
  echo
  echo "Runs repeated because processes not ours took more than ${BUSY_PCT}% of a core: ${disturbed} (all in $RUNS)."
  echo "A kept run whose \"not ours %\" is above ${BUSY_PCT} was still disturbed after ${MAX_RETRY} repeats."
} >"$RESULTS_DIR/report.md"
cat "$RESULTS_DIR/report.md"
log "report in $RESULTS_DIR/report.md; raw outputs there too"
