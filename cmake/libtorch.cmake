# LibTorch, for swavg-torch (included from CMakeLists.txt, after cmake/wheel.cmake when SKBUILD is
# set and before anything is compiled): finds Torch, adds its ABI flag to every object, and sets
# what util/version.h and the targets that include LibTorch need:
#
#   SWAVG_LIBTORCH_VERSION, SWAVG_LIBTORCH_VERSION_MAJOR  read from LibTorch's torch/version.h
#   SWAVG_LIBTORCH_CUDA        the CUDA version LibTorch was built with, when its CUDA libraries
#                              are linked in; else empty (a CPU-only LibTorch)
#   SWAVG_TORCH_CXX_STANDARD   the C++ standard LibTorch's headers need (ATen 2.x: 20)
#   swavg_torch_headers        an INTERFACE library with LibTorch's include path
#   swavg_use_torch_headers()  gives a target both (src/libtorch/ and its tests alone)
#
# With -DSWAVG_WITH_LIBTORCH=OFF nothing is searched for (no version, major 0, C++17) and neither
# swavg_torch_headers nor swavg_use_torch_headers exists.
if(SWAVG_WITH_LIBTORCH)
  find_package(Torch REQUIRED)
endif()
# LibTorch's ABI flag (-D_GLIBCXX_USE_CXX11_ABI=0/1) must hold for every object we link with it.
set(CMAKE_CXX_FLAGS "${CMAKE_CXX_FLAGS} ${TORCH_CXX_FLAGS}")

# LibTorch's version, read from its torch/version.h (torch/headeronly/version.h since 2.9), for
# util/version.h: code outside src/libtorch/ names it without including LibTorch headers.
function(_swavg_read_libtorch_version)
  foreach(_name torch/headeronly/version.h torch/version.h)
    foreach(_dir ${TORCH_INCLUDE_DIRS})
      if(NOT _version_h AND EXISTS "${_dir}/${_name}")
        set(_version_h "${_dir}/${_name}")
      endif()
    endforeach()
  endforeach()
  if(NOT _version_h)
    message(FATAL_ERROR "torch/version.h not found in TORCH_INCLUDE_DIRS (${TORCH_INCLUDE_DIRS})")
  endif()
  file(READ "${_version_h}" _text)
  set(_version "")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "#define TORCH_VERSION_${_part} ([0-9]+)" _ "${_text}")
    if(CMAKE_MATCH_1 STREQUAL "")
      set(_version "")
      break()
    endif()
    string(APPEND _version "${CMAKE_MATCH_1}.")
    if(_part STREQUAL "MAJOR")
      set(_major "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  string(REGEX REPLACE "\\.$" "" _version "${_version}")
  if(NOT _version OR NOT _major)
    message(FATAL_ERROR "cannot read the LibTorch version from ${_version_h}")
  endif()
  set(SWAVG_LIBTORCH_VERSION "${_version}" PARENT_SCOPE)
  set(SWAVG_LIBTORCH_VERSION_MAJOR "${_major}" PARENT_SCOPE)
endfunction()

# LibTorch's include path, seen by src/libtorch/ alone (and the tests of it). A PyTorch wheel's
# include folder bundles libraries Debian has too (fmt 12 beside Debian's fmt 9, which spdlog is
# built for): swavg_torch_headers names a mirror of each such folder without them, so every file
# compiles against one fmt.
function(_swavg_add_torch_headers)
  set(_bundled fmt)
  set(_includes "")
  foreach(_dir ${TORCH_INCLUDE_DIRS})
    set(_bundles FALSE)
    foreach(_lib ${_bundled})
      if(NOT _dir STREQUAL "/usr/include" AND IS_DIRECTORY "${_dir}/${_lib}")
        set(_bundles TRUE)
      endif()
    endforeach()
    if(NOT _bundles)
      list(APPEND _includes "${_dir}")
      continue()
    endif()
    string(MD5 _key "${_dir}")
    set(_mirror "${CMAKE_BINARY_DIR}/torch_include/${_key}")
    file(REMOVE_RECURSE "${_mirror}")
    file(MAKE_DIRECTORY "${_mirror}")
    file(GLOB _entries RELATIVE "${_dir}" "${_dir}/*")
    foreach(_entry ${_entries})
      if(NOT _entry IN_LIST _bundled)
        file(CREATE_LINK "${_dir}/${_entry}" "${_mirror}/${_entry}" SYMBOLIC)
      endif()
    endforeach()
    list(APPEND _includes "${_mirror}")
  endforeach()
  add_library(swavg_torch_headers INTERFACE)
  target_include_directories(swavg_torch_headers SYSTEM INTERFACE ${_includes})
endfunction()

# ATen 2.x needs C++20: the targets that include it are compiled as C++20 there, everything else
# stays C++17.
function(_swavg_read_torch_cxx_standard)
  set(_standard 17)
  foreach(_dir ${TORCH_INCLUDE_DIRS})
    if(EXISTS "${_dir}/ATen/ATen.h")
      file(READ "${_dir}/ATen/ATen.h" _aten_h)
      if(_aten_h MATCHES "C\\+\\+20 or later")
        set(_standard 20)
      endif()
    endif()
  endforeach()
  set(SWAVG_TORCH_CXX_STANDARD ${_standard} PARENT_SCOPE)
endfunction()

# CUDA compiled in: the LibTorch libraries include LibTorch's CUDA ones (a CUDA wheel's). --version
# says so, with the CUDA toolkit's version.
function(_swavg_read_libtorch_cuda)
  set(_cuda "")
  if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
    if(CUDAToolkit_VERSION_MAJOR)
      set(_cuda "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
    elseif(CUDA_VERSION)
      set(_cuda "${CUDA_VERSION}")
    else()
      set(_cuda "unknown version")
    endif()
  endif()
  set(SWAVG_LIBTORCH_CUDA "${_cuda}" PARENT_SCOPE)
endfunction()

if(SWAVG_WITH_LIBTORCH)
  _swavg_read_libtorch_version()
  _swavg_add_torch_headers()
  _swavg_read_torch_cxx_standard()
  _swavg_read_libtorch_cuda()
  # Targets that include ATen: LibTorch's headers and the C++ standard they need.
  function(swavg_use_torch_headers target)
    target_link_libraries(${target} PRIVATE swavg_torch_headers)
    set_target_properties(${target} PROPERTIES CXX_STANDARD ${SWAVG_TORCH_CXX_STANDARD})
  endfunction()
  message(STATUS "swavg: LibTorch ${SWAVG_LIBTORCH_VERSION}, C++${SWAVG_TORCH_CXX_STANDARD} for it, CUDA: ${SWAVG_LIBTORCH_CUDA}")
else()
  # No LibTorch: the native kernels follow LibTorch 2.x (the reference, torch 2.14).
  set(SWAVG_LIBTORCH_VERSION "")
  set(SWAVG_LIBTORCH_VERSION_MAJOR 0)
  set(SWAVG_LIBTORCH_CUDA "")
  set(SWAVG_TORCH_CXX_STANDARD 17)
  message(STATUS "swavg: without LibTorch (swavg alone; no swavg-torch)")
endif()
