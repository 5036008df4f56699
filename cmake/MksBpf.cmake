# Compile BPF C (monitors, test programs) with clang -target bpf at build time.
#   mks_bpf_object(<target> SOURCES a.bpf.c ... [INCLUDES dir ...])
# produces ${CMAKE_CURRENT_BINARY_DIR}/<name>.bpf.o for each source and a
# custom target <target> that depends on all of them.

find_program(MKS_CLANG NAMES clang clang-16 clang-15 clang-14)

function(mks_bpf_object target)
  # Checked here rather than at include: a partial build without BPF objects
  # (MKS_MODULES=comm-ids on a GPU machine) needs no clang.
  if(NOT MKS_CLANG)
    message(FATAL_ERROR "mkscope: clang (BPF target) not found; run deploy/install-deps.sh")
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
    add_custom_command(OUTPUT ${out}
      COMMAND ${MKS_CLANG} -target bpf -O2 -g -Wall -Werror ${incs} -c ${abs} -o ${out}
      DEPENDS ${abs} ${PROJECT_SOURCE_DIR}/devhooks/include/mkscope/mkscope.bpf.h
      COMMENT "BPF ${base}.bpf.o" VERBATIM)
    list(APPEND outs ${out})
  endforeach()
  add_custom_target(${target} ALL DEPENDS ${outs})
endfunction()
