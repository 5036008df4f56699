#!/usr/bin/env bash
# Prepare, on a machine with our build tools, what runtimes/mpk/gpu/run.sh
# needs on a GPU machine that has none: everything bench/gpu/e2e_prep.sh
# makes (sources of HEAD, protoc-c output, monitor objects, runtime .debs)
# and the Mirage kit (the a9e0f745 archive, z3 packages, build-offline.sh).
#   runtimes/mpk/gpu/prep.sh [DIR] [KIT]   (default <root>/.gpu-mpk, ../shared/third_party/mirage)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
dir=${1:-$root/.gpu-mpk}
kit=${2:-$root/../shared/third_party/mirage}
[ -f "$kit/mirage-a9e0f745-with-deps.tar.gz" ] || { echo "$0: no Mirage kit at $kit" >&2; exit 1; }
"$root/bench/gpu/e2e_prep.sh" "$dir"
mkdir -p "$dir/kit/debs"
cp "$kit/mirage-a9e0f745-with-deps.tar.gz" "$kit/build-offline.sh" "$kit/rust_stubs.c" "$dir/kit/"
cp "$kit"/debs/*.deb "$dir/kit/debs/"
chmod u+w -R "$dir/kit"
du -sh "$dir"
