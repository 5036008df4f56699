# What `cmake --install` puts in place, and the Debian package (cpack -G DEB):
#   bin/      the programs, and the launchers of deploy/ (mkscope-launch,
#             mkscope-node-agent, mkscope-srun, mkscope-slurm-collector)
#   lib/      libmkscope-nccl-profiler.so; mkscope/monitors/*.bpf.o (the
#             agent finds them next to its binary: ../lib/mkscope/monitors)
#   lib/systemd/system/  the collector and agent units
#   include/mkscope/     the hook ABI and the monitor header, for writing
#                        monitors (clang -target bpf -I<prefix>/include)
#   share/man/man1/      a page per program, made from its --help
#   share/bash-completion/completions/mkscope  made from the CLI's help
#   share/mkscope/       the Grafana dashboard, the Prometheus rules, the
#                        Kubernetes manifests
# Man pages and the completion are generated at build time by running the
# built programs (cmake/help2man.sh, cmake/help2completion.sh), so they say
# what the programs say.
include(GNUInstallDirs)

set(mks_programs mkscope mkscope-collector mkscope-bench mkscope-verify mkscope-nccl-dump
    mkscope-mpk-schema)
foreach(t ${mks_programs})
  if(TARGET ${t})
    install(TARGETS ${t} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()
if(TARGET mkscope-nccl-profiler)
  install(TARGETS mkscope-nccl-profiler LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(PROGRAMS ${PROJECT_SOURCE_DIR}/deploy/local/mkscope-launch
                 ${PROJECT_SOURCE_DIR}/deploy/local/mkscope-node-agent
                 ${PROJECT_SOURCE_DIR}/deploy/slurm/mkscope-srun
                 ${PROJECT_SOURCE_DIR}/deploy/slurm/mkscope-slurm-collector
        DESTINATION ${CMAKE_INSTALL_BINDIR})
# The units name /usr/local/bin (cmake's default prefix); installed, they
# name the prefix they were installed under (/usr from the Debian package).
foreach(u mkscope-collector.service mkscope-agent@.service)
  install(CODE "
    file(READ \"${PROJECT_SOURCE_DIR}/deploy/systemd/${u}\" unit)
    string(REPLACE \"/usr/local/bin/\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/\" unit \"\${unit}\")
    set(dest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
    file(MAKE_DIRECTORY \"\${dest}\")
    file(WRITE \"\${dest}/${u}\" \"\${unit}\")
    message(STATUS \"Installing: \${dest}/${u}\")")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/devhooks/include/mkscope/hook_abi.h
              ${PROJECT_SOURCE_DIR}/devhooks/include/mkscope/mkscope.bpf.h
              ${PROJECT_SOURCE_DIR}/devhooks/include/mkscope/bpf_isa.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/mkscope)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/grafana/mkscope-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/mkscope/grafana)
install(FILES ${PROJECT_SOURCE_DIR}/deploy/prometheus/mkscope-alerts.yaml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/mkscope/prometheus)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/k8s/ DESTINATION ${CMAKE_INSTALL_DATADIR}/mkscope/k8s)

# Man pages and completion from the programs' own help text.
set(mks_gen ${PROJECT_BINARY_DIR}/share)
set(mks_pages "")
foreach(t mkscope mkscope-collector mkscope-agent mkscope-bench mkscope-verify)
  if(TARGET ${t})
    set(extra "")
    if(t STREQUAL "mkscope")
      set(extra --commands)
    endif()
    set(page ${mks_gen}/man/man1/${t}.1)
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${mks_gen}/man/man1
      COMMAND bash ${PROJECT_SOURCE_DIR}/cmake/help2man.sh $<TARGET_FILE:${t}> ${t} ${extra}
              --version ${PROJECT_VERSION} > ${page}
      DEPENDS ${t} ${PROJECT_SOURCE_DIR}/cmake/help2man.sh
      COMMENT "man page ${t}.1 from ${t} --help" VERBATIM)
    list(APPEND mks_pages ${page})
  endif()
endforeach()
foreach(s mkscope-launch mkscope-node-agent mkscope-srun mkscope-slurm-collector)
  set(src ${PROJECT_SOURCE_DIR}/deploy/local/${s})
  if(NOT EXISTS ${src})
    set(src ${PROJECT_SOURCE_DIR}/deploy/slurm/${s})
  endif()
  set(page ${mks_gen}/man/man1/${s}.1)
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${mks_gen}/man/man1
    COMMAND bash ${PROJECT_SOURCE_DIR}/cmake/help2man.sh ${src} ${s} --version ${PROJECT_VERSION}
            > ${page}
    DEPENDS ${src} ${PROJECT_SOURCE_DIR}/cmake/help2man.sh
    COMMENT "man page ${s}.1 from ${s} --help" VERBATIM)
  list(APPEND mks_pages ${page})
endforeach()
# Only where the CLI is built (a build of some modules has none).
set(mks_completion "")
if(TARGET mkscope)
  set(mks_completion ${mks_gen}/bash-completion/completions/mkscope)
  add_custom_command(OUTPUT ${mks_completion}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${mks_gen}/bash-completion/completions
    COMMAND bash ${PROJECT_SOURCE_DIR}/cmake/help2completion.sh $<TARGET_FILE:mkscope>
            > ${mks_completion}
    DEPENDS mkscope ${PROJECT_SOURCE_DIR}/cmake/help2completion.sh
    COMMENT "bash completion for mkscope from its help" VERBATIM)
  install(FILES ${mks_completion} DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
endif()
add_custom_target(mks_docs ALL DEPENDS ${mks_pages} ${mks_completion})
install(FILES ${mks_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)

# cpack -G DEB (from the build directory): one package with all of the above.
set(CPACK_PACKAGE_NAME mkscope)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "mkscope maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Observability for persistent GPU megakernels: agents, collector, CLI, monitors")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# The shared libraries the programs link (dpkg-shlibdeps reads them).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
include(CPack)
