#!/usr/bin/env bash
# Coverage that never lies: two CPU ranks whose agents keep 5 ms epochs in a
# buffer of a few summaries, and a collector stopped (SIGSTOP) for a second
# while they run, so that the agents drop summaries.  Then every surface must
# report the loss exactly as the agents counted it (their --stats):
#   - status: lost summaries, eligible events (those of the dropped
#     summaries included), undelivered events, per rank;
#   - /metrics: mkscope_summaries_lost_total, mkscope_events_eligible_total
#     and mkscope_events_undelivered_total per rank and hook;
#   - a query's coverage: its eligible and undelivered events, its ratio
#     below 1;
#   - the store's task counts plus the undelivered task_end events are the
#     megakernel's own task counts, to the task;
#   - the diagnosis of a step whose epochs lost summaries on every rank
#     reports that coverage (below 1; undecided below its 50%);
# and each agent says in its log that it dropped summaries.
source "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "FAIL: jq is missing: run deploy/install-deps.sh" >&2; exit 1; }

start "$dir/collector.log" "$MKS_COLLECTOR_BIN" --ingest "ipc://$dir/ingest" \
  --survey "ipc://$dir/survey" --cli "ipc://$dir/cli" --metrics 127.0.0.1:0 \
  --db "$dir/store.db" --ucx-port off
collector_pid=$started
for _ in $(seq 100); do grep -q "metrics on http" "$dir/collector.log" && break; sleep 0.1; done
metrics_url=$(sed -n 's/.*metrics on \(http[^ ]*\).*/\1/p' "$dir/collector.log" | head -n 1)
[ -n "$metrics_url" ] || fail "the collector did not start"

job="itl$$"
for r in 0 1; do
  start "$dir/agent-$r.log" "$MKS_AGENT_BIN" --job "$job" --rank "$r" \
    --collector "ipc://$dir/ingest" --epoch-ms 5 --buffer-bytes 40000 --exit-with-app \
    --drain-ms 20000 --stats "$dir/agent-$r.json" --monitors "$MKS_MONITORS_DIR"
done
bench_argv "$job" --ranks 2 --steps 1200 --step-interval-us 5000 --json "$dir/bench.json" -q
start "$dir/bench.log" "${bench_cmd[@]}"
bench=$started
# Once both ranks' summaries flow, stop the collector for a second.
for _ in $(seq 200); do
  n=$(cli -f json status 2>/dev/null | jq '[.ranks[] | select(.epochs > 5)] | length' || echo 0)
  [ "${n:-0}" = 2 ] && break
  sleep 0.05
done
[ "${n:-0}" = 2 ] || fail "the ranks' summaries did not reach the collector"
kill -STOP "$collector_pid"
sleep 1.5
kill -CONT "$collector_pid"
wait "$bench" || fail "the megakernel failed (see $dir/bench.log)"
for r in 0 1; do
  for _ in $(seq 300); do [ -s "$dir/agent-$r.json" ] && break; sleep 0.1; done
  [ -s "$dir/agent-$r.json" ] || fail "agent $r did not finish (no --stats)"
done

status=$(cli --job "$job" -f json status)
metrics=$(curl -sf "$metrics_url") || fail "no /metrics"
lost_all=0
for r in 0 1; do
  a=$dir/agent-$r.json
  lost=$(jq .lost "$a")
  elig=$(jq '.eligible | add' "$a")
  undel=$(jq '.undelivered | add' "$a")
  [ "$(jq .unacked "$a")" = 0 ] || fail "agent $r ended with unacknowledged summaries: $(cat "$a")"
  lost_all=$((lost_all + lost))
  s=$(jq -c ".ranks[] | select(.rank == $r)" <<<"$status")
  [ "$(jq .lost_summaries <<<"$s")" = "$lost" ] ||
    fail "rank $r: status says $(jq .lost_summaries <<<"$s") summaries lost, the agent $lost"
  [ "$(jq .coverage.eligible <<<"$s")" = "$elig" ] ||
    fail "rank $r: status says $(jq .coverage.eligible <<<"$s") eligible events, the agent $elig"
  [ "$(jq .coverage.undelivered <<<"$s")" = "$undel" ] ||
    fail "rank $r: status says $(jq .coverage.undelivered <<<"$s") undelivered, the agent $undel"
  lbl="job=\"$job\",rank=\"$r\""
  m=$(awk -v k="mkscope_summaries_lost_total{$lbl}" '$1 == k { print $2 }' <<<"$metrics")
  [ "$m" = "$lost" ] || fail "rank $r: metrics say $m summaries lost, the agent $lost"
  for q in eligible undelivered; do
    m=$(awk -v p="mkscope_events_${q}_total{$lbl," 'index($1, p) == 1 { s += $2 } END { print s + 0 }' \
      <<<"$metrics")
    want=$(jq ".$q | add" "$a")
    [ "$m" = "$want" ] || fail "rank $r: metrics say $m $q events, the agent $want"
  done
  # Every task the megakernel ran is stored or counted undelivered.
  tasks=$(jq "[.ranks[$r].class_counts[]] | add" "$dir/bench.json")
  stored=$(cli --job "$job" -f json query "count(task) where rank = $r" | jq '.rows[0]["count(task)"]')
  undel_end=$(jq '.undelivered[3]' "$a") # hook 3: task_end
  [ $((stored + undel_end)) = "$tasks" ] ||
    fail "rank $r: $stored tasks stored + $undel_end undelivered != the megakernel's $tasks"
  echo "ok rank $r: $lost summaries lost, $undel of $elig events undelivered, as the agent counted"
  grep -q "dropped .* summaries" "$dir/agent-$r.log" || fail "agent $r did not say it dropped summaries"
done
[ "$lost_all" -gt 0 ] || fail "no agent dropped a summary: the test did not test (buffer too large?)"
# A query over the whole job carries the loss in its coverage.
q=$(cli --job "$job" -f json query 'count(task) by rank')
jq -e '.coverage.undelivered > 0 and .coverage.lost_summaries > 0 and .coverage.ratio < 1' \
  <<<"$q" >/dev/null || fail "the query's coverage hides the loss: $(jq -c .coverage <<<"$q")"
cli --job "$job" query 'count(task) by rank' | grep -q "summaries the agents dropped" ||
  fail "the query's text does not say summaries were dropped"
echo "ok queries, status and metrics report the loss to the event"
# A step each rank's summaries of which lost events (the first such step of
# the epoch that reported the most): the diagnosis must not take it as seen.
step=$(cli --job "$job" -f json sql "SELECT s.step FROM steps s JOIN epochs e ON e.id = s.epoch_id
  JOIN (SELECT epoch_id, SUM(undelivered) AS u FROM coverage GROUP BY epoch_id) c
  ON c.epoch_id = e.id WHERE e.job = '$job' AND c.u > 0 GROUP BY s.step
  HAVING COUNT(DISTINCT e.rank) = 2 ORDER BY SUM(c.u) DESC LIMIT 1" | jq '.rows[0].step')
[ -n "$step" ] && [ "$step" != null ] || fail "no step lost events on both ranks"
d=$(cli --job "$job" -f json diagnose --step "$step" | head -n 1)
# (below the diagnosis's --min-coverage, 0.5, it must not decide either)
jq -e '.coverage.ratio < 1 and (.coverage.ratio >= 0.5 or .cause == "undecided")' <<<"$d" \
  >/dev/null ||
  fail "the diagnosis of step $step takes it as seen: $d"
echo "ok the diagnosis of step $step says its coverage ($(jq .coverage.ratio <<<"$d"))"
