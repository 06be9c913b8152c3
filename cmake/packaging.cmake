# Install rules and the Debian package (included from CMakeLists.txt once src/cli/ has defined the
# binaries and the generated man page and completions).
#
# `cmake --install BUILD` puts swavg and swavg-torch side by side in bin/ (swavg runs swavg-torch
# from its own folder: src/cli/hand_over.cpp), and, outside a wheel build (SKBUILD), the man page
# and the bash, zsh and fish completions where those shells look for them.
#
# `cpack -G DEB` in a build against Debian's LibTorch (libtorch-dev; scripts/build_deb.sh) makes
# swavg_<version>_<arch>.deb, whose Depends are exactly the Debian packages that hold the libraries
# the binaries link (dpkg-shlibdeps). A build against a PyTorch wheel's LibTorch links libraries in
# a virtual environment, which no package provides: cpack refuses it.
include(GNUInstallDirs)

install(TARGETS swavg RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT swavg)
if(TARGET swavg-torch)
  install(TARGETS swavg-torch RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT swavg)
endif()

if(NOT SKBUILD)
  install(FILES "${SWAVG_MAN_PAGE}.gz" DESTINATION "${CMAKE_INSTALL_MANDIR}/man1" COMPONENT swavg)
  install(FILES "${SWAVG_COMPLETIONS_DIR}/swavg.bash" RENAME swavg
          DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions" COMPONENT swavg)
  install(FILES "${SWAVG_COMPLETIONS_DIR}/_swavg" DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/zsh/vendor-completions"
          COMPONENT swavg)
  install(FILES "${SWAVG_COMPLETIONS_DIR}/swavg.fish"
          DESTINATION "${CMAKE_INSTALL_DATAROOTDIR}/fish/vendor_completions.d" COMPONENT swavg)
  install(FILES README.md DESTINATION "${CMAKE_INSTALL_DOCDIR}" COMPONENT swavg)
  # The README's links point into docs/: the pages go beside it.
  install(DIRECTORY docs/ DESTINATION "${CMAKE_INSTALL_DOCDIR}/docs" COMPONENT swavg FILES_MATCHING PATTERN "*.md")

  # cpack (and `make install`) package what is built instead of building everything first: the
  # package test runs cpack in a build folder whose test binaries need not be built.
  set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)
  set(CPACK_GENERATOR DEB)
  set(CPACK_PACKAGE_NAME swavg)
  set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
  set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
      "average PyTorch checkpoints from the command line: SWA, EMA, BatchNorm statistics")
  set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
      "swavg averages PyTorch checkpoints (torch.save, TorchScript, safetensors, Hugging Face folders,\n"
      "DCP and DeepSpeed checkpoints): stochastic weight averaging, exponential moving averages and\n"
      "BatchNorm statistics recomputation, with the semantics of torch.optim.swa_utils, streamed tensor\n"
      "by tensor from memory-mapped files.")
  string(REPLACE ";" "" CPACK_DEBIAN_PACKAGE_DESCRIPTION "${CPACK_DEBIAN_PACKAGE_DESCRIPTION}")
  set(SWAVG_PACKAGE_MAINTAINER "swavg developers <swavg@localhost>" CACHE STRING
      "The Maintainer field of the Debian package")
  set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${SWAVG_PACKAGE_MAINTAINER}")
  set(CPACK_DEBIAN_PACKAGE_SECTION science)
  set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
  set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
  set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # swavg_0.1.0_amd64.deb
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS bash-completion)  # which loads the bash completion on demand
  set(CPACK_STRIP_FILES ON)
  set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};${PROJECT_NAME};swavg;/")
  if(SWAVG_WITH_LIBTORCH AND NOT TORCH_INSTALL_PREFIX STREQUAL "/usr")
    set(_swavg_refuse "${CMAKE_BINARY_DIR}/swavg_cpack_refuse.cmake")
    file(WRITE "${_swavg_refuse}"
         "message(FATAL_ERROR \"swavg: error: this build links the LibTorch in ${TORCH_INSTALL_PREFIX}, which no "
         "Debian package provides; build the .deb against Debian's libtorch-dev with scripts/build_deb.sh\")\n")
    set(CPACK_PROJECT_CONFIG_FILE "${_swavg_refuse}")
  endif()
  include(CPack)
endif()
