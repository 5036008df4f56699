#!/usr/bin/env bash
# bench/faults_alike.sh on GPUs: builds mkscope-bench with the CUDA backend
# and compares every fault type with a clean run, persistent megakernel,
# magnitude 1000 us, in this order (the first matter most; each part has its
# own time limit and a budget skips what is left):
#   medium model on 1 GPU, small model on 1 GPU (five types: comm-delay
#   needs a peer; on the medium model also skew-routing, the skewed routing
#   without delay), then both on 2 GPUs (all six), one rank per GPU.
# Summaries go to OUT/falike-<ranks>-<size>.txt, result JSON of every run
# to OUT/falike-runs.tar.gz.
#
#   bench/gpu/faults_alike.sh [--out DIR] [--reps N] [--budget S] [--ranks "1 2"]
#                             [--loop "on off"]
#
# --loop: the closed loop settings to run, each a pass of its own, in this
# order (bench/faults_alike.sh --loop; default "on").
#
# MKS_DEBS=DIR[:DIR...]: .deb files of the dependencies unpacked into a
# prefix (as bench/gpu/e2e.sh does, for GPU machines without our packages);
# MKS_FALIKE_BUILD: build directory (default <root>/build-gpu-falike).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$PWD/falike-out} reps=3 budget=240 ranks_list="1 2" loops="on"
usage="usage: $0 [--out DIR] [--reps N] [--budget S] [--ranks \"1 2\"] [--loop \"on off\"]"
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
    case $1 in
    --out) out=$2 ;;
    --reps) reps=$2 ;;
    --budget) budget=$2 ;;
    --ranks) ranks_list=$2 ;;
    --loop) loops=$2 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift 2
done
# NVLink multicast stays off: a program using it can take a shared host's
# GPUs out of service.
export NCCL_NVLS_ENABLE=0
mkdir -p "$out"
build=${MKS_FALIKE_BUILD:-$root/build-gpu-falike}
t0=$SECONDS
# shellcheck source=bench/gpu/debs_prefix.sh
source "$root/bench/gpu/debs_prefix.sh"
mks_debs_prefix mkscope-falike-prefix || exit 1
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm --format=csv,noheader >"$out/falike-gpus.txt" 2>&1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMKS_BUILD_TESTS=OFF \
    -DMKS_MODULES="devhooks;comm-ids;bench" "${cmake_args[@]}" &&
    cmake --build "$build" -j"$(nproc)" --target mkscope-bench; } >"$out/falike-build.log" 2>&1; then
    tail -n 30 "$out/falike-build.log"
    exit 1
fi
echo "built in $((SECONDS - t0)) s; $ngpu GPU(s)"
[ -n "$prefix_lib" ] && export LD_LIBRARY_PATH=$prefix_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
runs=$(mktemp -d)
rc=0
for loop in $loops; do
    for R in $ranks_list; do
        [ "$R" -le "$ngpu" ] || { echo "skipping $R ranks: $ngpu GPU(s)"; continue; }
        vis=$(seq -s, 0 $((R - 1)))
        for size in medium small; do
            left=$((budget - (SECONDS - t0)))
            if [ "$left" -lt 20 ]; then
                echo "skipping $R ranks, $size, loop $loop: budget spent"
                continue
            fi
            steps=60 window=20-39 types="task-delay moe-skew notify-delay queue-oversub comm-delay tile-starve"
            [ "$size" = medium ] && steps=40 window=15-34
            [ "$size" = medium ] && [ "$R" = 1 ] && types="$types skew-routing"
            CUDA_VISIBLE_DEVICES=$vis timeout -k 5 "$left" "$root/bench/faults_alike.sh" \
                "$build/bench/mkscope-bench" --backend cuda --size "$size" --ranks "$R" \
                --magnitude 1000 --steps "$steps" --window "$window" --reps "$reps" --timeout 60 \
                --types "$types" --loop "$loop" \
                --out "$runs/r$R-$size-$loop" >"$out/falike-$R-$size-$loop.txt" 2>&1 || rc=1
            cat "$out/falike-$R-$size-$loop.txt"
            echo "   ($((SECONDS - t0)) s so far)"
        done
    done
done
tar -czf "$out/falike-runs.tar.gz" -C "$runs" . 2>/dev/null
rm -rf "$runs"
exit $rc
