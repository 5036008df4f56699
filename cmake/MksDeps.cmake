# Find the system libraries mkscope builds on and expose each as an imported
# target mks::<name>.  Plain find_path/find_library rather than pkg-config, so
# a prefix of unpacked Debian packages (CMAKE_PREFIX_PATH=<dir>/usr, for GPU
# machines that reach no registry) works as well as the system install.

function(mks_find_dep name header lib)
  find_path(MKS_${name}_INCLUDE ${header})
  find_library(MKS_${name}_LIBRARY NAMES ${lib})
  if(NOT MKS_${name}_INCLUDE OR NOT MKS_${name}_LIBRARY)
    message(FATAL_ERROR "mkscope: ${name} not found (${header}, lib${lib}); "
                        "run deploy/install-deps.sh or set CMAKE_PREFIX_PATH")
  endif()
  add_library(mks::${name} UNKNOWN IMPORTED GLOBAL)
  set_target_properties(mks::${name} PROPERTIES IMPORTED_LOCATION ${MKS_${name}_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${MKS_${name}_INCLUDE})
endfunction()

# Modules ask for what they link: mks_use_deps(bpf nanomsg ...).  Finding
# lazily lets a partial build (MKS_MODULES=devhooks on a GPU machine) work
# with only the packages that part needs.
set(MKS_DEP_SPEC_elf "libelf.h;elf")
set(MKS_DEP_SPEC_z "zlib.h;z")
set(MKS_DEP_SPEC_bpf "bpf/libbpf.h;bpf;elf z")
set(MKS_DEP_SPEC_nanomsg "nanomsg/nn.h;nanomsg")
set(MKS_DEP_SPEC_protobuf_c "protobuf-c/protobuf-c.h;protobuf-c")
set(MKS_DEP_SPEC_sqlite3 "sqlite3.h;sqlite3")
set(MKS_DEP_SPEC_jansson "jansson.h;jansson")
set(MKS_DEP_SPEC_microhttpd "microhttpd.h;microhttpd")
set(MKS_DEP_SPEC_sodium "sodium.h;sodium")
set(MKS_DEP_SPEC_ucs "ucs/type/status.h;ucs")
set(MKS_DEP_SPEC_ucp "ucp/api/ucp.h;ucp;ucs")
set(MKS_DEP_SPEC_cmocka "cmocka.h;cmocka")

function(mks_use_deps)
  foreach(name ${ARGN})
    if(TARGET mks::${name})
      continue()
    endif()
    if(NOT DEFINED MKS_DEP_SPEC_${name})
      message(FATAL_ERROR "mkscope: unknown dependency ${name}")
    endif()
    set(spec ${MKS_DEP_SPEC_${name}})
    list(GET spec 0 header)
    list(GET spec 1 lib)
    mks_find_dep(${name} ${header} ${lib})
    list(LENGTH spec n)
    if(n GREATER 2)
      list(GET spec 2 needs)
      separate_arguments(needs)
      mks_use_deps(${needs})
      set(links)
      foreach(d ${needs})
        list(APPEND links mks::${d})
      endforeach()
      set_property(TARGET mks::${name} PROPERTY INTERFACE_LINK_LIBRARIES ${links})
    endif()
  endforeach()
endfunction()

find_package(Threads REQUIRED)

