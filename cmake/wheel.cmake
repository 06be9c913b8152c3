# The wheel (`pip install .`, scikit-build-core; included from CMakeLists.txt when SKBUILD is set,
# before find_package(Torch)): builds against the torch installed in the environment pip installs
# into, puts swavg and swavg-torch in that environment's scripts folder (its bin/, on PATH) and
# gives swavg-torch an RPATH to that torch's lib/.
#
# pip runs the build in an isolated environment whose PYTHONPATH hides the target's site-packages,
# but with the target's own interpreter (Python_EXECUTABLE): that interpreter, run without pip's
# PYTHONPATH, sees the user's torch. Torch_DIR (-Ccmake.define.Torch_DIR=...) or SWAVG_TORCH_PYTHON
# (an interpreter whose torch to use, for frontends that build with another interpreter) override;
# an activated environment's python ($VIRTUAL_ENV) is the last resort.
if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "the wheel build needs CMake 3.19 or newer (found ${CMAKE_VERSION})")
endif()

set(_swavg_wheel_probe [=[
import importlib.util, os, sysconfig
spec = importlib.util.find_spec("torch")
if spec is None or not spec.origin:
    raise SystemExit("no module named torch")
print(os.path.dirname(os.path.abspath(spec.origin)))
print(sysconfig.get_path("scripts"))
]=])

set(_swavg_wheel_pythons "")
if(DEFINED ENV{SWAVG_TORCH_PYTHON})
  list(APPEND _swavg_wheel_pythons "$ENV{SWAVG_TORCH_PYTHON}")
endif()
if(Python_EXECUTABLE)
  list(APPEND _swavg_wheel_pythons "${Python_EXECUTABLE}")
endif()
if(DEFINED ENV{VIRTUAL_ENV} AND EXISTS "$ENV{VIRTUAL_ENV}/bin/python")
  list(APPEND _swavg_wheel_pythons "$ENV{VIRTUAL_ENV}/bin/python")  # an activated environment
endif()
set(SWAVG_WHEEL_TORCH "" CACHE INTERNAL "The torch package folder the wheel is built against")
set(SWAVG_WHEEL_SCRIPTS "" CACHE INTERNAL "The scripts folder the wheel installs into")
set(_swavg_wheel_tried "")
foreach(_python ${_swavg_wheel_pythons})
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE "${_python}" -c
            "${_swavg_wheel_probe}"
    OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0)
    string(REPLACE "\n" ";" _lines "${_out}")
    list(GET _lines 0 SWAVG_WHEEL_TORCH)
    list(GET _lines 1 SWAVG_WHEEL_SCRIPTS)
    message(STATUS "swavg wheel: torch of ${_python}: ${SWAVG_WHEEL_TORCH}")
    break()
  endif()
  string(STRIP "${_err}" _err)
  list(APPEND _swavg_wheel_tried "${_python}: ${_err}")
endforeach()

# Torch_DIR from the probe unless given (a kept build folder probes again: torch may have changed).
if(NOT Torch_DIR OR Torch_DIR STREQUAL "${SWAVG_WHEEL_PROBED_TORCH_DIR}")
  if(NOT SWAVG_WHEEL_TORCH)
    string(REPLACE ";" "\n  " _tried "${_swavg_wheel_tried}")
    message(FATAL_ERROR
      "swavg is built against the torch installed where pip installs it, and none was found:\n  ${_tried}\n"
      "Install torch first (pip install torch), set SWAVG_TORCH_PYTHON to an interpreter that has it, "
      "or pass -Ccmake.define.Torch_DIR=<torch>/share/cmake/Torch.")
  endif()
  if(NOT EXISTS "${SWAVG_WHEEL_TORCH}/share/cmake/Torch/TorchConfig.cmake")
    message(FATAL_ERROR
      "the torch at ${SWAVG_WHEEL_TORCH} has no CMake package (share/cmake/Torch): a PyTorch wheel's torch "
      "has one; for a distribution's python3-torch pass its LibTorch, "
      "-Ccmake.define.Torch_DIR=<prefix>/lib/<triplet>/cmake/Torch (Debian: libtorch-dev).")
  endif()
  set(Torch_DIR "${SWAVG_WHEEL_TORCH}/share/cmake/Torch" CACHE PATH "LibTorch's CMake package" FORCE)
  set(SWAVG_WHEEL_PROBED_TORCH_DIR "${Torch_DIR}" CACHE INTERNAL "Torch_DIR as the probe set it")
  # The wheel's own folder first, so that its lib/ is searched before the system's (scripts/setup.sh).
  list(PREPEND CMAKE_PREFIX_PATH "${SWAVG_WHEEL_TORCH}" "${SWAVG_WHEEL_TORCH}/share/cmake")
endif()

# swavg-torch finds torch's libraries relative to itself ($ORIGIN: the environment moved along with
# its torch still works), else at the absolute path it was built against (a torch outside the
# environment, reached through a .pth file). swavg links no LibTorch and gets no RPATH: it loads the
# system's libgomp, not the copy in torch's lib/, as in the build folder. Install rules once the
# binaries are defined (src/cli/), component swavg_wheel alone (pyproject.toml's
# install.components): SKBUILD_SCRIPTS_DIR is the environment's bin/.
function(_swavg_wheel_install)
  set(lib "${TORCH_INSTALL_PREFIX}/lib")
  set(rpath "${lib}")
  if(SWAVG_WHEEL_SCRIPTS)
    file(RELATIVE_PATH rel "${SWAVG_WHEEL_SCRIPTS}" "${lib}")
    set(rpath "\$ORIGIN/${rel}" "${lib}")
  endif()
  message(STATUS "swavg wheel: swavg-torch's RPATH ${rpath}")
  set_target_properties(swavg-torch PROPERTIES INSTALL_RPATH "${rpath}")
  install(TARGETS swavg swavg-torch RUNTIME DESTINATION "${SKBUILD_SCRIPTS_DIR}" COMPONENT swavg_wheel)
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _swavg_wheel_install)
