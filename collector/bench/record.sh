#!/usr/bin/env bash
# Make the recordings mkscope-load replays (collector/bench/rec/): four CPU
# ranks of mkscope-bench, an agent each, and `mkscope-load record` standing in
# for the collector.
#
#   b50k.mksrec   the agents' budget of the deployment examples (--budget
#                 50000, 100 ms epochs): what a rank sends at scale, the
#                 histogram tier, about 2.8 KB a summary
#   full.mksrec   no budget, one decode step every 10 ms: the full tier with
#                 every wait and release record, about 20 KB a summary
#
# usage: collector/bench/record.sh [BUILD_DIR] [OUT_DIR]
#        (defaults: build, collector/bench/rec)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$root/collector/bench/rec}
load="$build/collector/mkscope-load"
[ -x "$load" ] || { echo "record.sh: $load not built" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d /tmp/mks-record.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# record NAME SUMMARIES LAUNCH-ARGS...
record() {
  local name=$1 n=$2
  shift 2
  "$load" record --ingest "ipc://$tmp/$name" -o "$out/$name.mksrec" --summaries "$n" \
    --skip 4 --seconds 120 &
  local rec=$!
  MKS_BIN_DIR= "$root/deploy/local/mkscope-launch" --bin "$build/agent" --ranks 4 \
    --job "rec$name" --dir "$tmp/$name.run" --collector "ipc://$tmp/$name" -q "$@" \
    >/dev/null || true
  wait "$rec"
  "$load" info "$out/$name.mksrec" | tail -n 1
}

export MKS_AGENT_BIN="$build/agent/mkscope-agent" MKS_BENCH_BIN="$build/bench/mkscope-bench"
record b50k 40 --steps 4000 --budget 50000
record full 16 --steps 1200 -- --step-interval-us 10000
