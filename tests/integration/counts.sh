#!/usr/bin/env bash
# 4 CPU ranks of the reference megakernel, an agent each, a collector: the
# counts the collector stored equal the megakernel's own per-class counts for
# every rank and class, and coverage is 100% with nothing throttled.
source "$(dirname "$0")/lib.sh"

start_collector
"$launch" --ranks 4 --job "itc$$" --dir "$dir" --collector "ipc://$dir/ingest" --steps 60 \
  --epoch-ms 50 -q >/dev/null
cli -f json query 'count(task) by rank, class' >"$dir/query.json"
cli -f json status >"$dir/status.json"
"$MKS_COUNTCHECK" --bench "$dir/bench.json" --query "$dir/query.json" \
  --status "$dir/status.json" --full-coverage "$dir"/agent-*.json
