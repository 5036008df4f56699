#!/usr/bin/env bash
# Where MPK's task-graph generation crashes, on a machine with no gdb (the lent
# GPU machines; runtimes/mpk/gpu/run.sh runs this after building Mirage). The
# rmsnorm graph of Mirage's own test-mode test is generated six ways, each
# preloaded with fatal_bt (a native backtrace on a fatal signal):
#   c++            graph_probe.cc linked with the build's libmirage_runtime.a
#                  (the C++ core alone, no Python)
#   py-none        mirage.core (the Cython extension) with torch never loaded
#   py-after       mirage.core first, torch imported by it
#   py-before      torch first, then mirage.core
#   py-full        `import mirage`, as MPK's programs do
#   py-mpk         MPK's front end as its test drives it (CUDA tensors,
#                  PersistentKernel in test mode), without the kernel compile
# then, where py-full (else py-mpk) crashes: which of the extension's symbols
# the dynamic linker bound to other objects than its own (LD_DEBUG=bindings),
# and the crash under cuda-gdb where it exists (it debugs host code too), with
# the environment (compilers, Python's build flags, limits) beside it.
#   probe.sh DEST LOG [FATAL_BT_SO]      (DEST: build-offline.sh's destination)
# Prints one verdict line last (also at the end of LOG); exits 0 when py-full
# and py-mpk passed, 1 when either did not, 2 when nothing could be probed.
set -uo pipefail
dest=$(cd "${1:?usage: probe.sh DEST LOG [FATAL_BT_SO]}" && pwd)
log=${2:?usage: probe.sh DEST LOG [FATAL_BT_SO]}
bt=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
m=$dest/mirage
zl=$dest/z3/usr/lib/x86_64-linux-gnu
work=$(mktemp -d "${TMPDIR:-/tmp}/mpk-probe.XXXXXX")
trap 'rm -rf "$work"' EXIT
core=$(ls "$m"/python/mirage/core.cpython-*.so 2>/dev/null | head -n 1)
cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")}
cxx=${CXX:-$(command -v g++ || command -v c++)}
: >"$log"
say() { echo "$*" >>"$log"; }
if [ -z "$core" ] || [ ! -f "$m/build/libmirage_runtime.a" ]; then
    echo "graph probe: no Mirage build in $dest (core extension or libmirage_runtime.a missing)" | tee -a "$log"
    exit 2
fi
{
    echo "== environment"
    uname -a
    ulimit -a
    echo "CXX=$cxx -> $(readlink -f "$cxx")"; "$cxx" --version | head -n 1
    # a compiler driver that is a script (a wrapper adding flags) is shown whole
    if head -c 2 "$(readlink -f "$cxx")" 2>/dev/null | grep -q '#!'; then
        echo "-- $cxx is a script:"; head -n 40 "$(readlink -f "$cxx")"
    fi
    "$cxx" -v 2>&1 | grep -E '^(Configured with|Thread model|gcc version)' | cut -c1-400
    command -v nvcc >/dev/null && nvcc --version | tail -n 2
    python3 - <<'PY'
import sys, sysconfig
print("python", sys.version.replace("\n", " "), sys.executable)
try:
    import Cython; print("Cython", Cython.__version__)
except Exception as e:
    print("Cython: not importable:", e)
for k in ("CC", "CXX", "CFLAGS", "OPT", "CCSHARED", "LDSHARED", "LDFLAGS", "BLDSHARED"):
    print("sysconfig %s = %s" % (k, sysconfig.get_config_var(k)))
PY
    env | grep -E '^(CC|CXX|CFLAGS|CXXFLAGS|CPPFLAGS|LDFLAGS|LD_PRELOAD|LD_LIBRARY_PATH|PYTHONPATH|CMAKE_BUILD_TYPE)=' || true
    echo "== $core"
    ls -l "$core"
    ldd "$core"
    echo "exported definitions: $(nm -D --defined-only "$core" 2>/dev/null | wc -l)," \
        "of them nlohmann: $(nm -D --defined-only "$core" 2>/dev/null | grep -c nlohmann)"
    # a C++ runtime linked into the extension and exported from it takes the
    # place of libstdc++.so.6's own symbols for what loads after it
    echo "exported std:: definitions: $(nm -DC --defined-only "$core" 2>/dev/null | grep -c ' std::')," \
        "libstdc++ needed: $(readelf -d "$core" 2>/dev/null | grep -c 'NEEDED.*libstdc++')"
    readelf -d "$core" 2>/dev/null | grep -E 'FLAGS|SYMBOLIC|RPATH|RUNPATH'
} >>"$log" 2>&1

