#!/usr/bin/env bash
# The MPK patch against the pinned Mirage sources of the kit
# (../shared/third_party/mirage): it fits a9e0f745 and only that, applies
# and reverts, says "already applied" the second time, and refuses another
# commit's tree and an edited file with one line and no change.  Exit 77
# (skipped) where the kit is absent.
#   mpk_patch_test.sh SOURCE_DIR KIT_DIR
set -uo pipefail
src=$1 kit=$2
archive=$kit/mirage-a9e0f745-with-deps.tar.gz
if [ ! -f "$archive" ]; then
    echo "SKIP: no Mirage kit at $kit (../shared/third_party/mirage beside the checkout)"
    exit 77
fi
apply=$src/runtimes/mpk/apply.sh
tmp=$(mktemp -d /tmp/mkscope-mpk-patch.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { # NAME EXPECTED-RC STRING-IN-OUTPUT COMMAND...
    local name=$1 want=$2 grep_for=$3 out rc
    shift 3
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ] || ! grep -qF -- "$grep_for" <<<"$out"; then
        echo "FAIL $name: rc $rc (want $want), output: $out"
        fails=$((fails + 1))
    else
        echo "ok   $name"
    fi
}
tar -xzf "$archive" -C "$tmp"
m=$tmp/mirage
k=include/mirage/persistent_kernel/persistent_kernel.cuh
before=$(sha256sum "$m/$k" "$m/python/mirage/mpk/persistent_kernel.py")
check fits 0 "the mkscope hook sites fit" "$apply" --check "$m"
check apply 0 "hook sites added" "$apply" "$m"
check again 0 "already applied" "$apply" "$m"
check check-applied 0 "already applied" "$apply" --check "$m"
# every added line that names mkscope sits inside #ifdef MKS_MPK, so the
# patched tree built without it is MPK's own code
outside=$(awk '/^#ifdef MKS_MPK/{d=1} /^#else/{if(d)d=2} /^#endif/{d=0} {if(d!=1 && /mks_|MKS_/) print NR": "$0}' "$m/$k")
if [ -n "$outside" ]; then
    echo "FAIL sites outside #ifdef MKS_MPK: $outside"
    fails=$((fails + 1))
else
    echo "ok   every hook site is under #ifdef MKS_MPK"
fi
check revert 0 "taken out" "$apply" --revert "$m"
after=$(sha256sum "$m/$k" "$m/python/mirage/mpk/persistent_kernel.py")
if [ "$before" != "$after" ]; then
    echo "FAIL revert: files differ from the pristine ones"
    fails=$((fails + 1))
else
    echo "ok   reverted byte for byte"
fi
# an edited file: refused, untouched
echo "// local change" >>"$m/$k"
edited=$(sha256sum "$m/$k")
check edited 1 "is not Mirage a9e0f745: $k differs" "$apply" "$m"
[ "$(sha256sum "$m/$k")" = "$edited" ] || { echo "FAIL edited: the file was changed"; fails=$((fails + 1)); }
check revert-unpatched 1 "does not carry mkscope's hook sites" "$apply" --revert "$m"
# another commit of Mirage
other=$kit/mirage-de8745d9-nodeps.tar.gz
if [ -f "$other" ]; then
    mkdir "$tmp/other"
    tar -xzf "$other" -C "$tmp/other"
    check other-commit 1 "is not Mirage a9e0f745" "$apply" "$tmp/other/mirage"
fi
check not-mirage 1 "is not a Mirage checkout" "$apply" "$tmp"
check usage 2 "usage:" "$apply"
check no-dir 2 "no such directory" "$apply" "$tmp/nope"
[ "$fails" -eq 0 ] && echo "mpk_patch_test: all checks passed" || echo "mpk_patch_test: $fails failed"
exit $((fails > 0))
