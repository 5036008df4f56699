#!/usr/bin/env bash
# The collector with real agents and 4 CPU megakernel ranks:
#  1. an SLO trigger on one task class of one rank escalates that rank; the
#     agent sends the raw events over UCX to the collector's listener; the
#     stored trace holds only that class's events of that rank, inside the
#     escalation window, every batch came over UCX, and the trace exports as
#     Chrome JSON and as a Perfetto protobuf trace;
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

cli trigger add 'count(task) > 0 where class = attention and rank = 1' >/dev/null

# The default monitors: they leave room at every hook for the escalation's
# filter (attached at every hook) and the program attached in part 2.
agent_pid=()
for r in 0 1 2 3; do
  start "$dir/agent-$r.log" "$MKS_AGENT_BIN" --job "$job" --rank "$r" \
    --collector "ipc://$dir/ingest" --survey "ipc://$dir/survey" --epoch-ms 50 --exit-with-app -v
  agent_pid[$r]=$started
done
# Long enough for the trigger (evaluated once a second), the 200 ms window
# and two surveys: 3000 steps paced at 3 ms.
bench_argv "$job" --ranks 4 --steps 3000 --step-interval-us 3000 -q
start "$dir/bench.log" "${bench_cmd[@]}"

# 1. escalation over UCX
trace=""
for _ in $(seq 200); do
  trace=$(ls "$dir"/mkscope-"$job"-*.json 2>/dev/null | head -n 1 || true)
  [ -n "$trace" ] && break
  sleep 0.1
done
[ -n "$trace" ] || fail "no escalation trace written within 20 s"
esc=${trace##*-}
esc=${esc%.json}
in_esc="job = '$job' AND escalation_id = $esc"

sql() { cli -f json sql "$1" | jq -r '.rows[0] | to_entries[0].value'; }
attn=$(sql "SELECT id FROM task_classes WHERE job = '$job' AND rank = 1 AND name = 'attention'")
[ -n "$attn" ] && [ "$attn" != null ] || fail "rank 1 published no 'attention' class"
total=$(sql "SELECT COUNT(*) FROM raw_events WHERE $in_esc")
ends=$(sql "SELECT COUNT(*) FROM raw_events WHERE $in_esc AND event = 3")
other=$(sql "SELECT COUNT(*) FROM raw_events WHERE $in_esc AND (rank != 1 OR class != $attn)")
[ "$total" -gt 0 ] || fail "escalation stored no raw events"
[ "$ends" -gt 0 ] || fail "no task_end among $total raw events"
[ "$other" = 0 ] || fail "$other of $total raw events are not rank 1 / attention"
# Inside the window: 200 ms asked, the agent drains every 10 ms.
span_ms=$(sql "SELECT (MAX(t_now) - MIN(t_now)) / 1000000 FROM raw_events WHERE $in_esc")
[ "$span_ms" -le 400 ] || fail "raw events span $span_ms ms, the window is 200 ms"
# Every batch over UCX (the agent falls back to the ingest socket when UCX
# fails): the collector counts the batches that came over UCX.
batches=$(sql "SELECT COUNT(*) FROM raw_batches WHERE $in_esc")
last=$(sql "SELECT COUNT(*) FROM raw_batches WHERE $in_esc AND last")
[ "$last" = 1 ] || fail "expected one last batch, got $last"
ucx=$(cli metrics | awk '/^mkscope_ucx_raw_batches_total/ {print $2}')
all_batches=$(sql "SELECT COUNT(*) FROM raw_batches WHERE job = '$job'")
[ "$ucx" = "$all_batches" ] || fail "$all_batches batches stored but $ucx came over UCX"
escalated=$(sql "SELECT COUNT(DISTINCT rank) FROM commands WHERE job = '$job' AND kind = 'escalate'")
[ "$escalated" = 1 ] || fail "escalate commands went to $escalated ranks, want only rank 1"

# The trace: slices only on rank 1, named attention; both formats.
jq -e '[.traceEvents[] | select(.ph == "X" and .cat == "task")] | length > 0' "$trace" >/dev/null ||
  fail "trace has no task slices"
jq -e '[.traceEvents[] | select(.ph == "X") | select(.pid != 1 or (.cat == "task" and .name != "attention"))] | length == 0' \
  "$trace" >/dev/null || fail "trace has slices of other ranks or classes"
cli trace export --escalation "$esc" -o "$dir/export.json"
jq -e '.traceEvents | length > 0' "$dir/export.json" >/dev/null || fail "exported JSON empty"
cli trace export --escalation "$esc" -o "$dir/export.pftrace"
[ -s "$dir/export.pftrace" ] || fail "Perfetto export empty"
[ -s "${trace%.json}.pftrace" ] || fail "collector wrote no .pftrace beside $trace"

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
kill -KILL -- "-${agent_pid[2]}"
cli -f json survey status 1500 >"$dir/survey2.json"
n=$(jq '.answers | length' "$dir/survey2.json")
miss=$(jq -c '.missing' "$dir/survey2.json")
[ "$n" = 3 ] && [ "$miss" = "[2]" ] || fail "survey after killing rank 2's agent: $n answers, missing $miss (want 3, [2])"
cli survey status 1000 2>&1 | grep -q "did not answer.*2" || fail "text survey does not name rank 2"
echo "ok: $ends task_end of $total raw events (rank 1, attention) in $span_ms ms over UCX ($batches batches); attach on 4 ranks in $attach_ms ms; survey names rank 2 missing"
