# `cmake --install build --prefix P`: the tools (bin/), the layer libraries (lib/), the public headers
# (include/drope/), the configs (share/drope/configs/) and a relocatable CMake package (lib/cmake/drope/) with the
# targets drope::drope and drope::<layer> for each layer of DROPE_LAYERS (docs/library.md). Included from the
# top-level CMakeLists.txt after every target exists.
include(CMakePackageConfigHelpers)
set(DROPE_INSTALL_LIBDIR lib)
set(DROPE_INSTALL_CMAKEDIR ${DROPE_INSTALL_LIBDIR}/cmake/drope)

set(_drope_lib_targets drope drope_torch drope_fmt drope_log_backend)
foreach(layer ${DROPE_LAYER_NAMES})
  list(APPEND _drope_lib_targets drope_${layer})
endforeach()
install(TARGETS ${_drope_lib_targets} EXPORT dropeTargets
  ARCHIVE DESTINATION ${DROPE_INSTALL_LIBDIR} LIBRARY DESTINATION ${DROPE_INSTALL_LIBDIR}
  INCLUDES DESTINATION include)
install(DIRECTORY include/drope DESTINATION include)

# The tools find LibTorch (and the text modules Arrow) where the build found them: the link path becomes the
# install RPATH. The dlopen()ed modules go to lib/drope/, where the text layer looks for them
# (src/text/module_loader.cpp: beside the tool, ../lib/drope/ from it, or the package's own lib/drope/).
set(_drope_tools drope-train drope-eval drope-model drope-data drope-analyze drope-bench)
get_filename_component(_drope_torch_libdir "${TORCH_LIBRARY}" DIRECTORY)  # libtorch_cpu.so & co. (linker flags)
set_target_properties(${_drope_tools} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
set_target_properties(drope-train drope-eval drope-model drope-analyze drope-bench PROPERTIES
  INSTALL_RPATH "${_drope_torch_libdir}")  # drope-data is torch-free
install(TARGETS ${_drope_tools} RUNTIME DESTINATION bin)
set(_drope_modules drope_sentencepiece)
if(TARGET drope_parquet)
  list(APPEND _drope_modules drope_parquet)
endif()
set_target_properties(${_drope_modules} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
install(TARGETS ${_drope_modules} LIBRARY DESTINATION ${DROPE_INSTALL_LIBDIR}/drope)
install(DIRECTORY configs/ DESTINATION share/drope/configs)

install(EXPORT dropeTargets NAMESPACE drope:: DESTINATION ${DROPE_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/dropeConfig.cmake.in ${CMAKE_BINARY_DIR}/dropeConfig.cmake
  INSTALL_DESTINATION ${DROPE_INSTALL_CMAKEDIR} PATH_VARS DROPE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/dropeConfigVersion.cmake VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/dropeConfig.cmake ${CMAKE_BINARY_DIR}/dropeConfigVersion.cmake
  DESTINATION ${DROPE_INSTALL_CMAKEDIR})
