#!/usr/bin/env bash
# How long a probe takes from the command to each rank's first answer, on
# the CPU backend: per configuration (ranks, agent epoch, how commands reach
# the agents) one job of the reference megakernel that runs on, its agents
# with the standard monitors, and RUNS probes one after the other.  For each
# probe and rank, from the collector's own store: when the probe was stored
# (probes.created_ns), when its command was handed to the rank's agent
# (commands.sent_ns), when the agent attached it (probe_runs.attached_host_ns,
# the agent's clock: the same host here) and when the rank's first result
# was stored (probe_runs.first_ns: readable by the next answer; the CLI
# polls every 10 ms until the first).  Per probe the last rank's time counts
# for "attached" and "every rank"; min/median/max over the probes, in ms.
# "push": the agents listen on the survey socket and the collector tells
# them at once that commands wait; "ack": without the survey socket,
# commands come with the ack of a rank's next summary (the path agents
# without --survey still take).  docs/probes.md and docs/PERF.md have the
# figures.
#
#   bench/probe_start.sh [--bin BUILD_DIR] [--runs N] [--ranks "2 4"] [--epochs "100 250"]
#                        [--modes "push ack"]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build runs=10 ranks_list="2 4" epochs="100 250" modes="push ack"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2 ;;
    --runs) runs=$2 ;;
    --ranks) ranks_list=$2 ;;
    --epochs) epochs=$2 ;;
    --modes) modes=$2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "probe_start.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift 2
done
for m in $modes; do
  case "$m" in push|ack) ;; *) echo "probe_start.sh: mode '$m': push or ack" >&2; exit 2 ;; esac
done
command -v jq >/dev/null || { echo "probe_start.sh: needs jq" >&2; exit 1; }
collector=$bin/collector/mkscope-collector agent=$bin/agent/mkscope-agent
cli_bin=$bin/collector/cli/mkscope bench=$bin/bench/mkscope-bench
for b in "$collector" "$agent" "$cli_bin" "$bench"; do
  [ -x "$b" ] || { echo "probe_start.sh: $b is not built (--bin)" >&2; exit 1; }
done
work=$(mktemp -d /tmp/mks-probe-start.XXXXXX)
pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 -- "-$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null || true; done
  pids=()
}
trap 'stop_all; [ -n "${KEEP:-}" ] || rm -rf "$work"; rm -f /dev/shm/mkscope.pstart.* /dev/shm/mksbench.pstart' EXIT
start() { local log=$1; shift; setsid "$@" >>"$log" 2>&1 </dev/null & pids+=($!); }
cli() { "$cli_bin" --collector "ipc://$d/cli" "$@"; }

# ms of a list of ns values: min, median, max
stats() { sort -n | awk '{ v[NR] = $1 / 1e6 } END { if (!NR) { print "- - -"; exit }
  printf "%.0f %.0f %.0f", v[1], v[int((NR + 1) / 2)], v[NR] }'; }

printf '%-5s %5s %6s %5s | %-13s | %-13s | %-13s | %-13s | %s\n' mode ranks epoch runs \
  "cmd min/med/max" "attached" "first rank" "every rank" "every rank within 2 epochs"
for n in $ranks_list; do
  for e in $epochs; do
    for m in $modes; do
      d=$work/$m-$n-$e
      mkdir -p "$d"
      start "$d/collector.log" "$collector" --ingest "ipc://$d/ingest" --survey "ipc://$d/survey" \
        --cli "ipc://$d/cli" --metrics off --db "$d/store.db" --ucx-port off
      for _ in $(seq 100); do [ -S "$d/cli" ] && break; sleep 0.1; done
      for r in $(seq 0 $((n - 1))); do
        sv=(); [ "$m" = push ] && sv=(--survey "ipc://$d/survey")
        start "$d/agent-$r.log" "$agent" --job pstart --rank "$r" --collector "ipc://$d/ingest" \
          "${sv[@]}" --epoch-ms "$e"
      done
      start "$d/bench.log" "$bench" run --ranks "$n" --job pstart --steps 100000 \
        --step-interval-us 5000
      ok=0
      for _ in $(seq 300); do
        cli -f json sql "SELECT COUNT(*) AS n FROM ranks WHERE job = 'pstart'" 2>/dev/null |
          jq -e --argjson n "$n" '.rows[0].n == $n' >/dev/null && { ok=1; break; }
        sleep 0.1
      done
      [ $ok = 1 ] || { echo "probe_start.sh: $n ranks did not register: $(tail -2 "$d/bench.log")" >&2; exit 1; }
      sleep 1 # every rank's summaries flowing
      for i in $(seq "$runs"); do
        cli --job pstart probe 'count() by rank where event = task_end' --for 1s \
          >>"$d/probe.txt" 2>&1 || { echo "probe_start.sh: a probe failed: $(tail -3 "$d/probe.txt")" >&2; exit 1; }
        sleep 0.$((RANDOM % 10)) # start the next one at another phase of the epochs
      done
      cli -f json sql "SELECT p.id AS id, r.rank AS rank, c.sent_ns - p.created_ns AS sent,
          r.attached_host_ns - p.created_ns AS attached, r.first_ns - p.created_ns AS first
          FROM probes p JOIN probe_runs r ON r.probe_id = p.id
          JOIN commands c ON c.job = p.job AND c.rank = r.rank AND c.kind = 'probe'
           AND c.name = 'probe-' || p.id ORDER BY p.id, r.rank" >"$d/times.json"
      stop_all
      got=$(jq '[.rows[].id] | unique | length' "$d/times.json")
      full=$(jq --argjson n "$n" '[.rows | group_by(.id)[] | select(length == $n)] | length' "$d/times.json")
      [ "$got" = "$runs" ] && [ "$full" = "$runs" ] ||
        { echo "probe_start.sh: $m $n ranks ${e} ms: $full of $runs probes answered on every rank" >&2; exit 1; }
      cmd=$(jq '.rows[].sent' "$d/times.json" | stats)
      att=$(jq '.rows | group_by(.id)[] | map(.attached) | max' "$d/times.json" | stats)
      first=$(jq '.rows | group_by(.id)[] | map(.first) | min' "$d/times.json" | stats)
      every=$(jq '.rows | group_by(.id)[] | map(.first) | max' "$d/times.json" | stats)
      within=$(jq --argjson lim $((2 * e * 1000000)) \
        '[.rows | group_by(.id)[] | map(.first) | max | select(. <= $lim)] | length' "$d/times.json")
      printf '%-5s %5s %6s %5s | %-13s | %-13s | %-13s | %-13s | %s/%s\n' "$m" "$n" "$e" "$runs" \
        "${cmd// //}" "${att// //}" "${first// //}" "${every// //}" "$within" "$runs"
    done
  done
done