pre=()
[ -n "$bt" ] && [ -f "$bt" ] && pre=(env "LD_PRELOAD=$bt")
export LD_LIBRARY_PATH=$zl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$dest/py${PYTHONPATH:+:$PYTHONPATH}
# each probe in the background into its own log (they are independent, and
# the GPU machine has the cores), gathered in a fixed order afterwards
job() { # NAME COMMAND...: runs it with fatal_bt preloaded, rc into NAME.rc
    local name=$1
    shift
    { echo "== $name: $*"; timeout 180 "${pre[@]}" "$@"; } >"$work/$name.log" 2>&1
    echo $? >"$work/$name.rc"
}
cxx_probe() { # the C++ core alone, with Mirage's release flags (CMake: -O2 -O3 -DNDEBUG)
    if "$cxx" -std=gnu++17 -fopenmp -O3 -DNDEBUG -g -w \
        -DMIRAGE_BACKEND_USE_CUDA -DMIRAGE_FINGERPRINT_USE_CUDA \
        -I"$m/include" -I"$m/deps/json/include" -I"$m/deps/cutlass/include" \
        -I"$m/deps/cutlass/tools/util/include" -I"$dest/py/z3/include" -I"$cuda/include" \
        "$here/graph_probe.cc" -o "$work/graph_probe" "$m/build/libmirage_runtime.a" \
        -L"$m/build/abstract_subexpr/release" -L"$m/build/formal_verifier/release" \
        -labstract_subexpr -lformal_verifier -L"$zl" -lz3 -L"$cuda/lib64" -L"$cuda/lib64/stubs" \
        -lcudart -lcuda -lgomp -lrt -ldl -lpthread -lstdc++fs \
        -Wl,-rpath,"$m/build/abstract_subexpr/release:$m/build/formal_verifier/release:$zl:$cuda/lib64" \
        >"$work/build.log" 2>&1; then
        job c++ "$work/graph_probe" rmsnorm_hopper "$work/task_graph.json"
        cat "$work/build.log" >>"$work/c++.log"
    else
        { echo "== c++: graph_probe.cc did not build with $cxx"; cat "$work/build.log"; } >"$work/c++.log"
        echo build >"$work/c++.rc"
    fi
}
cxx_probe &
for mode in none after before full mpk; do
    job "py-$mode" python3 "$here/graph_probe.py" --core "$core" --torch "$mode" &
done
wait
verdict=""
for name in c++ py-none py-after py-before py-full py-mpk; do
    cat "$work/$name.log" >>"$log"
    r=$(cat "$work/$name.rc" 2>/dev/null || echo lost)
    case $r in
    0) v=PASSED ;;
    139) v=SIGSEGV ;;
    134) v=SIGABRT ;;
    124) v="timed out" ;;
    build) v="did not build" ;;
    *) v="rc $r" ;;
    esac
    say "-- $name: $v"
    verdict="$verdict${verdict:+, }$name $v"
done
full_rc=$(cat "$work/py-full.rc" 2>/dev/null || echo 1)
mpk_rc=$(cat "$work/py-mpk.rc" 2>/dev/null || echo 1)
# the post-mortems take the first of the two that failed
pm=full
[ "$full_rc" = 0 ] && pm=mpk

if [ "$full_rc" != 0 ] || [ "$mpk_rc" != 0 ]; then
    # which of the extension's references the dynamic linker gave to objects
    # other than the extension itself and the C and C++ runtimes; and the
    # crash under a debugger (both at once)
    (
        LD_DEBUG=bindings LD_DEBUG_OUTPUT=$work/ld.bind timeout 150 "${pre[@]}" \
            python3 "$here/graph_probe.py" --core "$core" --torch $pm >/dev/null 2>&1
        echo "== py-$pm under LD_DEBUG=bindings: the extension's symbols bound elsewhere"
        cat "$work"/ld.bind.* 2>/dev/null | grep -F "binding file $core " |
            grep -v -F "to $core " |
            sed -E 's/.* to ([^ ]+) \[[0-9]+\]: (normal|weak) symbol `([^'"'"']+).*/\1 \3/' |
            grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libpython[0-9.]*)\.so|/bin/python' |
            sort | uniq | awk '{n[$1]++; if (n[$1] <= 40) print} END {for (l in n) print "bound to", l ":", n[l], "symbols"}'
        rm -f "$work"/ld.bind.*
    ) >"$work/bind.log" 2>&1 &
    gdb=$(command -v cuda-gdb || command -v gdb || true)
    if [ -n "$gdb" ]; then
        {
            echo "== py-$pm under $gdb"
            timeout 150 env -u DEBUGINFOD_URLS "$gdb" -q -batch -nx -ex 'set pagination off' -ex 'set confirm off' \
                -ex run -ex bt -ex 'info registers rip rsp' -ex 'x/8i $pc' -ex 'info sharedlibrary' \
                --args "$(python3 -c 'import sys; print(sys.executable)')" "$here/graph_probe.py" \
                --core "$core" --torch $pm
            echo "-- $gdb: rc $?"
        } >"$work/gdb.log" 2>&1 &
    else
        echo "-- no cuda-gdb or gdb here" >"$work/gdb.log"
    fi
    wait
    cat "$work/bind.log" "$work/gdb.log" >>"$log"
fi
command -v c++filt >/dev/null && { c++filt <"$log" >"$work/log" && cat "$work/log" >"$log"; }
echo "graph probe ($dest): $verdict" | tee -a "$log"
[ "$full_rc" = 0 ] && [ "$mpk_rc" = 0 ]
