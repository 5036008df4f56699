#!/usr/bin/env bash
# The GPU runner's driver (runtimes/mpk/gpu/drive.py) on a CPU, against a
# stand-in for the MPK processes (fake_serve.py): processes started and
# answered, every phase run through (rounds, counts, live commands to a real
# collector and agent, faults with the diagnosis), the table printed last.
# What needs MPK and a GPU (counts equal, faults named) is not judged here.
#   mpk_drive_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$1 build=$2
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d /tmp/mkscope-mpk-drive.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
b=$tmp/bin
mkdir -p "$b/agent" "$b/collector/cli" "$b/runtimes/mpk"
cp "$build/agent/mkscope-agent" "$b/agent/"
cp "$build/collector/mkscope-collector" "$b/collector/"
cp "$build/collector/cli/mkscope" "$b/collector/cli/"
cp "$build/runtimes/mpk/mkscope-mpk-schema" "$b/runtimes/mpk/"
echo "-DMKS_MPK" >"$b/runtimes/mpk/mkscope-mpk-flags"
MKS_MPK_SERVE=$src/tests/runtimes/mpk/fake_serve.py timeout 200 python3 \
    "$src/runtimes/mpk/gpu/drive.py" --bin "$b" --monitors "$build/agent/monitors" \
    --out "$tmp/out" --rounds 2 --batches 1,8 --budget 150 >"$tmp/log" 2>&1
rc=$?
fails=0
need() {
    grep -qE -- "$1" "$tmp/log" || { echo "FAIL: the driver's output lacks /$1/"; fails=$((fails + 1)); }
}
[ "$rc" -eq 0 ] || { echo "FAIL: drive.py exited $rc"; fails=$((fails + 1)); }
need "plain8: ready"
need "^== live: one launch"
need "attach --builtin latency --name latency_b --replace latency: rc"
need "^== MPK with mkscope on one GPU"
for v in "plain +1 " "detached +8 " "attached +8 " "prof +8 "; do need "^$v"; done
need "^fault task-delay on silu_mul_hopper.silu_mul_out"
need "^fault notify-delay on linear_hopper.attn_in"
[ -s "$tmp/out/results.json" ] || { echo "FAIL: no results.json"; fails=$((fails + 1)); }
# a launch that never ends: the process is named, killed, and the others
# go on to the table
MKS_FAKE_MPK_HANG=mks1:r0-det MKS_MPK_SERVE=$src/tests/runtimes/mpk/fake_serve.py timeout 200 \
    python3 "$src/runtimes/mpk/gpu/drive.py" --bin "$b" --monitors "$build/agent/monitors" \
    --out "$tmp/out2" --rounds 1 --batches 1,8 --budget 150 >"$tmp/log2" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { echo "FAIL: drive.py exited $rc with a hung launch"; fails=$((fails + 1)); }
for re in "mks1 r0-det: no answer in [0-9]+ s" "mks1: killed; its log ends" \
    "^== MPK with mkscope on one GPU" "^attached +8 "; do
    grep -qE -- "$re" "$tmp/log2" || { echo "FAIL: with a hung launch, the output lacks /$re/"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ] && echo "mpk_drive_test: all checks passed" || tail -n 30 "$tmp/log" "$tmp/log2"
exit $((fails > 0))
