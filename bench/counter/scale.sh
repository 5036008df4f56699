#!/usr/bin/env bash
# bench/counter/scale.sh: how the telemetry of each tool grows with the size
# of the task graph.  The native trace's bytes grow with the tasks a step
# runs; mkscope's full-tier summaries with the task classes, workers, remote
# waits and releases of a step; the fixed counters with classes and peers.
# The benchmark's reference graph (2 layers, 4 tiles: about 70 tasks a step
# and rank) is small, so "bytes against the full trace" there says little
# about a production megakernel's thousands of tasks a step: this runs clean
# jobs of the same binary (mkscope-bench-obs: hooks, profiler and counters
# at once, agents and collector attached) at larger graphs and prints each
# tool's bytes a step and rank and mkscope's against the trace's.
#
#   bench/counter/scale.sh [--build DIR] [--out DIR] [--ranks N] [--steps N]
#                          [--epoch-ms MS] [--sizes "L:T L:T ..."]
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build out="" ranks=4 steps=30 epoch=100 sizes="2:4 8:4 2:16 8:16 32:16 8:64 32:64"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --epoch-ms) epoch=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
for v in "$ranks" "$steps" "$epoch"; do
  case "$v" in ''|*[!0-9]*) echo "scale: --ranks, --steps, --epoch-ms want numbers" >&2; exit 2 ;; esac
done
for s in $sizes; do
  case "$s" in [1-9]*:[1-9]*) ;; *) echo "scale: --sizes wants LAYERS:TILES pairs, not '$s'" >&2; exit 2 ;; esac
  case "${s%%:*}${s##*:}" in *[!0-9]*) echo "scale: --sizes wants LAYERS:TILES pairs, not '$s'" >&2; exit 2 ;; esac
done
command -v jq >/dev/null || { echo "scale: jq is missing (deploy/install-deps.sh)" >&2; exit 1; }
build=$(cd "$build" 2>/dev/null && pwd) || { echo "scale: no build tree $build" >&2; exit 1; }
[ -n "$out" ] || out=$build/counter-scale
mkdir -p "$out"
out=$(cd "$out" && pwd)
obs=$build/bench/mkscope-bench-obs bl=$build/bench/mkscope-baselines
for b in "$obs" "$bl"; do [ -x "$b" ] || { echo "scale: $b missing: build first" >&2; exit 1; }; done

rows=()
for s in $sizes; do
  L=${s%%:*} T=${s##*:} d=$out/l$L.t$T
  rm -rf "$d"
  if ! MKS_BENCH_BIN=$obs "$root/deploy/local/mkscope-launch" --ranks "$ranks" --steps "$steps" \
      --dir "$d" --epoch-ms "$epoch" -q --job "cscale$L.$T.$$" -- --seed 1 --layers "$L" \
      --tiles "$T" --trace "$d/tr" --counters "$d/ct" >/dev/null 2>"$d.err"; then
    echo "scale: run $s failed: $(tail -n 3 "$d.err" | tr '\n' ' ')" >&2
    exit 1
  fi
  tr=$("$bl" trace --bench "$d/bench.json" --trace "$d/tr" | jq .bytes)
  ct=$("$bl" counters --bench "$d/bench.json" --counters "$d/ct" | jq .bytes)
  rows+=("$(jq -c -n --argjson L "$L" --argjson T "$T" --argjson R "$ranks" --argjson S "$steps" \
    --argjson e "$epoch" --argjson tr "$tr" --argjson ct "$ct" \
    --argjson mk "$(jq -s 'map(.bytes_sent) | add' "$d"/agent-*.json)" \
    --argjson tiers "$(jq -s 'map(.tiers) | transpose | map(add)' "$d"/agent-*.json)" \
    --argjson tasks "$(jq -s 'map(.eligible[1]) | add' "$d"/agent-*.json)" \
    --argjson step "$(jq '[.ranks[].step_ns[]] | sort | .[length / 2 | floor] / 1000' "$d/bench.json")" \
    '{layers: $L, tiles: $T, ranks: $R, steps: $S, epoch_ms: $e, step_us: $step,
      tasks_per_step: ($tasks / $R / $S), mkscope: $mk, trace: $tr, counters: $ct,
      tiers: $tiers}')")
  rm -rf "$d" "$d.err"
done
printf '%s\n' "${rows[@]}" | jq -s . >"$out/scale.json"
echo "== bytes a step and rank by graph size ($ranks ranks, $steps steps, mkscope at $epoch ms epochs)"
jq -r '
  def r: . * 10 | round / 10;
  (["layers", "tiles", "tasks/step", "step ms", "trace B", "mkscope B", "counters B",
    "mkscope/trace", "counters/trace", "summaries full/hist/counts"] | join("\t")),
  (.[] | (.ranks * .steps) as $n
   | [.layers, .tiles, (.tasks_per_step | round), (.step_us / 1000 | r), (.trace / $n | round),
      (.mkscope / $n | round), (.counters / $n | round),
      "\(100 * .mkscope / .trace | r)%", "\(100 * .counters / .trace | r)%",
      (.tiers | reverse | map(tostring) | join("/"))] | map(tostring) | join("\t"))' "$out/scale.json" |
  column -t -s "$(printf '\t')"
