#!/usr/bin/env bash
# bench/counter/gpu.sh: the counterexample benchmark on the CUDA backend, for
# a GPU machine (one H200: --ranks 1 or 2 ranks sharing it; two: one each).
# Not yet run on a GPU: docs/RESULTS.md says so.
#
# Per build (persistent megakernel, kernel per operator, CUDA Graph), fault
# type (those the build supports), mode (windowed, persistent) and seed, the
# same binary, seed and fault with the bench's closed loop (--baseline: a
# clean run of the build) is observed by each tool in turn:
#
#   mkscope        agents and a collector (persistent build; the others have
#                  no hooks), `mkscope -f json diagnose --min-steps 3`
#   trace          the native profiler's full trace (mkscope-bench-prof
#                  --trace), and trace_sampled: down to mkscope's bytes
#   kernels_BUILD  CUPTI activity (kernels, memcpys, NCCL kernels) through
#                  libmks_cupti.so, the kernel-level timeline
#   pcsamp_BUILD   CUPTI PC sampling with stall reasons, PCs by function and,
#                  where the task schema gives a function to one class only,
#                  the class
#
# Each answer (bench/counter/baselines.c) is scored by
# bench/accuracy/score.jq against the run's truth file; the per-tool table
# (bench/counter/report.jq) comes last, also in OUT/summary.txt.  Resumable:
# a run with a score is not made again.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/counter/gpu.sh [OPTIONS]

  --build DIR     a CUDA build tree (mkscope-bench, mkscope-bench-prof,
                  mkscope-baselines, libmks_cupti.so, agent, collector, CLI)
                  [build/]
  --out DIR       results [BUILD/counter-gpu]
  --ranks N       ranks [2]
  --steps N       steps a run [30]
  --seeds N       seeds [2]
  --builds LIST   ["persistent per-op graph"]
  --faults LIST   fault types (those a build lacks are skipped), and clean
                  [every type the build supports, and clean]
  --budget S      stop starting runs after S seconds [3000]
  --fresh         forget earlier results
  -h, --help

EXAMPLES
  bench/counter/gpu.sh --build build --ranks 2
  MKS_BENCH_BACKEND=cpu bench/counter/gpu.sh --builds persistent   # the script on a CPU
USAGE
}

root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build out="" ranks=2 steps=30 seeds=2 builds="persistent per-op graph" budget=3000
fresh=0 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --builds) builds=$2; shift 2 ;;
    --faults) only=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --fresh) fresh=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "counter-gpu: unknown option '$1'; see --help" >&2; exit 2 ;;
  esac
done
for v in "$ranks" "$steps" "$seeds" "$budget"; do
  case "$v" in ''|*[!0-9]*) echo "counter-gpu: --ranks, --steps, --seeds, --budget want numbers" >&2; exit 2 ;; esac
done
[ "$ranks" -ge 2 ] || { echo "counter-gpu: --ranks must be at least 2 (faults need peers)" >&2; exit 2; }
build=$(cd "$build" 2>/dev/null && pwd) || { echo "counter-gpu: no build tree $build" >&2; exit 1; }
[ -n "$out" ] || out=$build/counter-gpu
[ "$fresh" = 1 ] && rm -rf "$out"
mkdir -p "$out/tools" "$out/work" "$out/baselines"
backend=${MKS_BENCH_BACKEND:-cuda}
bench=$build/bench/mkscope-bench prof=$build/bench/mkscope-bench-prof
bl=$build/bench/mkscope-baselines cupti=$build/bench/libmks_cupti.so
cli=$build/collector/cli/mkscope launch=$root/deploy/local/mkscope-launch
export MKS_AGENT_BIN=$build/agent/mkscope-agent MKS_COLLECTOR_BIN=$build/collector/mkscope-collector
export MKS_MONITORS_DIR=$build/agent/monitors
for b in "$bench" "$prof" "$bl" "$cli" "$MKS_AGENT_BIN" "$MKS_COLLECTOR_BIN"; do
  [ -x "$b" ] || { echo "counter-gpu: $b missing: build first (cmake with CUDA)" >&2; exit 1; }
