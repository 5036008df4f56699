#!/usr/bin/env bash
# mkscope inside MPK on one GPU, in one go: builds MPK from the kit and
# mkscope, adds the hook sites (runtimes/mpk/apply.sh), then
# runtimes/mpk/gpu/drive.py serves a Qwen3-shaped model (random weights of
# Qwen3-8B's shapes) at batch 1 and 8 without hooks, with hooks detached and
# attached, and in MPK's profiling build; replaces, detaches and re-attaches
# monitors during one launch; injects faults for the diagnosis; prints one
# table last (also OUT/summary.txt).
#   runtimes/mpk/gpu/run.sh CARRY_DIR [OUT]      (CARRY_DIR from runtimes/mpk/gpu/prep.sh)
# Environment: MPK_LAYERS (8), MPK_SEQ (512), MPK_GROUPS (4), MPK_ROUNDS (3),
# MPK_BUDGET (seconds for the runs, 420).
set -uo pipefail
carry=$(cd "${1:?usage: run.sh CARRY_DIR [OUT]}" && pwd)
out=${2:-${OUT:-$PWD/mpk-out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# NVLink multicast stays off (a program using it can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
w=${MPK_WORK:-/tmp/mkscope-mpk}
rm -rf "$w" && mkdir -p "$w/src" "$w/res"
t0=$SECONDS
tar -xf "$carry/src.tar" -C "$w/src"
src=$w/src
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >"$w/res/gpu.txt" 2>&1
python3 -c 'import torch, sys; print(torch.__version__, torch.cuda.get_device_name(0), sys.version)' \
    >>"$w/res/gpu.txt" 2>&1

# mkscope (dependencies from .debs) and Mirage, side by side
(
    export MKS_DEBS=$carry/debs
    # shellcheck source=bench/gpu/debs_prefix.sh
    source "$src/bench/gpu/debs_prefix.sh"
    mks_debs_prefix mkscope-mpk-prefix || exit 1
    echo "$prefix_lib" >"$w/prefix_lib"
    cmake -S "$src" -B "$w/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMKS_BUILD_TESTS=OFF \
        -DMKS_MODULES="devhooks;comm-ids;proto;query;agent;collector;runtimes" \
        -DMKS_PROTO_GEN_DIR="$carry/gen" -DMKS_PREBUILT_BPF_DIR="$carry/monitors" "${cmake_args[@]}" &&
        cmake --build "$w/build" -j8 --target mkscope-agent mkscope-collector mkscope mkscope_mpk \
            mkscope-mpk-schema
) >"$w/res/build-mkscope.log" 2>&1 &
mks_pid=$!
cp -r "$carry/kit" "$w/kit"
bash "$w/kit/build-offline.sh" "$w/mk" python3 >"$w/res/build-mirage.log" 2>&1 &
mk_pid=$!
wait $mks_pid; mks_rc=$?
wait $mk_pid; mk_rc=$?
echo "builds: mkscope rc $mks_rc, mirage rc $mk_rc, $((SECONDS - t0)) s" | tee "$w/res/builds.txt"
fail() {
    echo "$*" | tee -a "$w/res/builds.txt"
    tail -n 40 "$w/res/build-mkscope.log" "$w/res/build-mirage.log"
    tar -czf "$out/logs.tgz" -C "$w" res
    exit 1
}
[ $mks_rc -eq 0 ] || fail "mkscope build failed"
[ $mk_rc -eq 0 ] || fail "mirage build failed"
"$src/runtimes/mpk/apply.sh" "$w/mk/mirage" || fail "patch refused"
prefix_lib=$(cat "$w/prefix_lib")
export PYTHONPATH=$w/mk/mirage/python:$w/mk/py
export LD_LIBRARY_PATH=$w/mk/z3/usr/lib/x86_64-linux-gnu${prefix_lib:+:$prefix_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MKS_MONITORS_DIR=$carry/monitors
python3 -u "$src/runtimes/mpk/gpu/drive.py" --bin "$w/build" --monitors "$carry/monitors" \
    --out "$w/res" --layers "${MPK_LAYERS:-8}" --seq "${MPK_SEQ:-512}" --groups "${MPK_GROUPS:-4}" \
    --rounds "${MPK_ROUNDS:-3}" --budget "${MPK_BUDGET:-420}" 2>&1 | tee "$w/res/drive.out"
rc=${PIPESTATUS[0]}
# at most 8 files come back: the table, the results, the logs, a task graph
grep -A100 "^== MPK with mkscope" "$w/res/drive.out" >"$out/summary.txt" || true
cp "$w/res/results.json" "$out/" 2>/dev/null
cp "$w/res/mks8/task_graph_rank0.json" "$out/task_graph_qwen3_b8.json" 2>/dev/null
cp "$w/res/mks8.sass" "$w/res/plain8.sass" "$out/" 2>/dev/null
tar -czf "$out/logs.tgz" --exclude='*.so' --exclude='*.cu' --exclude='store.db*' \
    --exclude='task_graph*.json' --exclude='*.sass' -C "$w" res
echo "run.sh: drive rc $rc, $((SECONDS - t0)) s in all"
exit $rc
