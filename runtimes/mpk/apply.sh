#!/usr/bin/env bash
# Adds mkscope's hook sites to a Mirage (MPK) checkout:
#   runtimes/mpk/apply.sh [--check] [--revert] MIRAGE_DIR
# The patch (patch/mirage-a9e0f745.patch) fits Mirage at commit a9e0f745
# only, the tree of its with-deps archive: the two files it changes must be
# byte for byte that commit's, or nothing is touched and the script says
# which file differs.  Every line it adds sits under #ifdef MKS_MPK (or reads
# an environment variable mkscope's build sets), so the patched tree built
# without -DMKS_MPK is the unpatched build.  docs/mpk.md: the steps after it.
#   --check   only say whether the patch fits (exit 0) or not (exit 1)
#   --revert  take the patch out again
# Exit: 0 done (or already applied), 1 the tree does not fit, 2 usage.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
patch_file=$here/patch/mirage-a9e0f745.patch
commit=a9e0f745
# The files the patch touches, with their sha256 at a9e0f745.
files=(
    "include/mirage/persistent_kernel/persistent_kernel.cuh 805c5b73226b927c079b9c18466836e69dccd9acbe04b9c1ad4696152b0ac492"
    "python/mirage/mpk/persistent_kernel.py e65c4bfbbba17411e15b50592de00a2fb251be71d17241dd74a5d01d522f47e1"
)
usage="usage: $0 [--check] [--revert] MIRAGE_DIR"
mode=apply
while [ $# -gt 0 ]; do
    case $1 in
    --check) mode=check ;;
    --revert) mode=revert ;;
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "$0: unknown option '$1'; $usage" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -eq 1 ] || { echo "$usage" >&2; exit 2; }
dir=$1
[ -d "$dir" ] || { echo "$0: $dir: no such directory (expected a Mirage checkout)" >&2; exit 2; }
command -v patch >/dev/null || { echo "$0: needs the 'patch' program" >&2; exit 2; }
dir=$(cd "$dir" && pwd)
for f in "${files[@]}"; do
    set -- $f
    [ -f "$dir/$1" ] || {
        echo "$0: $dir is not a Mirage checkout: it has no $1" >&2
        exit 1
    }
done

# Already applied: the patch reverses cleanly.
if patch -p1 -R --dry-run -s -f -d "$dir" <"$patch_file" >/dev/null 2>&1; then
    case $mode in
    check) echo "$dir: mkscope hook sites already applied (Mirage $commit)"; exit 0 ;;
    apply) echo "$dir: mkscope hook sites already applied; nothing to do"; exit 0 ;;
    revert)
        patch -p1 -R -s -f -d "$dir" <"$patch_file"
        echo "$dir: mkscope hook sites taken out"
        exit 0 ;;
    esac
fi
if [ "$mode" = revert ]; then
    echo "$0: $dir does not carry mkscope's hook sites (or they were edited since); nothing taken out" >&2
    exit 1
fi

head_note=""
if [ -e "$dir/.git" ] && command -v git >/dev/null; then
    h=$(git -C "$dir" rev-parse HEAD 2>/dev/null || true)
    [ -n "$h" ] && head_note=" (its git HEAD is ${h:0:12})"
fi
for f in "${files[@]}"; do
    set -- $f
    got=$(sha256sum "$dir/$1" | cut -d' ' -f1)
    if [ "$got" != "$2" ]; then
        echo "$0: $dir$head_note is not Mirage $commit: $1 differs from that commit's" \
            "(sha256 ${got:0:16}..., expected ${2:0:16}...). The mkscope hook sites fit" \
            "Mirage $commit only (git checkout $commit, or the with-deps archive of that" \
            "commit); nothing was changed" >&2
        exit 1
    fi
done
if ! patch -p1 --dry-run -s -f -d "$dir" <"$patch_file" >/dev/null 2>&1; then
    echo "$0: mkscope bug: the patch does not apply to the files of Mirage $commit" >&2
    exit 1
fi
if [ "$mode" = check ]; then
    echo "$dir: Mirage $commit; the mkscope hook sites fit"
    exit 0
fi
patch -p1 -s -f -d "$dir" <"$patch_file"
echo "$dir: mkscope hook sites added (Mirage $commit); build with MKS_MPK_NVCC_FLAGS set (docs/mpk.md)"
