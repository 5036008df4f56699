#!/usr/bin/env bash
# Where MPK's task-graph generation crashes, on a machine with no gdb (the lent
# GPU machines; runtimes/mpk/gpu/run.sh runs this after building Mirage). The
# rmsnorm graph of Mirage's own test-mode test is generated five ways, each
# preloaded with fatal_bt (a native backtrace on a fatal signal):
#   c++            graph_probe.cc linked with the build's libmirage_runtime.a
#                  (the C++ core alone, no Python)
#   py-none        mirage.core (the Cython extension) with torch never loaded
#   py-after       mirage.core first, torch imported by it
#   py-before      torch first, then mirage.core
#   py-full        `import mirage`, as MPK's programs do
# then, where py-full crashes: which of the extension's symbols the dynamic
# linker bound to other objects than its own (LD_DEBUG=bindings), and the
# crash under cuda-gdb where it exists (it debugs host code too), with the
# environment (compilers, Python's build flags, limits) beside it.
#   probe.sh DEST LOG [FATAL_BT_SO]      (DEST: build-offline.sh's destination)
# Prints one verdict line last (also at the end of LOG); exits 0 when py-full
# passed, 1 when it did not, 2 when nothing could be probed.
set -uo pipefail
dest=$(cd "${1:?usage: probe.sh DEST LOG [FATAL_BT_SO]}" && pwd)
log=${2:?usage: probe.sh DEST LOG [FATAL_BT_SO]}
bt=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
m=$dest/mirage
zl=$dest/z3/usr/lib/x86_64-linux-gnu
work=$(mktemp -d "${TMPDIR:-/tmp}/mpk-probe.XXXXXX")
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
    readelf -d "$core" 2>/dev/null | grep -E 'FLAGS|SYMBOLIC|RPATH|RUNPATH'
} >>"$log" 2>&1

pre=()
[ -n "$bt" ] && [ -f "$bt" ] && pre=(env "LD_PRELOAD=$bt")
export LD_LIBRARY_PATH=$zl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$dest/py${PYTHONPATH:+:$PYTHONPATH}
verdict=""
declare -A rc
run() { # NAME COMMAND...
    local name=$1
    shift
    say "== $name: $*"
    timeout 300 "${pre[@]}" "$@" >>"$log" 2>&1
    rc[$name]=$?
    local v="rc ${rc[$name]}"
    [ "${rc[$name]}" -eq 0 ] && v=PASSED
    [ "${rc[$name]}" -eq 139 ] && v="SIGSEGV"
    [ "${rc[$name]}" -eq 134 ] && v="SIGABRT"
    [ "${rc[$name]}" -eq 124 ] && v="timed out"
    say "-- $name: $v"
    verdict="$verdict${verdict:+, }$name $v"
}

# the C++ core alone, with Mirage's own release flags (CMake: -O2 -O3 -DNDEBUG)
say "== building graph_probe with $cxx"
if "$cxx" -std=gnu++17 -fopenmp -O3 -DNDEBUG -g -w \
    -DMIRAGE_BACKEND_USE_CUDA -DMIRAGE_FINGERPRINT_USE_CUDA \
    -I"$m/include" -I"$m/deps/json/include" -I"$m/deps/cutlass/include" \
    -I"$m/deps/cutlass/tools/util/include" -I"$dest/py/z3/include" -I"$cuda/include" \
    "$here/graph_probe.cc" -o "$work/graph_probe" "$m/build/libmirage_runtime.a" \
    -L"$m/build/abstract_subexpr/release" -L"$m/build/formal_verifier/release" \
    -labstract_subexpr -lformal_verifier -L"$zl" -lz3 -L"$cuda/lib64" -L"$cuda/lib64/stubs" \
    -lcudart -lcuda -lgomp -lrt -ldl -lpthread -lstdc++fs \
    -Wl,-rpath,"$m/build/abstract_subexpr/release:$m/build/formal_verifier/release:$zl" >>"$log" 2>&1; then
    run c++ "$work/graph_probe" rmsnorm_hopper "$work/task_graph.json"
else
    say "-- c++: did not build"
    verdict="c++ did not build"
fi
for mode in none after before full; do
    run "py-$mode" python3 "$here/graph_probe.py" --core "$core" --torch "$mode"
done

if [ "${rc[py-full]}" -ne 0 ]; then
    # which of the extension's references the dynamic linker gave to objects
    # other than the extension itself and the C and C++ runtimes
    say "== py-full under LD_DEBUG=bindings: the extension's symbols bound elsewhere"
    LD_DEBUG=bindings LD_DEBUG_OUTPUT=$work/bind timeout 300 "${pre[@]}" \
        python3 "$here/graph_probe.py" --core "$core" --torch full >/dev/null 2>&1
    cat "$work"/bind.* 2>/dev/null | grep -F "binding file $core " |
        grep -v -F "to $core " |
        sed -E 's/.* to ([^ ]+) \[[0-9]+\]: (normal|weak) symbol `([^'"'"']+).*/\1 \3/' |
        grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux-x86-64|libpthread|libdl|librt|libpython[0-9.]*)\.so|/bin/python' |
        sort | uniq | awk '{n[$1]++; if (n[$1] <= 40) print} END {for (l in n) print "bound to", l ":", n[l], "symbols"}' \
        >>"$log" 2>&1
    rm -f "$work"/bind.*
    gdb=$(command -v cuda-gdb || command -v gdb || true)
    if [ -n "$gdb" ]; then
        say "== py-full under $gdb"
        timeout 300 "$gdb" -q -batch -nx -ex 'set pagination off' -ex 'set confirm off' \
            -ex run -ex bt -ex 'info registers rip rsp' -ex 'x/8i $pc' -ex 'info sharedlibrary' \
            --args "$(python3 -c 'import sys; print(sys.executable)')" "$here/graph_probe.py" --core "$core" --torch full >>"$log" 2>&1
        say "-- $gdb: rc $?"
    else
        say "-- no cuda-gdb or gdb here"
    fi
fi
command -v c++filt >/dev/null && { c++filt <"$log" >"$work/log" && cat "$work/log" >"$log"; }
rm -rf "$work"
echo "graph probe ($dest): $verdict" | tee -a "$log"
[ "${rc[py-full]}" -eq 0 ]