done
have_cupti=1
[ -f "$cupti" ] && [ "$backend" = cuda ] || have_cupti=0
[ "$have_cupti" = 1 ] || echo "counter-gpu: no libmks_cupti.so or no GPU: the CUPTI tools are left out" >&2
t_end=$((SECONDS + budget))

# the task schema's device functions (bench/src/schema.c): a function named
# for one class only maps to it; the pcsamp tool reads this
cat >"$out/functions.json" <<'EOF'
{"bm_rmsnorm": "rmsnorm", "bm_attention": "attention", "bm_route": "moe_router",
 "sum_experts": "moe_combine", "bm_argmax": "sample", "bm_expert_out": "expert.*",
 "copy_to_peer": "allreduce_send", "sum_in_rank_order": "allreduce_reduce"}
EOF

faults_of() { # the fault types a build supports (docs/bench.md), and clean
  local all t
  case "$1" in
    persistent) all="clean task-delay moe-skew notify-delay queue-oversub comm-delay tile-starve slow-rank" ;;
    *) all="clean task-delay moe-skew" ;;
  esac
  for t in $all; do
    [ -z "$only" ] || [[ " $only " == *" $t "* ]] && echo "$t"
  done
}
spec_of() { # TYPE RANK MODE MAG
  local key="rank=$2"
  case "$1" in task-delay) key="$key,class=o_proj" ;; queue-oversub|tile-starve) key="$key,class=qkv_proj" ;;
    notify-delay) key="$key,class=allreduce_send" ;; esac
  [ "$3" = windowed ] && key="$key,steps=$((steps / 3))-$((steps / 3 + 4))"
  echo "$1:$key,magnitude=$4"
}

