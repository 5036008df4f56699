# Compile BPF C (monitors, test programs) with clang -target bpf at build time.
#   mks_bpf_object(<target> SOURCES a.bpf.c ... [INCLUDES dir ...])
# produces ${CMAKE_CURRENT_BINARY_DIR}/<name>.bpf.o for each source and a
# custom target <target> that depends on all of them.
#
# Machines without clang (GPU machines with few packages) pass
# -DMKS_PREBUILT_BPF_DIR=<dir> holding <name>.bpf.o built elsewhere: each is
# copied into the build tree instead of compiled, so the agent's default
# monitor path and MKS_MONITORS_DIR work unchanged.  An object missing there
# is compiled when clang is found, else the configure fails naming it.

find_program(MKS_CLANG NAMES clang clang-16 clang-15 clang-14)
set(MKS_PREBUILT_BPF_DIR "" CACHE PATH "Directory with pre-built <name>.bpf.o (no clang)")

function(mks_bpf_object target)
  # Checked here rather than at include: a partial build without BPF objects
  # (MKS_MODULES=comm-ids on a GPU machine) needs no clang.
  if(NOT MKS_CLANG AND NOT MKS_PREBUILT_BPF_DIR)
    message(FATAL_ERROR "mkscope: clang (BPF target) not found; run deploy/install-deps.sh "
                        "or pass -DMKS_PREBUILT_BPF_DIR=<dir with the .bpf.o files>")
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;INCLUDES" ${ARGN})
  set(outs)
  set(incs -I${PROJECT_SOURCE_DIR}/devhooks/include)
  foreach(inc ${ARG_INCLUDES})
    list(APPEND incs -I${inc})
  endforeach()
  foreach(src ${ARG_SOURCES})
    get_filename_component(base ${src} NAME_WE)
    get_filename_component(abs ${src} ABSOLUTE)
    set(out ${CMAKE_CURRENT_BINARY_DIR}/${base}.bpf.o)
    set(pre ${MKS_PREBUILT_BPF_DIR}/${base}.bpf.o)
    if(MKS_PREBUILT_BPF_DIR AND NOT EXISTS ${pre} AND NOT MKS_CLANG)
      message(FATAL_ERROR "mkscope: no clang, and MKS_PREBUILT_BPF_DIR has no ${base}.bpf.o")
    endif()
    if(MKS_PREBUILT_BPF_DIR AND EXISTS ${pre})
      add_custom_command(OUTPUT ${out}
        COMMAND ${CMAKE_COMMAND} -E copy ${pre} ${out}
        DEPENDS ${pre} COMMENT "BPF ${base}.bpf.o (pre-built)" VERBATIM)
      list(APPEND outs ${out})
      continue()
    endif()
    add_custom_command(OUTPUT ${out}
      COMMAND ${MKS_CLANG} -target bpf -O2 -g -Wall -Werror ${incs} -c ${abs} -o ${out}
      DEPENDS ${abs} ${PROJECT_SOURCE_DIR}/devhooks/include/mkscope/mkscope.bpf.h
      COMMENT "BPF ${base}.bpf.o" VERBATIM)
    list(APPEND outs ${out})
  endforeach()
  add_custom_target(${target} ALL DEPENDS ${outs})
endfunction()
