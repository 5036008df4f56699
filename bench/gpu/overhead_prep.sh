#!/usr/bin/env bash
# Prepare, on a machine with our build tools and nvcc, what
# bench/gpu/overhead.sh needs on a GPU machine that has neither: the
# binaries (built here from the checkout: Release, CUDA for sm_90), the
# monitor objects (the standard five and bench/gpu/hist_all.bpf.c, which
# the verifier must accept), and the Debian packages of every shared
# library they load that glibc and the CUDA driver do not provide, so that
# on the GPU machine LD_LIBRARY_PATH gives them one consistent set.
#   bench/gpu/overhead_prep.sh DIR [BUILD]
# DIR/bin/*, DIR/monitors/*.bpf.o, DIR/debs/*.deb, DIR/conformance, DIR/commit;
# on the GPU:
#   MKS_BIN_DIR=DIR/bin MKS_MONITORS_DIR=DIR/monitors MKS_DEBS=DIR/debs bench/gpu/overhead.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:?usage: $0 DIR [BUILD]}
build=${2:-$root/build-overhead-prep}
mkdir -p "$dir/bin" "$dir/monitors" "$dir/debs"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMKS_BUILD_TESTS=OFF \
    -DMKS_MODULES="devhooks;comm-ids;proto;query;agent;collector;bench" >"$build.log" 2>&1 ||
    { tail -n 20 "$build.log"; exit 1; }
cmake --build "$build" -j2 --target mkscope-bench mkscope-bench-nohooks mkscope-bench-prof \
    mkscope-agent mkscope-collector mkscope mkscope-devhooks-cost mkscope-verify mks_monitors \
    mkscope-vm-conformance-gpu \
    >>"$build.log" 2>&1 || { grep -m 20 -E "error|Error" "$build.log"; exit 1; }
for b in bench/mkscope-bench bench/mkscope-bench-nohooks bench/mkscope-bench-prof \
    agent/mkscope-agent collector/mkscope-collector collector/cli/mkscope \
    devhooks/mkscope-devhooks-cost devhooks/mkscope-vm-conformance-gpu; do
    cp "$build/$b" "$dir/bin/"
done
# the conformance cases the GPU VM runs (bench/gpu/devhooks_run.sh reads the same)
rm -rf "$dir/conformance"
cp -r "$root/../shared/conformance" "$dir/conformance"
cp "$build/agent/monitors"/*.bpf.o "$dir/monitors/"
clang -target bpf -O2 -g -Wall -Werror -I "$root/devhooks/include" \
    -c "$root/bench/gpu/hist_all.bpf.c" -o "$dir/monitors/hist_all.bpf.o"
"$build/devhooks/mkscope-verify" "$dir/monitors/hist_all.bpf.o" >/dev/null ||
    { echo "$0: hist_all.bpf.o rejected by the verifier" >&2; exit 1; }
# the packages of the shared libraries the binaries load (not glibc's, the
# C++ runtime's or the driver's, which the GPU machine has)
pkgs=$(for b in "$dir/bin"/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
    while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null; done |
    cut -d: -f1 | sort -u | grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6|libcrypt1' || true)
rm -f "$dir/debs"/*.deb
# shellcheck disable=SC2086
(cd "$dir/debs" && apt-get download $pkgs >/dev/null)
git -C "$root" rev-parse HEAD >"$dir/commit"
git -C "$root" status --porcelain | grep -q . && echo "(with uncommitted changes)" >>"$dir/commit"
echo "prepared $dir from $(head -c 12 "$dir/commit"): $(ls "$dir/bin" | tr '\n' ' ')"
echo "debs: $(ls "$dir/debs" | tr '\n' ' ')"
