#!/usr/bin/env bash
# GPU check of the NCCL profiler plugin on a machine with two GPUs: build the
# plugin and bench/gpu/nccl_ids.cu with the bare toolchain (gcc, nvcc; no
# CMake dependencies needed), run two ranks with NCCL_PROFILER_PLUGIN pointing
# at the plugin, and compare both ranks' records (nccl_ids prints RESULT).
#
# Usage: bench/gpu/nccl_ids.sh [--gpu-times] [--steps N] [--ars K] [--sync]
#        --gpu-times: MKSCOPE_NCCL_GPU_TIMES=1, per-channel GPU times and the
#                     clock alignment check
# Env:   NCCL_HOME  prefix holding include/nccl.h and lib/libnccl.so.2
#                   (default: /usr/local/cuda, /usr, then the nvidia-nccl pip
#                   package of python3)
#        OUT        where to copy the log (optional)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${1:-}" = "--gpu-times" ]; then
    export MKSCOPE_NCCL_GPU_TIMES=1
    shift
fi
build=$root/build-nccl-ids
mkdir -p "$build"

find_nccl() {
    local d
    for d in ${NCCL_HOME:-} /usr/local/cuda /usr \
             "$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)"; do
        [ -n "$d" ] || continue
        if [ -f "$d/include/nccl.h" ]; then
            for lib in "$d/lib" "$d/lib64" "$d/lib/x86_64-linux-gnu"; do
                if ls "$lib"/libnccl.so* >/dev/null 2>&1; then
                    echo "$d $lib"
                    return 0
                fi
            done
        fi
    done
    return 1
}
read -r nccl_home nccl_lib < <(find_nccl) || { echo "nccl_ids.sh: NCCL not found; set NCCL_HOME" >&2; exit 1; }
nccl_so=$(ls "$nccl_lib"/libnccl.so.2* "$nccl_lib"/libnccl.so 2>/dev/null | head -n1)
grep -E '#define NCCL_(MAJOR|MINOR|PATCH)' "$nccl_home/include/nccl.h" | tr '\n' ' '; echo "($nccl_so)"

nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cflags=(-O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC -I"$root/comm-ids/include")
src=$root/comm-ids/src
gcc "${cflags[@]}" -shared -fvisibility=hidden "$src/nccl_profiler.c" "$src/commid.c" "$src/nccl_ring.c" \
    -o "$build/libmkscope-nccl-profiler.so" -lpthread
gcc "${cflags[@]}" -c "$src/commid.c" -o "$build/commid.o"
gcc "${cflags[@]}" -c "$src/nccl_ring.c" -o "$build/nccl_ring.o"
gcc "${cflags[@]}" -c "$src/clock.c" -o "$build/clock.o"
"$nvcc" -O2 -arch=sm_90 -std=c++17 -Werror all-warnings -Xcompiler=-Wall,-Wextra \
    -I"$root/comm-ids/include" -I"$nccl_home/include" "$root/bench/gpu/nccl_ids.cu" \
    "$build/commid.o" "$build/nccl_ring.o" "$build/clock.o" "$nccl_so" -lm -Xlinker -rpath="$nccl_lib" -o "$build/nccl_ids"

export NCCL_NVLS_ENABLE=0
export NCCL_PROFILER_PLUGIN=$build/libmkscope-nccl-profiler.so
export NCCL_DEBUG=${NCCL_DEBUG:-INFO}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,ENV}
log=$build/nccl_ids${MKSCOPE_NCCL_GPU_TIMES:+_gpu_times}.log
set +e
"$build/nccl_ids" "$@" >"$log" 2>&1
rc=$?
set -e
# the full log keeps NCCL's INFO lines; show the plugin's and the check's
grep -E 'NCCL version|PROFILER|mkscope|^rank|id:|matched|enqueue|gpu times|all-reduce on|offset|intervals|RESULT|CLOCK CHECK|nccl_ids|failed' "$log" || true
if [ -n "${OUT:-}" ]; then cp "$log" "$OUT/"; fi
exit "$rc"
