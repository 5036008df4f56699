# Register a cmocka test with CTest and a timeout.
#   mks_add_test(<name> SOURCES ... [LIBS ...] [LABELS ...] [TIMEOUT s] [ARGS ...])
# Label "unit" marks the fast tests the sanitizer build runs.
function(mks_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} mks::cmocka)
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}"
                       ENVIRONMENT "MKS_SOURCE_DIR=${PROJECT_SOURCE_DIR};MKS_BUILD_DIR=${PROJECT_BINARY_DIR}")
endfunction()
