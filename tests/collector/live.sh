#!/usr/bin/env bash
# The collector with real agents and 4 CPU megakernel ranks:
#  1. an SLO trigger on one task class of one rank escalates that rank and
#     the ranks its remote waits lead to, under one escalation id; the agents
#     send the raw events over UCX to the collector's listener; the stored
#     trace holds only that class's events of the firing rank and the waits,
#     releases and transfers of the others, inside the escalation window,
#     every batch came over UCX, one trace shows all the ranks (flow arrows,
#     where both ends fell in the windows, join two ranks), and it exports
#     as Chrome JSON and as a Perfetto protobuf trace;
#  2. a BPF object attached from the CLI to all ranks while they run is
#     accepted by every agent with a new program generation (time recorded);
#  3. a live survey reaches every agent; after one agent is killed the
#     survey names its rank as not answering.
source "$(dirname "$0")/../integration/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is missing: run deploy/install-deps.sh" >&2; exit 1; }

job="itl$$"
start "$dir/collector.log" "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" \
  --survey "ipc://$dir/survey" --cli "ipc://$dir/cli" --metrics off --db "$dir/store.db" \
  --ucx-port 0 --trace-dir "$dir"
for _ in $(seq 50); do grep -q "raw events over UCX on" "$dir/collector.log" && break; sleep 0.1; done
if ! grep -q "raw events over UCX on" "$dir/collector.log"; then
  grep -q "raw events will come over the ingest socket" "$dir/collector.log" &&
    { echo "SKIP: UCX cannot listen on this machine" >&2; exit 77; }
  fail "collector did not start"
fi

# A hold-off of 10 s: on 2 shared cores a rank's last batch may miss the
# trace's wait, and the next escalation gives it another go.
cli trigger add 'count(task) > 0 where class = attention and rank = 1' --hold-off 10s >/dev/null

# The default monitors: they leave room at every hook for the escalation's
# filter (attached at every hook) and the program attached in part 2.
agent_pid=()
for r in 0 1 2 3; do
  start "$dir/agent-$r.log" "$MKS_AGENT_BIN" --job "$job" --rank "$r" \
    --collector "ipc://$dir/ingest" --survey "ipc://$dir/survey" --epoch-ms 50 --exit-with-app -v
  agent_pid[$r]=$started
done
# The job must outlive parts 1-3, however slowly a loaded machine takes
# them (the trigger is evaluated once a second, the raw batches of four
# ranks can take seconds to be stored): 40000 steps paced at 3 ms (two
# minutes), stopped by the test once part 3 is done.
bench_argv "$job" --ranks 4 --steps 40000 --step-interval-us 3000 -q
start "$dir/bench.log" "${bench_cmd[@]}"
bench_pid=$started

# 1. escalation over UCX: the collector writes the trace once every rank
# asked has sent its last batch.
trace=""
for _ in $(seq 200); do
  for t in "$dir"/mkscope-"$job"-*.json; do
    [ -e "$t" ] || continue
    jq -e '.otherData | (.ranks_done | length) == (.ranks_asked | length)' "$t" >/dev/null 2>&1 &&
      { trace=$t; break; }
  done
  [ -n "$trace" ] && break
  sleep 0.1
