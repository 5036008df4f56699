# Fuzz targets: one LLVMFuzzerTestOneInput per target, two ways to build it.
#
#   -DMKS_FUZZ=ON (CC=clang): the whole build is instrumented for libFuzzer
#   (-fsanitize=fuzzer-no-link plus ASan/UBSan), each target links
#   -fsanitize=fuzzer, and CTest runs it for MKS_FUZZ_SECONDS over its
#   committed corpus (a brief run in CI; long runs by hand, see
#   docs/RELIABILITY.md).  New inputs go to <build>/fuzz/<name>, never into
#   the source tree.
#
#   Otherwise (gcc, the default and ASan builds): each target is linked with
#   tests/fuzz/standalone.c, a main() that feeds every corpus file and a fixed
#   set of mutations of each, and CTest runs that as a unit test: every input
#   a fuzzer once found stays a regression test without clang.
#
#   mks_add_fuzzer(<name> SOURCES ... [LIBS ...] CORPUS <dir> [TIMEOUT s]
#                  [ARGS ...])
# ARGS are extra libFuzzer flags (e.g. -max_len=65536).  Every libFuzzer run
# has a per-input time limit (-timeout) and an RSS limit, so a hang or
# unbounded memory is a finding like a crash.
option(MKS_FUZZ "Build libFuzzer targets (needs clang; instruments the whole build)" OFF)
set(MKS_FUZZ_SECONDS 5 CACHE STRING "Seconds CTest runs each libFuzzer target")
set(MKS_FUZZ_INPUT_TIMEOUT 10 CACHE STRING "libFuzzer per-input time limit (seconds)")
set(MKS_FUZZ_RSS_MB 1024 CACHE STRING "libFuzzer RSS limit (MiB)")

if(MKS_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "mkscope: MKS_FUZZ needs clang (cmake -DCMAKE_C_COMPILER=clang-14 ...)")
  endif()
  # clang's -Wstring-concatenation takes the project's long messages, one
  # literal over several lines inside an array, for a missing comma.
  add_compile_options($<$<COMPILE_LANGUAGE:C>:-fsanitize=fuzzer-no-link,address,undefined>
                      $<$<COMPILE_LANGUAGE:C>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:C>:-Wno-string-concatenation>)
  add_link_options($<$<LINK_LANGUAGE:C>:-fsanitize=address,undefined>)
endif()

function(mks_add_fuzzer name)
  cmake_parse_arguments(ARG "" "CORPUS;TIMEOUT" "SOURCES;LIBS;ARGS" ${ARGN})
  if(NOT ARG_CORPUS)
    message(FATAL_ERROR "mks_add_fuzzer(${name}): CORPUS missing")
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(MKS_FUZZ)
    add_executable(${name} ${ARG_SOURCES})
    target_link_libraries(${name} PRIVATE ${ARG_LIBS})
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set(work ${PROJECT_BINARY_DIR}/fuzz/${name})
    file(MAKE_DIRECTORY ${work})
    add_test(NAME ${name}
             COMMAND ${name} -max_total_time=${MKS_FUZZ_SECONDS}
                     -timeout=${MKS_FUZZ_INPUT_TIMEOUT} -rss_limit_mb=${MKS_FUZZ_RSS_MB}
                     -artifact_prefix=${work}/ ${ARG_ARGS} ${work} ${ARG_CORPUS})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "fuzz")
  else()
    add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/fuzz/standalone.c)
    target_link_libraries(${name} PRIVATE ${ARG_LIBS})
    add_test(NAME ${name} COMMAND ${name} ${ARG_CORPUS})
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "unit;fuzz")
  endif()
endfunction()
