#!/usr/bin/env bash
# The MPK adapter compiled by nvcc for sm_90a (-gencode=arch=compute_90a,
# code=sm_90a, as MPK builds for Hopper): on its own always, and, where the
# Mirage kit is beside the checkout, MPK's persistent kernel patched with the
# hook sites (a stand-in for a generated kernel: MPK's runtime with two of
# its Hopper task bodies) with -DMKS_MPK.  ptxas must report no spills.
#   mpk_compile_test.sh SOURCE_DIR NVCC KIT_DIR
set -uo pipefail
src=$1 nvcc=$2 kit=$3
tmp=$(mktemp -d /tmp/mkscope-mpk-cc.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
arch=(-gencode=arch=compute_90a,code=sm_90a)
inc=(-I"$src/devhooks/include" -I"$src/runtimes/mpk/include")
fails=0
if "$nvcc" "${arch[@]}" -std=c++17 -O3 "${inc[@]}" -Werror all-warnings -Xptxas -v -c \
    "$src/tests/runtimes/mpk/adapter_only.cu" -o "$tmp/a.o" >"$tmp/a.log" 2>&1 &&
    ! grep -q "[1-9][0-9]* bytes spill" "$tmp/a.log"; then
    echo "ok   adapter alone for sm_90a"
else
    echo "FAIL adapter alone:"
    cat "$tmp/a.log"
    fails=$((fails + 1))
fi
archive=$kit/mirage-a9e0f745-with-deps.tar.gz
if [ ! -f "$archive" ]; then
    echo "SKIP: no Mirage kit at $kit: MPK's kernel with the hook sites not compiled"
else
    tar -xzf "$archive" -C "$tmp"
    m=$tmp/mirage
    "$src/runtimes/mpk/apply.sh" "$m" >/dev/null || { echo "FAIL apply"; exit 1; }
    # get_compile_command()'s flags for a Hopper build (offline serving)
    mpk=(-O3 -std=c++17 "${arch[@]}" -DMPK_ENABLE_TMA -DMIRAGE_GRACE_HOPPER -DNDEBUG
        -DMODE_OFFLINE -DMPK_MAX_NUM_BATCHED_REQUESTS=8 -DMPK_MAX_NUM_BATCHED_TOKENS=8
        -DMPK_MAX_NUM_PAGES=16 -DMPK_PAGE_SIZE=4096 -DMPK_MAX_SEQ_LENGTH=512 -DMPK_TARGET_CC=90
        -DMIRAGE_BACKEND_USE_CUDA -DMAX_WORKER_PER_SCHEDULER=9 -DMIRAGE_USE_CUTLASS_KERNEL=1
        --expt-relaxed-constexpr -use_fast_math -I"$m/include"
        -I"$m/include/mirage/persistent_kernel" -I"$m/deps/cutlass/include"
        -I"$m/deps/cutlass/tools/util/include" -I"$m/deps/json/include")
    if "$nvcc" "${mpk[@]}" -DMKS_MPK "${inc[@]}" -Xptxas -v -c \
        "$src/tests/runtimes/mpk/standin.cu" -o "$tmp/k.o" >"$tmp/k.log" 2>&1 &&
        ! grep -q "[1-9][0-9]* bytes spill" "$tmp/k.log"; then
        echo "ok   MPK's kernel with the hook sites for sm_90a:" \
            "$(grep -A2 "worker_kernel" "$tmp/k.log" | grep -o "Used [0-9]* registers.*smem" | head -1)"
    else
        echo "FAIL MPK's kernel with the hook sites:"
        grep -E "error|spill" "$tmp/k.log" | head -20
        fails=$((fails + 1))
    fi
fi
[ "$fails" -eq 0 ] && echo "mpk_compile_test: all checks passed"
exit $((fails > 0))
