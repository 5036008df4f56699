#!/bin/sh
# Build and run the devhooks cost benchmark on a GPU machine (an H200), from a
# checkout with the Debian packages of our dependencies in .debs/ (the GPU
# machines reach no registry; the devhooks module's CMake wants libbpf).
#   bench/gpu/run.sh [OUTDIR]
# Prints the tables of mkscope-devhooks-cost (short and long tasks) and of
# mkscope-vm-bench (the CPU VM on this machine's processor) and copies them
# to OUTDIR when given.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-}
work=${TMPDIR:-/tmp}/mkscope-gpu
prefix=$work/prefix
mkdir -p "$prefix"
for f in "$src"/.debs/*.deb; do dpkg -x "$f" "$prefix"; done
cmake -S "$src" -B "$work/build" -DMKS_MODULES=devhooks -DMKS_BUILD_TESTS=OFF \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix/usr" >"$work/cmake.log"
cmake --build "$work/build" -j"$(nproc)" --target mkscope-devhooks-cost mkscope-vm-bench \
      >"$work/build.log" 2>&1 || { tail -30 "$work/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true
bin=$work/build/devhooks
{
  echo "== short tasks (64-step body)"
  "$bin/mkscope-devhooks-cost" 20000 64
  echo "== long tasks (4096-step body, a few microseconds like a tile task)"
  "$bin/mkscope-devhooks-cost" 2000 4096
  echo "== CPU VM"
  "$bin/mkscope-vm-bench"
} 2>&1 | tee "$work/results.txt"
[ -n "$out" ] && cp "$work/results.txt" "$work/build.log" "$out"/ || true
