#!/usr/bin/env bash
# Prepare, on a machine with our build tools, what runtimes/mpk/gpu/run.sh
# needs on a GPU machine that has none of them: our programs and the MPK
# host library built here (BUILD), the monitor objects, the runtime .debs of
# the libraries they link (unpacked there beside them, never into python's
# path), the sources of HEAD (the adapter headers MPK's kernel includes) and
# the Mirage kit (the a9e0f745 archive, z3 packages, build-offline.sh).
#   runtimes/mpk/gpu/prep.sh [DIR] [BUILD] [KIT]
#   (defaults <root>/.gpu-mpk, <root>/build, ../shared/third_party/mirage)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
dir=${1:-$root/.gpu-mpk}
build=${2:-$root/build}
kit=${3:-$root/../shared/third_party/mirage}
[ -f "$kit/mirage-a9e0f745-with-deps.tar.gz" ] || { echo "$0: no Mirage kit at $kit" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/monitors" "$dir/debs" "$dir/kit/debs"
cmake --build "$build" -j2 --target mkscope-agent mkscope-collector mkscope mkscope_mpk \
    mkscope-mpk-schema mks_monitors >/dev/null
for b in agent/mkscope-agent collector/mkscope-collector collector/cli/mkscope \
    runtimes/mpk/mkscope-mpk-schema runtimes/mpk/libmkscope_mpk.so; do
    cp "$build/$b" "$dir/bin/"
done
cp "$build/agent/monitors"/*.bpf.o "$dir/monitors/"
git -C "$root" archive -o "$dir/src.tar" HEAD
pkgs=$(for b in "$dir/bin"/*; do ldd "$b"; done | awk '/=> \//{print $3}' | sort -u |
    while read -r lib; do dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null; done |
    cut -d: -f1 | sort -u | grep -v -x -E 'libc6|libgcc-s1|libstdc\+\+6|libcrypt1' || true)
(cd "$dir/debs" && apt-get download $pkgs >/dev/null 2>&1)
cp "$kit/mirage-a9e0f745-with-deps.tar.gz" "$kit/build-offline.sh" "$kit/rust_stubs.c" "$dir/kit/"
cp "$kit"/debs/*.deb "$dir/kit/debs/"
chmod -R u+w "$dir"
git -C "$root" rev-parse --short HEAD >"$dir/commit"
echo "prepared $dir from $(cat "$dir/commit"): $(ls "$dir/bin" | tr '\n' ' ')"
echo "debs: $(ls "$dir/debs" | tr '\n' ' ')"
du -sh "$dir"
