#!/usr/bin/env bash
# A rank lost mid-run, each rank a process of its own with its agent:
#  1. rank 2's process is killed (-9): within two heartbeats the collector
#     has it as "exited" (status and metrics), and the diagnosis names rank 2
#     as the root of the stall of ranks 0, 1 and 3, each waiting on it;
#  2. a node is lost (rank 1's process and its agent killed together): within
#     two heartbeats of the agent's last word it is "silent", and rank 1 is
#     named as the root of the stall of ranks 0 and 2.
source "$(dirname "$0")/lib.sh"
hb_ms=1000

# state_of RANK: the rank's state in `mkscope status`
state_of() {
  cli --job "$job" -f json status 2>/dev/null | tr -d ' \n' |
    sed -E "s/.*\"rank\":$1,[^}]*\"state\":\"([a-z]+)\".*/\1/;t;s/.*/none/"
}

# run_job JOB RANKS: an agent and a megakernel rank process per rank
run_job() {
  local n=$2 r
  job=$1
  for ((r = 0; r < n; r++)); do
    start "$dir/$job-agent-$r.log" "$MKS_AGENT_BIN" --job "$job" --rank $r \
      --collector "ipc://$dir/ingest" --epoch-ms 50 --heartbeat-ms $hb_ms \
      --monitors "$MKS_MONITORS_DIR" -v
    eval "agent_$r=$started"
  done
  for ((r = 0; r < n; r++)); do
    bench_argv "$job" --ranks "$n" --rank $r --steps 100000
    start "$dir/$job-bench-$r.log" "${bench_cmd[@]}"
    eval "bench_$r=$started"
  done
  # every rank's summaries flow
  for _ in $(seq 200); do
    local k
    k=$(cli sql "SELECT COUNT(DISTINCT rank) FROM epochs WHERE job='$job' AND id > 0" 2>/dev/null |
        awk 'NR == 2 { print $1 }') || true
    [ "${k:-0}" = "$n" ] && break
    sleep 0.1
  done
  [ "${k:-0}" = "$n" ] || fail "$job: not every rank's summaries reached the collector"
  sleep 1
}

# wait_state RANK STATE: seconds (from now) until the rank shows STATE, or fail
wait_state() {
  local t0 s
  t0=$(date +%s%N)
  for _ in $(seq 100); do
    s=$(state_of "$1")
    [ "$s" = "$2" ] && break
    sleep 0.05
  done
  [ "$s" = "$2" ] || fail "rank $1 is '$s', not '$2', 5 s after it was lost"
  took_ms=$((($(date +%s%N) - t0) / 1000000))
}

# lost_group RANK STALLED: the diagnosis line naming RANK lost, once the
# peers STALLED (e.g. 0,1,3) are all taken for stalled (each needs its agent
# to report a few epochs past its last progress; on a loaded machine one
# may take longer than the others)
lost_group() {
  local line=""
  for _ in $(seq 60); do
    line=$(cli --job "$job" -f json diagnose 2>/dev/null | grep "\"cause\":\"rank_lost\",\"root\":\"$1\"") || true
    [ -n "$line" ] && echo "$line" | grep -q "\"stalled\":\[$2\]" && break
    sleep 0.25
  done
  echo "$line"
}

start_collector

# --- 1: a rank's process killed ---------------------------------------------------
run_job itr$$ 4
kill -KILL -- "-$bench_2"
wait_state 2 exited
echo "rank 2 killed: 'exited' after ${took_ms} ms"
[ "$took_ms" -le $((2 * hb_ms)) ] || fail "rank 2 taken for exited after $took_ms ms (> 2 heartbeats)"
# (to a file: under pipefail, grep -q leaving early would fail the CLI's write)
cli metrics >"$dir/metrics.txt"
grep -q "mkscope_rank_state{job=\"itr$$\",rank=\"2\",state=\"exited\"} 1" "$dir/metrics.txt" ||
  fail "metrics do not show rank 2 exited"
for r in 0 1 3; do
  [ "$(state_of $r)" = running ] || fail "rank $r is '$(state_of $r)', expected running"
done
line=$(lost_group 2 0,1,3)
echo "  $line"
[ -n "$line" ] || fail "the diagnosis names no lost rank 2"
echo "$line" | grep -q '"state":"exited"' || fail "rank 2 not named as exited"
echo "$line" | grep -q '"stalled":\[0,1,3\]' || fail "ranks 0, 1, 3 not named stalled on rank 2"
echo "$line" | grep -q '"chains":\[\[0,2\],\[1,2\],\[3,2\]\]' || fail "chains do not lead to rank 2"
cli --job "$job" -f dot waitchain >"$dir/waitchain.dot"
for r in 0 1 3; do
  grep -q "stalled$r -> lost2" "$dir/waitchain.dot" || fail "waitchain -f dot: no edge from rank $r to lost rank 2"
done
cli --job "$job" diagnose >"$dir/diagnose.txt"
head -n 4 "$dir/diagnose.txt"
for r in 0 1 3; do kill -TERM -- "-$(eval echo \$bench_$r)" 2>/dev/null || true; done
for r in 0 1 2 3; do kill -TERM -- "-$(eval echo \$agent_$r)" 2>/dev/null || true; done

# --- 2: a node lost: rank and agent killed together ----------------------------------
run_job itn$$ 3
kill -KILL -- "-$bench_1" "-$agent_1"
wait_state 1 silent
echo "rank 1 and its agent killed: 'silent' after ${took_ms} ms"
# two heartbeats since the agent was last heard (at most one heartbeat, or
# one epoch, before the kill), and the time a status takes on a loaded machine
[ "$took_ms" -le $((3 * hb_ms)) ] || fail "rank 1 taken for silent after $took_ms ms"
line=$(lost_group 1 0,2)
echo "  $line"
[ -n "$line" ] || fail "the diagnosis names no lost rank 1"
echo "$line" | grep -q '"state":"silent"' || fail "rank 1 not named as silent"
echo "$line" | grep -q '"stalled":\[0,2\]' || fail "ranks 0, 2 not named stalled on rank 1"
echo "lost ranks: named as the root of their peers' stalls"
