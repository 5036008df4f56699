#!/usr/bin/env bash
# A telemetry budget below the natural rate: every agent's bytes stay under
# it, the summaries say they were coarsened (detail tier) and coverage reports
# the throttling (sampled detail hooks); task counts stay exact.
source "$(dirname "$0")/lib.sh"
budget=3000

start_collector
"$launch" --ranks 4 --job "itb$$" --dir "$dir" --collector "ipc://$dir/ingest" --steps 2500 \
  --epoch-ms 50 --budget "$budget" --agent-arg --drain-ms --agent-arg 20000 -q >/dev/null

for f in "$dir"/agent-*.json; do
  # bytes_sent over the time the agent was sending; the bucket may hold up to
  # 4 epochs' worth and registration is paid from it, hence the allowance
  read -r bytes secs < <(sed -E 's/.*"bytes_sent":([0-9]+),"sending_seconds":([0-9.]+).*/\1 \2/' "$f")
  limit=$(awk -v b="$budget" -v s="$secs" 'BEGIN { printf "%d", b * s + b * 0.05 * 4 + 2048 }')
  echo "$(basename "$f"): $bytes bytes in $secs s (limit $limit)"
  [ "$bytes" -le "$limit" ] || fail "$(basename "$f"): $bytes bytes over the budget ($limit)"
done

read -r min_tier max_shift < <(cli sql 'SELECT MIN(detail_tier), MAX(sample_shift) FROM epochs' |
                               awk 'NR == 2 { print $1, $2 }')
echo "stored summaries: lowest detail tier $min_tier, largest sample shift $max_shift"
[ "$min_tier" -lt 2 ] || fail "no summary was coarsened (detail tier stayed 2)"
[ "$max_shift" -gt 0 ] || fail "no sampling reported under budget pressure"
cli -f json status >"$dir/status.json"
grep -q '"throttled": [1-9]' "$dir/status.json" || fail "coverage reports no throttled events"

cli -f json query 'count(task) by rank, class' >"$dir/query.json"
"$MKS_COUNTCHECK" --bench "$dir/bench.json" --query "$dir/query.json" \
  "$dir"/agent-*.json
