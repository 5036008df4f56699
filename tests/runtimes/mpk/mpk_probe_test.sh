#!/usr/bin/env bash
# The GPU runner's crash probe on a CPU: fatal_bt (preloaded) names the
# faulting function of a crashing C program and keeps 139 / 134 as the exit
# status, and through Python's faulthandler (which raises the signal again)
# still prints the native frames after Python's own dump; probe.sh refuses a
# destination with no Mirage build in one line (exit 2); graph_probe.cc
# compiles against the kit's Mirage a9e0f745 headers (where the kit and CUDA's
# headers are here; otherwise that part is skipped) and graph_probe.py is
# valid Python.
#   mpk_probe_test.sh SOURCE_DIR FATAL_BT_SO CRASH_PROGRAM KIT_DIR
set -uo pipefail
src=$1 bt=$2 crash=$3 kit=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$(basename "$1") lacks '$2'"; }

LD_PRELOAD=$bt "$crash" >"$tmp/segv" 2>&1
rc=$?
[ $rc -eq 139 ] || fail "segv: exit $rc, want 139"
has "$tmp/segv" "mkscope fatal_bt: SIGSEGV at address 0x0000000000000000"
has "$tmp/segv" "mks_test_crash_here"
has "$tmp/segv" "mkscope fatal_bt: end of backtrace"
LD_PRELOAD=$bt "$crash" abort >"$tmp/abrt" 2>&1
rc=$?
[ $rc -eq 134 ] || fail "abort: exit $rc, want 134"
has "$tmp/abrt" "mkscope fatal_bt: SIGABRT"
has "$tmp/abrt" "(raised by the process: abort()"
# the order of the frames: the faulting function before main
awk '/mks_test_crash_here/ {c = NR} /\(main\+/ {m = NR} END {exit !(c && m && c < m)}' "$tmp/segv" ||
    fail "segv: mks_test_crash_here is not listed before main"
if command -v python3 >/dev/null; then
    LD_PRELOAD=$bt python3 -X faulthandler -c 'import ctypes; ctypes.string_at(0)' >"$tmp/py" 2>&1
    rc=$?
    [ $rc -eq 139 ] || fail "python: exit $rc, want 139"
    has "$tmp/py" "Fatal Python error: Segmentation fault"
    has "$tmp/py" "mkscope fatal_bt: SIGSEGV"
    has "$tmp/py" "_ctypes"
    # Python's dump comes first, then ours
    awk '/Fatal Python error/ {p = NR} /mkscope fatal_bt: SIGSEGV/ {b = NR} END {exit !(p && b && p < b)}' "$tmp/py" ||
        fail "python: the native backtrace is not after faulthandler's dump"
    python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
        "$src/runtimes/mpk/gpu/probe/graph_probe.py" "$tmp/graph_probe.pyc" || fail "graph_probe.py does not compile"
fi

mkdir -p "$tmp/empty"
bash "$src/runtimes/mpk/gpu/probe/probe.sh" "$tmp/empty" "$tmp/probe.log" "$bt" >"$tmp/probe.out" 2>&1
rc=$?
[ $rc -eq 2 ] || fail "probe.sh on no build: exit $rc, want 2"
has "$tmp/probe.out" "graph probe: no Mirage build in $tmp/empty"
bash -n "$src/runtimes/mpk/gpu/probe/probe.sh" || fail "probe.sh: syntax"
bash -n "$src/runtimes/mpk/gpu/run.sh" || fail "run.sh: syntax"

archive=$kit/mirage-a9e0f745-with-deps.tar.gz
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$archive" ] && [ -f "$cuda/include/vector_types.h" ] && command -v c++ >/dev/null; then
    tar -xzf "$archive" -C "$tmp" mirage/include mirage/deps/json/include mirage/deps/cutlass/include
    m=$tmp/mirage
    c++ -std=gnu++17 -fsyntax-only -w -DMIRAGE_BACKEND_USE_CUDA -DMIRAGE_FINGERPRINT_USE_CUDA \
        -I"$m/include" -I"$m/deps/json/include" -I"$m/deps/cutlass/include" -I"$cuda/include" \
        "$src/runtimes/mpk/gpu/probe/graph_probe.cc" || fail "graph_probe.cc does not compile against a9e0f745"
else
    echo "note: graph_probe.cc not compiled (no kit at $kit or no CUDA headers at $cuda)"
fi
[ $fails -eq 0 ] && echo "mpk_probe_test: all passed"
exit $((fails > 0))
