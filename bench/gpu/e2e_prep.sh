#!/usr/bin/env bash
# Prepare, on a machine with our build tools, what bench/gpu/e2e.sh needs on
# a GPU machine that has none: a snapshot of the committed sources (HEAD, so
# that edits in progress in the checkout do not travel), the protoc-c output
# and the agent's monitor objects built from that same snapshot (monitors and
# agent must agree on map layouts), and the Debian runtime libraries of our
# dependencies that an Ubuntu machine may lack.
#   bench/gpu/e2e_prep.sh [DIR]      (default <root>/.devcarry, git-ignored)
# DIR/src.tar, DIR/gen/mkscope.pb-c.{c,h}, DIR/monitors/*.bpf.o, DIR/debs/*.deb
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/.devcarry}
mkdir -p "$dir/gen" "$dir/monitors" "$dir/debs"
work=$(mktemp -d /tmp/mkscope-e2e-prep.XXXXXX)
trap 'rm -rf "$work"' EXIT
git -C "$root" archive -o "$dir/src.tar" HEAD
mkdir "$work/src"
tar -xf "$dir/src.tar" -C "$work/src"
cmake -S "$work/src" -B "$work/build" -DMKS_WITH_CUDA=OFF -DMKS_BUILD_TESTS=OFF \
    -DMKS_MODULES="devhooks;comm-ids;proto;query;agent" >"$work/log" 2>&1 ||
    { tail -n 20 "$work/log"; exit 1; }
cmake --build "$work/build" -j2 --target mks_monitors mks_proto >>"$work/log" 2>&1 ||
    { tail -n 20 "$work/log"; exit 1; }
cp "$work/build/proto/gen/mkscope.pb-c.c" "$work/build/proto/gen/mkscope.pb-c.h" "$dir/gen/"
rm -f "$dir/monitors"/*.bpf.o
cp "$work/build/agent/monitors"/*.bpf.o "$dir/monitors/"
# runtime libraries of sqlite3, gnutls (libmicrohttpd) and ucx (libnuma).
# Not nettle, hogweed or gmp: the GPU machines' own gnutls needs their newer
# nettle (siv_gcm), and Debian's, found first through -rpath-link, fails the
# collector's link there.
rm -f "$dir/debs"/libnettle8_*.deb "$dir/debs"/libhogweed6_*.deb "$dir/debs"/libgmp10_*.deb
if ! ls "$dir/debs"/libsqlite3-0_*.deb >/dev/null 2>&1; then
    (cd "$dir/debs" && apt-get download libsqlite3-0 libunistring2 libidn2-0 libp11-kit0 \
        libtasn1-6 libffi8 libzstd1 libnuma1)
fi
echo "prepared $dir from $(git -C "$root" rev-parse --short HEAD):" \
    "$(ls "$dir/monitors" | tr '\n' ' ')"
