#!/usr/bin/env bash
# mkscope inside MPK on one GPU, in one go: builds MPK from the kit (our
# programs come built by prep.sh), adds the hook sites (runtimes/mpk/apply.sh), then
# runtimes/mpk/gpu/drive.py serves a Qwen3-shaped model (random weights of
# Qwen3-8B's shapes) at batch 1 and 8 without hooks, with hooks detached and
# attached, and in MPK's profiling build; replaces, detaches and re-attaches
# monitors during one launch; injects faults for the diagnosis; prints one
# table last (also OUT/summary.txt).
# Before any of that, probe/probe.sh generates the task graph of Mirage's own
# rmsnorm test six ways (the C++ core alone, the Python extension with and
# without torch, as MPK's programs import it, through MPK's front end with
# CUDA tensors as its test drives it): where that crashes, the probe's
# log names the native frames (fatal_bt, cuda-gdb), the symbols bound outside
# the extension and the toolchain, and Mirage is built again as a Debug build
# (-O0, asserts on, the extension linked -Bsymbolic); the runs use the first
# build whose probe passes. Every process of the runs has fatal_bt preloaded.
#   runtimes/mpk/gpu/run.sh CARRY_DIR [OUT]      (CARRY_DIR from runtimes/mpk/gpu/prep.sh)
# Environment: MPK_MIRAGE (release: the kit's build, Debug as the fallback;
# debug: the Debug build only, when a probe has shown the release build fails),
# MPK_LAYERS (8), MPK_SEQ (512), MPK_GROUPS (4), MPK_ROUNDS (3),
# MPK_BUDGET (seconds for the runs; default 420, less so that the whole
# script ends within 570 s of its start, inside one 600 s device call).
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
# what has been written so far comes back also when the device call is cut
# short: the small logs, tails of at most 256 KB, in OUT/live.tgz (one file:
# a device call returns few), rewritten every 15 s and once more at the end
snap() {
    local d=$w/live
    rm -rf "$d" && mkdir -p "$d"
    (cd "$w/res" 2>/dev/null && find . -maxdepth 3 -type f \( -name '*.txt' -o -name '*.out' -o \
        -name '*.log' -o -name '*.jsonl' \) -size -8M 2>/dev/null) | while read -r f; do
        tail -c 262144 "$w/res/$f" >"$d/$(echo "${f#./}" | tr / _)" 2>/dev/null
    done
    tar -czf "$out/.live.tgz" -C "$d" . 2>/dev/null && mv -f "$out/.live.tgz" "$out/live.tgz"
}
(while sleep 15; do snap; done) &
snapper=$!
trap 'kill $snapper 2>/dev/null; snap' EXIT
tar -xf "$carry/src.tar" -C "$w/src"
src=$w/src
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader >"$w/res/gpu.txt" 2>&1
python3 -c 'import torch, sys; print(torch.__version__, torch.cuda.get_device_name(0), sys.version)' \
    >>"$w/res/gpu.txt" 2>&1

# our programs come built (prep.sh); their libraries unpacked beside them
# and given to our programs only, never to python3 (torch) or nvcc
b=$w/build
mkdir -p "$b/agent" "$b/collector/cli" "$b/runtimes/mpk" "$w/deps" "$w/mpklib"
cp "$carry/bin/mkscope-agent" "$b/agent/"
cp "$carry/bin/mkscope-collector" "$b/collector/"
cp "$carry/bin/mkscope" "$b/collector/cli/"
cp "$carry/bin/mkscope-mpk-schema" "$carry/bin/libmkscope_mpk.so" "$b/runtimes/mpk/"
for f in "$carry"/debs/*.deb; do dpkg -x "$f" "$w/deps"; done
deps_lib=$w/deps/usr/lib/x86_64-linux-gnu
# the MPK process needs jansson for libmkscope_mpk, nothing else of ours
cp -a "$deps_lib"/libjansson.so* "$w/mpklib/" 2>/dev/null
echo "-DMKS_MPK -I$src/devhooks/include -I$src/runtimes/mpk/include -L$b/runtimes/mpk -lmkscope_mpk -Xlinker -rpath -Xlinker $b/runtimes/mpk" \
    >"$b/runtimes/mpk/mkscope-mpk-flags"
missing=$(for x in "$b/agent/mkscope-agent" "$b/collector/mkscope-collector" "$b/collector/cli/mkscope"; do
    LD_LIBRARY_PATH=$deps_lib ldd "$x"; done | grep "not found" | sort -u)
cp -r "$carry/kit" "$w/kit"
# the Debug build's settings (the fallback below; MPK_MIRAGE=debug takes it at once)
# The extension's link: Python's own commands (LDSHARED, and LDCXXSHARED,
# which setuptools takes for C++), given explicitly so that no compiler
# wrapper's flags reach it, with --exclude-libs,ALL: a C++ runtime linked into
# the extension from a static archive stays private to it. Exported, its
# std:: definitions took the place of libstdc++.so.6's for every library
# loaded after the extension or beside it (torch, z3): both crashes of the
# first runs (SIGABRT freeing a std::locale of the other copy, SIGSEGV in
# ostream::_M_insert through a facet of the other copy) came from there.
ldshared=$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("LDSHARED"))')
ldcxxshared=$(python3 -c 'import sysconfig; v = sysconfig.get_config_var; print(v("LDCXXSHARED") or v("LDSHARED"))')
link_env=(LDSHARED="$ldshared -Wl,--exclude-libs,ALL" LDCXXSHARED="$ldcxxshared -Wl,--exclude-libs,ALL")
debug_env=(env CMAKE_BUILD_TYPE=Debug CFLAGS="-O0 -g" LDSHARED="$ldshared -Wl,--exclude-libs,ALL -Wl,-Bsymbolic"
    LDCXXSHARED="$ldcxxshared -Wl,--exclude-libs,ALL -Wl,-Bsymbolic")
echo "extension link: ${link_env[*]}" >"$w/res/link.txt"
if [ "${MPK_MIRAGE:-release}" = debug ]; then
    "${debug_env[@]}" bash "$w/kit/build-offline.sh" "$w/mk" python3 >"$w/res/build-mirage.log" 2>&1
else
    env "${link_env[@]}" bash "$w/kit/build-offline.sh" "$w/mk" python3 >"$w/res/build-mirage.log" 2>&1
fi
mk_rc=$?
echo "builds: mirage rc $mk_rc, $((SECONDS - t0)) s; libraries not found: ${missing:-none}" | tee "$w/res/builds.txt"
fail() {
    echo "$*" | tee -a "$w/res/builds.txt"
    tail -n 40 "$w/res/build-mirage.log"
    cp "$w/res/builds.txt" "$out/summary.txt"
    tar -czf "$out/logs.tgz" -C "$w" res
    exit 1
}
[ -z "$missing" ] || fail "libraries missing for our programs: $missing"
[ $mk_rc -eq 0 ] || fail "mirage build failed"
# a native backtrace on a fatal signal, for every MPK process below (no gdb here)
bt=$w/fatal_bt.so
cc -std=c11 -O2 -shared -fPIC -o "$bt" "$src/runtimes/mpk/gpu/probe/fatal_bt.c" >>"$w/res/builds.txt" 2>&1 || bt=""
# does MPK's task-graph generation run on this machine (it crashed in every
# MPK process on the first H200 runs)? Where not, Mirage once more as a
# Debug build, the extension linked -Bsymbolic, and the runs take that one
# (the Debug build starts beside the probe, in its own process group, and is
# stopped when the probe passes)
# (-Bsymbolic through LDSHARED, which only the extension's link reads: CMake
# would hand LDFLAGS to nvcc too, which refuses -Wl options)
mk=$w/mk
dbg=""
if [ "${MPK_MIRAGE:-release}" != debug ]; then
    setsid "${debug_env[@]}" bash "$w/kit/build-offline.sh" "$w/mkdbg" python3 \
        >"$w/res/build-mirage-debug.log" 2>&1 &
    dbg=$!
fi
if bash "$src/runtimes/mpk/gpu/probe/probe.sh" "$mk" "$w/res/mpk_probe.log" "$bt" | tee -a "$w/res/builds.txt"; then
    [ -z "$dbg" ] || { kill -- -"$dbg" 2>/dev/null; wait "$dbg" 2>/dev/null; }
elif [ -z "$dbg" ]; then
    fail "MPK_MIRAGE=debug: the Debug build does not generate MPK's task graph (res/mpk_probe.log)"
else
    wait "$dbg"
    echo "builds: mirage Debug rc $?, $((SECONDS - t0)) s" | tee -a "$w/res/builds.txt"
    bash "$src/runtimes/mpk/gpu/probe/probe.sh" "$w/mkdbg" "$w/res/mpk_probe_debug.log" "$bt" |
        tee -a "$w/res/builds.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] ||
        fail "no Mirage build here generates MPK's task graph (res/mpk_probe*.log, res/build-mirage-debug.log)"
    mk=$w/mkdbg
fi
# MPK's own smallest test (rmsnorm in test mode) on the kit's sources as they
# came, beside the built core and deps (MIRAGE_ROOT for the headers, a copy of
# the Python package: apply.sh below patches the tree's), run while ours
# compile: whether MPK itself runs on this machine, apart from us
mkdir -p "$w/pristine"
tar -xzf "$w/kit/mirage-a9e0f745-with-deps.tar.gz" -C "$w/pristine" --strip-components=1 \
    mirage/include mirage/tests/runtime_python/test_mode
cp -r "$mk/mirage/python" "$w/pristine/python"
ln -s "$mk/mirage/deps" "$w/pristine/deps"
ln -s "$mk/mirage/build" "$w/pristine/build"
(
    cd "$w/pristine/tests/runtime_python/test_mode" &&
        MIRAGE_ROOT=$w/pristine PYTHONPATH=$w/pristine/python:$mk/py \
            LD_LIBRARY_PATH=$mk/z3/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
            LD_PRELOAD=$bt PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 timeout 300 python3 test_rmsnorm_testmode.py
    echo "exit $?"
) >"$w/res/mpk_selftest.log" 2>&1 &
selftest=$!
"$src/runtimes/mpk/apply.sh" "$mk/mirage" || fail "patch refused"
export PYTHONPATH=$mk/mirage/python:$mk/py
export LD_LIBRARY_PATH=$mk/z3/usr/lib/x86_64-linux-gnu:$w/mpklib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -n "$bt" ] && export LD_PRELOAD=$bt${LD_PRELOAD:+:$LD_PRELOAD}
budget=${MPK_BUDGET:-420}
left=$((570 - (SECONDS - t0)))
[ "$budget" -le "$left" ] || budget=$left
export MKS_DEPS_LIB=$deps_lib
export MKS_MONITORS_DIR=$carry/monitors
python3 -u "$src/runtimes/mpk/gpu/drive.py" --bin "$w/build" --monitors "$carry/monitors" \
    --out "$w/res" --layers "${MPK_LAYERS:-8}" --seq "${MPK_SEQ:-512}" --groups "${MPK_GROUPS:-4}" \
    --rounds "${MPK_ROUNDS:-3}" --budget "$budget" --batches "${MPK_BATCHES:-1,8}" 2>&1 | tee "$w/res/drive.out"
rc=${PIPESTATUS[0]}
wait "$selftest"
st=$(grep -E "^(PASSED|FAILED)" "$w/res/mpk_selftest.log" | tail -n 1)
echo "MPK's own test (rmsnorm in test mode, the kit's sources): ${st:-did not finish ($(tail -n 1 "$w/res/mpk_selftest.log"))}" |
    tee -a "$w/res/drive.out"
grep "^graph probe" "$w/res/builds.txt" | tee -a "$w/res/drive.out"
# at most 8 files come back: the table, the results, the logs, a task graph
grep -A100 "^== MPK with mkscope" "$w/res/drive.out" >"$out/summary.txt" || true
cp "$w/res/results.json" "$out/" 2>/dev/null
cp "$w/res/mks8/task_graph_rank0.json" "$out/task_graph_qwen3_b8.json" 2>/dev/null
(cd "$w/res" && ls mks8.sass plain8.sass 2>/dev/null | tar -czf "$out/sass.tgz" -T -)
# the kernel MPK generated (plain build): for compiling it again elsewhere
gzip -c "$w/res/plain8/test_rank0.cu" >"$out/plain8_test_rank0.cu.gz" 2>/dev/null
tar -czf "$out/logs.tgz" --exclude='*.so' --exclude='*.cu' --exclude='store.db*' \
    --exclude='task_graph*.json' --exclude='*.sass' -C "$w" res
echo "run.sh: drive rc $rc, $((SECONDS - t0)) s in all"
exit $rc
