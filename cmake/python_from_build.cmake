# The Python package from a build tree that already built its extension (scripts/setup.sh installs it this way):
# pip's build runs only this file, which brings the extension in that tree up to date (drope_torch_ext there, an
# incremental build) and installs it with its torch-version stamp, so no C++ source is compiled twice. Without
# DROPE_PYTHON_FROM_BUILD, python/pyproject.toml builds the extension and the layers it uses on its own.
set(_main "${DROPE_PYTHON_FROM_BUILD}")
if(NOT EXISTS "${_main}/CMakeCache.txt")
  message(FATAL_ERROR "DROPE_PYTHON_FROM_BUILD=${_main}: not a configured build directory (expected "
                      "${_main}/CMakeCache.txt; scripts/setup.sh makes one)")
endif()
load_cache("${_main}" READ_WITH_PREFIX _main_ CMAKE_HOME_DIRECTORY DROPE_PYTHON_EXTENSION)
get_filename_component(_main_src "${_main_CMAKE_HOME_DIRECTORY}" REALPATH)
get_filename_component(_this_src "${CMAKE_SOURCE_DIR}" REALPATH)
if(NOT _main_src STREQUAL _this_src)
  message(FATAL_ERROR "DROPE_PYTHON_FROM_BUILD=${_main}: built from ${_main_CMAKE_HOME_DIRECTORY}, not from "
                      "${CMAKE_SOURCE_DIR}")
endif()
if(NOT _main_DROPE_PYTHON_EXTENSION)
  message(FATAL_ERROR "DROPE_PYTHON_FROM_BUILD=${_main}: configured with DROPE_PYTHON_EXTENSION=OFF, so it has no "
                      "extension to install (reconfigure it with -DDROPE_PYTHON_EXTENSION=ON)")
endif()
add_custom_target(drope_torch_ext ALL COMMAND "${CMAKE_COMMAND}" --build "${_main}" --target drope_torch_ext
  COMMENT "drope_torch_ext in ${_main}" USES_TERMINAL VERBATIM)
install(PROGRAMS "${_main}/python/_C.so" DESTINATION drope COMPONENT drope_python)
install(FILES "${_main}/python/_build_info.py" DESTINATION drope COMPONENT drope_python)