# bench ARGS...: every rank of one run, one process each (the CUPTI tools
# name their files by MKS_CUPTI_RANK)
bench_ranks() {
  local exe=$1 job=$2; shift 2
  local pids=() r rc=0
  for ((r = ranks - 1; r >= 0; r--)); do
    MKS_CUPTI_RANK=$r timeout 600 "$exe" run --backend "$backend" --ranks "$ranks" --rank "$r" \
      --job "$job" --steps "$steps" -q "$@" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

baseline() { # BUILD SEED: a clean run's json, and its median step (us) for magnitudes
  local f=$out/baselines/$1.s$2.json
  if [ ! -s "$f" ]; then
    bench_ranks "$bench" "cgb$$" --cuda-mode "$1" --seed "$2" --json "$f.tmp" >/dev/null
    mv "$f.tmp" "$f"
  fi
  echo "$f"
}

score() { # ID TOOL BYTES GROUPS-FILE DIR FULL-TRACE-BYTES
  jq -n -c --argjson diag "$(cat "$4")" --argjson truth "$(cat "$5/truth.json")" \
    -f "$root/bench/accuracy/score.jq" |
    jq -c --arg id "$1" --arg tool "$2" --argjson bytes "$3" --argjson full "$6" \
      '. + {id: $id, tool: $tool, bytes: $bytes, trace_bytes: $full}' >"$out/tools/$1.$2.score"
}

one() { # BUILD TYPE MODE SEED
  local b=$1 t=$2 mode=$3 seed=$4 id d base med mag spec rank full=0 mk=0
  id=$b.$t.${mode:0:1}.s$seed
  [ -s "$out/tools/$id.done" ] && return 0
  d=$out/work/$id
  rm -rf "$d"
  mkdir -p "$d"
  base=$(baseline "$b" "$seed")
  med=$(jq '[.ranks[].step_ns[2:][]] | sort | .[length / 2 | floor] / 1000 | floor' "$base")
  if [ "$mode" = windowed ]; then mag=$((med * 20)); else mag=$((med * 4)); fi
  rank=$(( (seed * 7 + ${#t}) % ranks ))
  [ "$t" = moe-skew ] && rank=$(( seed % ranks ))
  local common=(--cuda-mode "$b" --seed "$seed") fa=() loop=()
  if [ "$t" != clean ]; then
    spec=$(spec_of "$t" "$rank" "$mode" "$mag")
    fa=(--fault "$spec")
    loop=(--baseline "$base")
    common+=("${fa[@]}" "${loop[@]}")
  fi
  # the native trace (the profiler build), and the same sampled below
  if bench_ranks "$prof" "cgp$$" "${common[@]}" --truth "$d/truth.json" --json "$d/prof.json" \
      --trace "$d/trace" >"$d/prof.log" 2>&1; then
    "$bl" trace --bench "$d/prof.json" --trace "$d/trace" -o "$d/a.trace.json"
    full=$(jq .bytes "$d/a.trace.json")
    jq .groups "$d/a.trace.json" >"$d/g.trace.json"
    score "$id" trace "$full" "$d/g.trace.json" "$d" "$full"
  fi
  # mkscope (hooks exist in the persistent build only)
  if [ "$b" = persistent ]; then
    if "$launch" --backend "$backend" --ranks "$ranks" --steps "$steps" --dir "$d/mk" --epoch-ms 5 \
        --keep-collector -q --job "cgm$$" "${fa[@]}" -- "${loop[@]}" --cuda-mode "$b" \
        --seed "$seed" --truth "$d/truth.json" >/dev/null 2>"$d/mk.err"; then
      "$cli" --collector "ipc://$d/mk/cli" --job "cgm$$" --timeout 60000 -f json diagnose \
        --min-steps 3 | jq -s . >"$d/g.mkscope.json" || echo '[]' >"$d/g.mkscope.json"
      mk=$(jq -s 'map(.bytes_sent) | add' "$d"/mk/agent-*.json)
      score "$id" mkscope "$mk" "$d/g.mkscope.json" "$d" "$full"
      if [ "$full" -gt 0 ]; then
        "$bl" trace --bench "$d/prof.json" --trace "$d/trace" --keep-bytes "$mk" -o "$d/a.sampled.json"
        jq .groups "$d/a.sampled.json" >"$d/g.sampled.json"
        score "$id" trace_sampled "$(jq .bytes "$d/a.sampled.json")" "$d/g.sampled.json" "$d" "$full"
      fi
    fi
    kill -TERM -- "-$(cat "$d/mk/collector.pid" 2>/dev/null || echo 0)" 2>/dev/null || true
  fi
  # CUPTI: the kernel-level timeline, then PC sampling
  if [ "$have_cupti" = 1 ]; then
    local tool
    for tool in kernels pcsamp; do
      local mode_env=activity
      [ "$tool" = pcsamp ] && mode_env=pcsamp
      if CUDA_INJECTION64_PATH=$cupti MKS_CUPTI_MODE=$mode_env MKS_CUPTI_OUT=$d/$tool \
          bench_ranks "$bench" "cgc$$" "${common[@]}" --truth "$d/truth.json" \
          --json "$d/$tool.bench.json" >"$d/$tool.log" 2>&1; then
        "$bl" "$tool" --bench "$d/$tool.bench.json" --cupti "$d/$tool" \
          --functions "$out/functions.json" -o "$d/a.$tool.json"
        jq .groups "$d/a.$tool.json" >"$d/g.$tool.json"
        score "$id" "${tool}_$b" "$(jq .bytes "$d/a.$tool.json")" "$d/g.$tool.json" "$d" "$full"
      fi
    done
  fi
  rm -f "$d"/trace.rank*.json
  echo ok >"$out/tools/$id.done"
}

for s in $(seq "$seeds"); do
  for b in $builds; do
    for t in $(faults_of "$b"); do
      for mode in windowed persistent; do
        [ "$t" = clean ] && [ "$mode" = persistent ] && continue
        [ "$SECONDS" -lt "$t_end" ] || { echo "counter-gpu: time budget spent; the rest is left" >&2; break 4; }
        echo "counter-gpu: $b $t $mode seed $s" >&2
        one "$b" "$t" "$mode" "$s" || echo "counter-gpu: $b $t $mode seed $s failed" >&2
      done
    done
  done
done

files=$(find "$out/tools" -name '*.score' | sort)
[ -n "$files" ] || { echo "counter-gpu: no run scored" >&2; exit 1; }
# shellcheck disable=SC2086
jq -s . $files >"$out/tools.json"
{
  jq -r -f "$root/bench/counter/targets.jq" "$out/tools.json"
  echo
  jq -r --argjson m null -f "$root/bench/counter/report.jq" "$out/tools.json"
} | tee "$out/summary.txt"
