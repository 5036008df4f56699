# Verifier and loader tests (included from tests/devhooks/CMakeLists.txt).
# Test programs in progs/ and the agent's standard monitors are compiled with
# clang -target bpf; the tests find them through MKS_VERIFIER_PROGS.
set(MKS_VERIFIER_PROG_SOURCES
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/multi.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/bad_section.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/linux_map.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/bad_hist.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/core.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/too_big.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/many_progs.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/abi_v2.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/rejected.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/extern.bpf.c
  ${CMAKE_CURRENT_SOURCE_DIR}/progs/loops.bpf.c
  ${PROJECT_SOURCE_DIR}/agent/monitors/count.bpf.c
  ${PROJECT_SOURCE_DIR}/agent/monitors/latency.bpf.c
  ${PROJECT_SOURCE_DIR}/agent/monitors/depwait.bpf.c
  ${PROJECT_SOURCE_DIR}/agent/monitors/queue.bpf.c
  ${PROJECT_SOURCE_DIR}/agent/monitors/genprog.bpf.c
)
mks_bpf_object(mks_verifier_test_progs SOURCES ${MKS_VERIFIER_PROG_SOURCES}
               INCLUDES ${PROJECT_SOURCE_DIR}/agent/monitors)
set(progdir ${CMAKE_CURRENT_BINARY_DIR})

mks_add_test(devhooks_verifier_reject SOURCES verifier_reject.c LIBS mks_devhooks)
mks_add_test(devhooks_verifier_accept SOURCES verifier_accept.c LIBS mks_devhooks
             ARGS ${progdir})
add_dependencies(devhooks_verifier_accept mks_verifier_test_progs)
mks_add_test(devhooks_loader SOURCES loader_test.c LIBS mks_devhooks ARGS ${progdir})
add_dependencies(devhooks_loader mks_verifier_test_progs)
mks_add_test(devhooks_verify_cmd SOURCES verifier_cmd_test.c LIBS mks_devhooks ARGS ${progdir})
add_dependencies(devhooks_verify_cmd mks_verifier_test_progs)

# The standalone program: exit 0 on accepted objects, non-zero on a rejection.
add_test(NAME devhooks_mkscope_verify_ok COMMAND mkscope-verify ${progdir}/count.bpf.o ${progdir}/latency.bpf.o)
add_test(NAME devhooks_mkscope_verify_rejects COMMAND mkscope-verify ${progdir}/rejected.bpf.o)
set_tests_properties(devhooks_mkscope_verify_ok devhooks_mkscope_verify_rejects PROPERTIES LABELS unit TIMEOUT 30)
set_tests_properties(devhooks_mkscope_verify_rejects PROPERTIES WILL_FAIL TRUE)
mks_add_test(devhooks_verifier_fuzz SOURCES verifier_fuzz.c LIBS mks_devhooks)
# The scalar domain against the VM, every ALU and jump opcode.
mks_add_test(devhooks_vf_scalar SOURCES vf_scalar_test.c LIBS mks_devhooks)
target_include_directories(devhooks_vf_scalar PRIVATE ${PROJECT_SOURCE_DIR}/devhooks/src)

# The soundness fuzzer: generated and mutated programs through the verifier,
# every accepted one run in the VM against an arena of exactly its maps with
# guard zones (poisoned under ASan), twice at different addresses.  Its own
# copy of the VM and maps (soundness_maps.c renames the map code's entry
# points so that helper calls pass through its checks).  CTest runs a few
# thousand programs; long runs by hand (docs/RELIABILITY.md).
set(devsrc ${PROJECT_SOURCE_DIR}/devhooks/src)
add_executable(mkscope-fuzz-soundness soundness_fuzz.c soundness_maps.c ${devsrc}/vm.c ${devsrc}/verifier.c
               ${devsrc}/vf_scalar.c ${devsrc}/disasm.c)
target_include_directories(mkscope-fuzz-soundness PRIVATE ${PROJECT_SOURCE_DIR}/devhooks/include ${devsrc})
# Long runs: -DMKS_FZ_PLAIN_VERIFIER=ON compiles the fuzzer's copy of the
# verifier without the sanitizers (the VM, maps and arenas keep them): 1.7x
# fewer CPU seconds a program, since the verifier is most of the work.  The
# verifier's own memory safety is then left to the tests and fuzz_loader.
option(MKS_FZ_PLAIN_VERIFIER "Soundness fuzzer: its verifier without sanitizers (long runs)" OFF)
if(MKS_FZ_PLAIN_VERIFIER)
  set_source_files_properties(${devsrc}/verifier.c ${devsrc}/vf_scalar.c
                              PROPERTIES COMPILE_OPTIONS "-fno-sanitize=all")
endif()
add_test(NAME devhooks_fuzz_soundness COMMAND mkscope-fuzz-soundness --seed 7 --programs 4000 -q)
# Its checks themselves: a program breaking each property, run unverified,
# must be caught.
add_test(NAME devhooks_fuzz_soundness_checks COMMAND mkscope-fuzz-soundness --self-test)
set_tests_properties(devhooks_fuzz_soundness devhooks_fuzz_soundness_checks PROPERTIES LABELS "unit;fuzz" TIMEOUT 120)
# --probes: compiled probes (query/probe.c) from random texts of the probe
# grammar (tests/query/probe_gen.c); every program must be accepted.
if(TARGET mks_query)
  target_sources(mkscope-fuzz-soundness PRIVATE ${PROJECT_SOURCE_DIR}/tests/query/probe_gen.c)
  target_include_directories(mkscope-fuzz-soundness PRIVATE ${PROJECT_SOURCE_DIR}/tests/query)
  target_link_libraries(mkscope-fuzz-soundness PRIVATE mks_query)
  target_compile_definitions(mkscope-fuzz-soundness PRIVATE MKS_FZ_PROBES)
  add_test(NAME devhooks_fuzz_soundness_probes
           COMMAND mkscope-fuzz-soundness --probes --seed 11 --programs 1500 -q)
  set_tests_properties(devhooks_fuzz_soundness_probes PROPERTIES LABELS "unit;fuzz" TIMEOUT 120)
endif()

# The loader and verifier on arbitrary bytes (seeds: loader_test PROGDIR
# --write-corpus DIR).
mks_add_fuzzer(fuzz_loader SOURCES fuzz_loader.c LIBS mks_devhooks
               CORPUS ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/loader ARGS -max_len=65536)
