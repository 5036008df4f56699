# Sourced by the GPU scripts: with MKS_DEBS=DIR[:DIR...] set, unpacks those
# .deb files (our dependencies, for GPU machines without our packages) into
# a prefix below TMPDIR and sets cmake_args (CMAKE_PREFIX_PATH, the linker's
# -rpath-link) and CPATH for the build, and prefix_lib for LD_LIBRARY_PATH
# of the programs afterwards.  Without MKS_DEBS, cmake_args is empty.
#   mks_debs_prefix NAME   (the prefix: ${TMPDIR:-/tmp}/NAME)
mks_debs_prefix() {
    cmake_args=()
    prefix_lib=""
    [ -n "${MKS_DEBS:-}" ] || return 0
    local prefix=${TMPDIR:-/tmp}/$1 dd f debdirs
    mkdir -p "$prefix" || return 1
    IFS=: read -r -a debdirs <<<"$MKS_DEBS"
    for dd in "${debdirs[@]}"; do
        for f in "$dd"/*.deb; do
            dpkg -x "$f" "$prefix" || { echo "$0: cannot unpack $f" >&2; return 1; }
        done
    done
    prefix_lib=$prefix/usr/lib/x86_64-linux-gnu
    cmake_args=(-DCMAKE_PREFIX_PATH="$prefix/usr"
        "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$prefix_lib -L$prefix_lib")
    export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
}
