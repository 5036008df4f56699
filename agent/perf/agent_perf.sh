#!/usr/bin/env bash
# What an agent costs and sends, on the CPU backend (docs/PERF.md, "agent").
#   agent/perf/agent_perf.sh [BUILD_DIR] [STEPS] [ROUNDS]
# For ROUNDS rounds, alternately: the reference megakernel (4 ranks) alone,
# and the same run with a collector and one agent per rank (all standard
# monitors).  Prints the median decode-step time of each run, each agent's
# CPU time per second of run and bytes per summary, the same with a budget
# of 20000 bytes/s per rank, and with no budget but a spool directory
# (every summary written through to a file until acknowledged) and the
# same with --spool-spill-only (nothing written while memory has room).
set -euo pipefail
build=${1:-build} steps=${2:-3000} rounds=${3:-3}
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$build" && pwd)
export MKS_AGENT_BIN=$build/agent/mkscope-agent MKS_COLLECTOR_BIN=$build/collector/mkscope-collector
export MKS_BENCH_BIN=$build/bench/mkscope-bench MKS_MONITORS_DIR=$build/agent/monitors
dir=$(mktemp -d /tmp/mks-agent-perf.XXXXXX)
trap 'rm -rf "$dir"' EXIT

median_step() { # bench.json -> median step ns over all ranks
  tr -d ' \n' <"$1" | grep -o '"step_ns":\[[0-9,]*\]' | sed -E 's/"step_ns":\[//; s/\]//' |
    tr ',' '\n' | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

# agent wrapper: report the agent's CPU time when it exits
cat >"$dir/agent-timed" <<WRAP
#!/bin/sh
exec /usr/bin/time -f "cpu_s %U %S" "$MKS_AGENT_BIN" "\$@"
WRAP
chmod +x "$dir/agent-timed"

for r in $(seq "$rounds"); do
  "$MKS_BENCH_BIN" run --ranks 4 --steps "$steps" --job "perf$$a$r" --json "$dir/alone.json" -q
  echo "round $r: alone          median step $(median_step "$dir/alone.json") ns"
  for mode in 0 20000 spool spill; do
    budget=$mode spool=()
    case $mode in
    spool) budget=0 spool=(--agent-arg --spool-dir --agent-arg "$dir/spool") ;;
    spill) budget=0 spool=(--agent-arg --spool-dir --agent-arg "$dir/spool" --agent-arg --spool-spill-only) ;;
    esac
    rm -rf "$dir/run" "$dir/spool" && mkdir "$dir/run"
    MKS_AGENT_BIN=$dir/agent-timed "$root/deploy/local/mkscope-launch" --ranks 4 --steps "$steps" \
      --dir "$dir/run" --job "perf$$b$r$mode" --budget "$budget" "${spool[@]}" -q >/dev/null
    cpu=$(cat "$dir"/run/agent-*.log | awk '/^cpu_s/ { s += $2 + $3 } END { printf "%.3f", s / 4 }')
    read -r secs bytes sums < <(cat "$dir"/run/agent-*.json | sed -E \
      's/.*"seconds":([0-9.]+).*"summaries":([0-9]+).*"bytes_sent":([0-9]+).*/\1 \3 \2/' |
      awk '{ s += $1; b += $2; n += $3 } END { printf "%.3f %d %d\n", s / 4, b / 4, n / 4 }')
    tiers=$(cat "$dir"/run/agent-*.json | sed -E 's/.*"tiers":\[([0-9,]+)\].*/\1/' | paste -sd' ')
    echo "round $r: budget ${budget:-0} B/s${spool[*]:+, $mode}: median step $(median_step "$dir/run/bench.json") ns;" \
      "per agent: ${cpu} s CPU in ${secs} s, $sums summaries, $bytes bytes" \
      "($((bytes / (sums > 0 ? sums : 1))) B/summary), tiers [counts,hist,full] per rank: $tiers"
  done
done
