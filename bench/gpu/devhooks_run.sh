#!/bin/sh
# Build and run the devhooks device tests and cost benchmark on a GPU
# machine (an H200), from a
# checkout with the Debian packages of our dependencies in .debs/ (the GPU
# machines reach no registry; the devhooks module's CMake wants libbpf).
#   bench/gpu/devhooks_run.sh [OUTDIR]
# Runs the conformance cases in the VM compiled for the GPU
# (MKS_CONFORMANCE_DIR, default ../shared/conformance beside the checkout),
# mkscope-devhooks-cost (short and long tasks) and mkscope-vm-bench (the CPU
# VM on this machine's processor, against uBPF when MKS_UBPF_LIB names a
# libubpf.so), and copies the results (and the benchmark's SASS) to OUTDIR
# when given.  MKS_GPU_PARTS=cost runs only the cost benchmark (and builds
# only it).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-}
work=${TMPDIR:-/tmp}/mkscope-gpu
prefix=$work/prefix
mkdir -p "$prefix"
for f in "$src"/.debs/*.deb; do dpkg -x "$f" "$prefix"; done
cmake -S "$src" -B "$work/build" -DMKS_MODULES=devhooks -DMKS_BUILD_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" >"$work/cmake.log"
parts=${MKS_GPU_PARTS:-all}
targets="mkscope-devhooks-cost"
[ "$parts" = cost ] || targets="$targets mkscope-vm-bench mkscope-vm-conformance-gpu"
# shellcheck disable=SC2086
cmake --build "$work/build" -j"$(nproc)" --target $targets \
      >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
bin=$work/build/devhooks
{
  if [ "$parts" != cost ]; then
    echo "== conformance cases in the GPU VM"
    MKS_SOURCE_DIR=$src "$bin/mkscope-vm-conformance-gpu" \
        "${MKS_CONFORMANCE_DIR:-$src/../shared/conformance}" | tail -5
  fi
  echo "== short tasks (64-step body)"
  "$bin/mkscope-devhooks-cost" 20000 64
  echo "== long tasks (1024-step body, microseconds like a tile task)"
  "$bin/mkscope-devhooks-cost" 5000 1024
  if [ "$parts" != cost ]; then
    echo "== CPU VM"
    "$bin/mkscope-vm-bench"
  fi
} 2>&1 | tee "$work/results.txt"
if [ -n "$out" ]; then
  cp "$work/results.txt" "$work/build.log" "$out"/
  # The machine code of the hook paths, for reading beside the numbers.
  cuobjdump -sass "$bin/mkscope-devhooks-cost" 2>/dev/null | gzip >"$out/devhooks_cost.sass.gz" || true
  # The scheduler kernels as text: compiled out (0) against the gate
  # layouts (5 gate, 6 gate-inl, 7 gate-old), for comparing the fast loop.
  for m in 0 5 6 7; do
    cuobjdump -sass -fun "_Z10megakernelILi${m}EEvPKjjjPm10mks_dev_rtP7raw_recPKmPj" \
        "$bin/mkscope-devhooks-cost" >"$out/megakernel$m.sass" 2>&1 || true
  done
fi
