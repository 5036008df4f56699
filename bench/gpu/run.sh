#!/usr/bin/env bash
# Build mkscope-bench's CUDA backend on a GPU machine and measure the build
# variants side by side, then run every fault type once with its ground truth.
#
#   bench/gpu/run.sh [--steps N] [--ranks "1 2"] [--size small|medium|large]
#
# Variants (docs/PERF.md, "bench"): persistent megakernel with hooks compiled
# out, compiled in and detached, the native task profiler; kernel-per-operator
# with NCCL all-reduce; its CUDA Graph.  Results (JSON per run, a summary
# table) go to $OUT (default ./bench-gpu-out).
# Env: CMAKE_PREFIX_PATH for dependencies unpacked into a prefix (jansson,
#      libbpf for devhooks), NCCL_HOME if NCCL is not under /usr/local/cuda.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/bench-gpu-out}
steps=100
ranks_list="1 2"
size=medium
while [ $# -gt 0 ]; do
    case $1 in
    --steps) steps=$2; shift 2 ;;
    --ranks) ranks_list=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--ranks \"1 2\"] [--size small|medium|large]" >&2; exit 2 ;;
    esac
done
case $size in
small) model="--layers 2 --hidden 64 --experts 8 --tiles 4" ;;
medium) model="--layers 4 --hidden 1024 --heads 8 --head-dim 64 --experts 16 --ffn 1024 --vocab 4096 --tiles 32 --batch 8 --max-len 64" ;;
large) model="--layers 8 --hidden 4096 --heads 16 --head-dim 64 --experts 64 --ffn 2048 --vocab 16384 --tiles 64 --batch 16 --max-len 128" ;;
*) echo "$0: --size must be small, medium or large" >&2; exit 2 ;;
esac
mkdir -p "$out"
build=$root/build-gpu-bench

echo "== configure and build ($build)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMKS_BUILD_TESTS=OFF \
    -DMKS_MODULES="devhooks;comm-ids;bench" >"$out/build.log" 2>&1 ||
    { tail -n 30 "$out/build.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" --target mkscope-bench mkscope-bench-nohooks \
    mkscope-bench-prof >>"$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; exit 1; }
bin=$build/bench
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "GPUs: $ngpu"

run() { # run NAME EXE ARGS...
    local name=$1 exe=$2
    shift 2
    echo "-- $name"
    if ! "$bin/$exe" run --backend cuda --steps "$steps" $model --job "gb$$" \
        --json "$out/$name.json" "$@" >"$out/$name.log" 2>&1; then
        echo "   FAILED: $(tail -n 3 "$out/$name.log")"
        return 0
    fi
    tail -n +1 "$out/$name.log" | sed 's/^/   /'
}

for R in $ranks_list; do
    if [ "$R" -gt "$ngpu" ] && [ "$R" -gt 1 ]; then
        echo "skipping $R ranks: $ngpu GPU(s)"
        continue
    fi
    run "r${R}_persistent_nohooks" mkscope-bench-nohooks --ranks "$R"
    run "r${R}_persistent_detached" mkscope-bench --ranks "$R"
    run "r${R}_persistent_profiler" mkscope-bench-prof --ranks "$R" --trace "$out/r${R}_trace"
    run "r${R}_per_op" mkscope-bench-nohooks --ranks "$R" --cuda-mode per-op
    run "r${R}_graph" mkscope-bench-nohooks --ranks "$R" --cuda-mode graph
    run "r${R}_persistent_check" mkscope-bench --ranks "$R" --check
done

# Every fault type on the largest rank count available, with its truth.
R=1
for r in $ranks_list; do [ "$r" -le "$ngpu" ] && R=$r; done
faults="task-delay:rank=0,class=o_proj moe-skew:rank=0 notify-delay:rank=0,class=qkv_proj
queue-oversub:rank=0,class=qkv_proj tile-starve:rank=0,class=qkv_proj,tile=1"
[ "$R" -gt 1 ] && faults="$faults comm-delay:rank=1,gen=1"
for f in $faults; do
    name="r${R}_fault_${f%%:*}"
    run "$name" mkscope-bench --ranks "$R" --fault "$f,magnitude=200,steps=10-29" \
        --truth "$out/$name.truth.json"
done

echo "== summary (median step time per rank, us)"
python3 - "$out" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
rows = []
for f in sorted(os.listdir(out)):
    if not f.endswith(".json") or f.endswith(".truth.json") or "_trace" in f:
        continue
    d = json.load(open(os.path.join(out, f)))
    meds = [statistics.median(r["step_ns"][5:] or r["step_ns"]) / 1e3 for r in d["ranks"]]
    tps = sum(r.get("tasks_per_s", 0) for r in d["ranks"]) / max(len(d["ranks"]), 1)
    rows.append((f[:-5], " ".join("%9.1f" % m for m in meds) + "   %.3g tasks/s/rank" % tps))
w = max(len(r[0]) for r in rows) if rows else 10
for name, meds in rows:
    print(f"{name:<{w}}  {meds}")
PY
echo "results in $out"