done
[ -n "$trace" ] || fail "no whole escalation trace written within 20 s"
esc=${trace##*-}
esc=${esc%.json}
in_esc="job = '$job' AND escalation_id = $esc"

# The ranks are still running: attach and survey now (parts 2 and 3), and
# read the escalation back from the store afterwards.
# 2. attach from the CLI to every rank while the kernel runs: verified here,
# then each agent's verdict and new program generation, and the time until
# all four replied.
cli -f json attach "$MKS_MONITORS_DIR/count.bpf.o" --name count2 --ranks all --wait 5000 \
  >"$dir/attach.json" || fail "attach to all ranks failed: $(cat "$dir/attach.json")"
replied=$(jq '.replied' "$dir/attach.json")
ok=$(jq '[.commands[] | select(.ok == 1 and .prog_gen > 0 and .cost > 0)] | length' "$dir/attach.json")
attach_ms=$(jq '.elapsed_ms | floor' "$dir/attach.json")
[ "$replied" = 4 ] && [ "$ok" = 4 ] || fail "attach: $replied replied, $ok accepted with a generation (want 4, 4)"

# 3. live survey, then one agent killed
cli -f json survey status 1500 >"$dir/survey1.json"
n=$(jq '.answers | length' "$dir/survey1.json")
miss=$(jq -c '.missing' "$dir/survey1.json")
[ "$n" = 4 ] && [ "$miss" = "[]" ] || fail "survey: $n answers, missing $miss (want 4, [])"
kill -0 "$bench_pid" 2>/dev/null || fail "the job ended before part 3 (see bench.log)"
kill -0 "${agent_pid[2]}" 2>/dev/null || fail "rank 2's agent exited before it was to be killed"
kill -KILL -- "-${agent_pid[2]}"
cli -f json survey status 1500 >"$dir/survey2.json"
n=$(jq '.answers | length' "$dir/survey2.json")
miss=$(jq -c '.missing' "$dir/survey2.json")
[ "$n" = 3 ] && [ "$miss" = "[2]" ] || fail "survey after killing rank 2's agent: $n answers, missing $miss (want 3, [2])"
cli survey status 1000 2>&1 | grep -q "did not answer.*2" || fail "text survey does not name rank 2"
# Stop the job; the other agents exit with it (--exit-with-app) after their
# last summaries and batches, so what is counted below no longer moves.
kill -TERM -- "-$bench_pid"
for r in 0 1 3; do
  for _ in $(seq 150); do kill -0 "${agent_pid[$r]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${agent_pid[$r]}" 2>/dev/null && fail "rank $r's agent still runs 15 s after its job stopped"
done
# 1, continued: what the escalation stored (the store outlives the ranks).
sql() { cli -f json sql "$1" | jq -r '.rows[0] | to_entries[0].value'; }
attn=$(sql "SELECT id FROM task_classes WHERE job = '$job' AND rank = 1 AND name = 'attention'")
[ -n "$attn" ] && [ "$attn" != null ] || fail "rank 1 published no 'attention' class"
total=$(sql "SELECT COUNT(*) FROM raw_events WHERE $in_esc AND rank = 1")
ends=$(sql "SELECT COUNT(*) FROM raw_events WHERE $in_esc AND rank = 1 AND event = 3")
other=$(sql "SELECT COUNT(*) FROM raw_events WHERE $in_esc AND rank = 1 AND class != $attn")
[ "$total" -gt 0 ] || fail "escalation stored no raw events of rank 1"
[ "$ends" -gt 0 ] || fail "no task_end among rank 1's $total raw events"
[ "$other" = 0 ] || fail "$other of rank 1's $total raw events are not attention"
# The ranks on rank 1's chain: asked without a filter, under the same id.
of_esc="job = '$job' AND kind = 'escalate' AND name = 'trigger-' || ($esc >> 32) AND (created_ns / 1000000000) % 4294967296 = $esc % 4294967296"
asked=$(sql "SELECT COUNT(DISTINCT rank) FROM commands WHERE $of_esc")
peers=$(sql "SELECT COUNT(DISTINCT rank) FROM raw_events WHERE $in_esc AND rank != 1")
[ "$asked" -ge 2 ] || fail "escalation went to $asked ranks; rank 1's remote waits name others"
[ "$peers" -ge 1 ] || fail "no raw events of the ranks rank 1 waited on"
unfiltered=$(sql "SELECT COUNT(*) FROM commands WHERE $of_esc AND rank != 1")
[ "$unfiltered" = $((asked - 1)) ] || fail "$unfiltered escalate commands to peers, want $((asked - 1))"
# Inside the window: 200 ms asked, the agents drain every 10 ms (ranks'
# clocks are shifted onto the host's: allow for their start).
span_ms=$(sql "SELECT (MAX(t_now) - MIN(t_now)) / 1000000 FROM raw_events WHERE $in_esc AND rank = 1")
[ "$span_ms" -le 400 ] || fail "raw events span $span_ms ms, the window is 200 ms"
# Every batch over UCX (the agent falls back to the ingest socket when UCX
# fails): the collector counts the batches that came over UCX.
batches=$(sql "SELECT COUNT(*) FROM raw_batches WHERE $in_esc")
last=$(sql "SELECT COUNT(*) FROM raw_batches WHERE $in_esc AND last")
[ "$last" = "$asked" ] || fail "expected one last batch per rank asked ($asked), got $last"
ucx=$(cli metrics | awk '/^mkscope_ucx_raw_batches_total/ {print $2}')
all_batches=$(sql "SELECT COUNT(*) FROM raw_batches WHERE job = '$job'")
[ "$ucx" = "$all_batches" ] || fail "$all_batches batches stored but $ucx came over UCX"

# The trace: slices of rank 1 are attention tasks only (its waits are not
# attention's, so the filter leaves them out), slices of its peers too.
jq -e '[.traceEvents[] | select(.ph == "X" and .cat == "task")] | length > 0' "$trace" >/dev/null ||
  fail "trace has no task slices"
jq -e '[.traceEvents[] | select(.ph == "X" and .pid == 1 and .cat == "task" and .name != "attention")] | length == 0' \
  "$trace" >/dev/null || fail "trace has rank 1 slices of other classes"
jq -e '[.traceEvents[] | select(.ph == "X" and .pid != 1)] | length > 0' "$trace" >/dev/null ||
  fail "trace shows no rank but 1"
# Arrows need both ends inside windows that start on each rank's next Ack,
# which a busy machine may spread apart: their count is reported, their
# shape checked.
flows=$(jq '.otherData.flows' "$trace")
jq -e '[.traceEvents[] | select(.ph == "s" or .ph == "f")] | group_by(.id) |
       all(length == 2 and .[0].pid != .[1].pid)' "$trace" >/dev/null ||
  fail "a flow arrow does not join two ranks"
cli trace export --escalation "$esc" -o "$dir/export.json"
jq -e '.traceEvents | length > 0' "$dir/export.json" >/dev/null || fail "exported JSON empty"
cli trace export --escalation "$esc" -o "$dir/export.pftrace"
[ -s "$dir/export.pftrace" ] || fail "Perfetto export empty"
[ -s "${trace%.json}.pftrace" ] || fail "collector wrote no .pftrace beside $trace"

echo "ok: $ends task_end of $total raw events (rank 1, attention) in $span_ms ms over UCX ($batches batches of $asked ranks, $flows flows); attach on 4 ranks in $attach_ms ms; survey names rank 2 missing"
