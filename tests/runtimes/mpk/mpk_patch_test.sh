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
prog=$src/runtimes/mpk/apply.sh
# shellcheck source=tests/cli_expect.sh
source "$src/tests/cli_expect.sh"
out_has() { # NEEDLE: the last run's stdout holds it
    grep -qF -- "$1" "$tmp/out" || { echo "FAIL: stdout lacks '$1'"; fails=$((fails + 1)); }
}
mkdir "$tmp/kit"
tar -xzf "$archive" -C "$tmp/kit"
m=$tmp/kit/mirage
k=include/mirage/persistent_kernel/persistent_kernel.cuh
before=$(sha256sum "$m/$k" "$m/python/mirage/mpk/persistent_kernel.py")
expect 0 "" --check "$m"; out_has "the mkscope hook sites fit"
expect 0 "" "$m"; out_has "hook sites added"
expect 0 "" "$m"; out_has "already applied"
expect 0 "" --check "$m"; out_has "already applied"
# every added line that names mkscope sits inside #ifdef MKS_MPK, so the
# patched tree built without it is MPK's own code
outside=$(awk '/^#ifdef MKS_MPK/{d=1} /^#else/{if(d)d=2} /^#endif/{d=0} {if(d!=1 && /mks_|MKS_/) print NR": "$0}' "$m/$k")
if [ -n "$outside" ]; then
    echo "FAIL: sites outside #ifdef MKS_MPK: $outside"
    fails=$((fails + 1))
else
    :
fi
expect 0 "" --revert "$m"; out_has "taken out"
after=$(sha256sum "$m/$k" "$m/python/mirage/mpk/persistent_kernel.py")
if [ "$before" != "$after" ]; then
    echo "FAIL: after --revert the files differ from the pristine ones"
    fails=$((fails + 1))
else
    :
fi
# an edited file: refused, untouched
echo "// local change" >>"$m/$k"
edited=$(sha256sum "$m/$k")
expect 1 "is not Mirage a9e0f745: $k differs" "$m"
[ "$(sha256sum "$m/$k")" = "$edited" ] || { echo "FAIL: the refused tree was changed"; fails=$((fails + 1)); }
expect 1 "does not carry mkscope's hook sites" --revert "$m"
# another commit of Mirage
other=$kit/mirage-de8745d9-nodeps.tar.gz
if [ -f "$other" ]; then
    mkdir "$tmp/other"
    tar -xzf "$other" -C "$tmp/other"
    expect 1 "is not Mirage a9e0f745" "$tmp/other/mirage"
fi
mkdir -p "$tmp/empty"
expect 1 "is not a Mirage checkout" "$tmp/empty"
expect 2 "usage:"
expect 2 "no such directory" "$tmp/nope"
expect 2 "unknown option" --bogus "$m"
[ "$fails" -eq 0 ] && echo "mpk_patch_test: all checks passed" || echo "mpk_patch_test: $fails failed"
exit $((fails > 0))
