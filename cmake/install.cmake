# `cmake --install <build> [--prefix <dir>]`: the headers, the component libraries, the apps
# (apps/CMakeLists.txt) and a CMake package, so that another project can
#   find_package(meshnn REQUIRED [COMPONENTS core io ...])
#   target_link_libraries(app PRIVATE meshnn::meshnn)   # or meshnn::core, meshnn::io, ...
# Each component has its own exported targets file, so meshnnConfig.cmake can load the components
# asked for (and those they link) after finding only their dependencies.
include(CMakePackageConfigHelpers)
set(MESHNN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/meshnn)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/meshnn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(MESHNN_CONFIG_LINKS "")
foreach(component ${MESHNN_COMPONENTS})
  install(TARGETS meshnn_${component} EXPORT meshnn-${component} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT meshnn-${component} NAMESPACE meshnn:: DESTINATION ${MESHNN_INSTALL_CMAKEDIR}
          FILE meshnn-${component}-targets.cmake)
  string(APPEND MESHNN_CONFIG_LINKS "set(_meshnn_links_${component} ${MESHNN_LINKS_${component}})\n")
endforeach()
install(TARGETS meshnn EXPORT meshnn-all)
install(EXPORT meshnn-all NAMESPACE meshnn:: DESTINATION ${MESHNN_INSTALL_CMAKEDIR} FILE meshnn-all-targets.cmake)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/meshnnConfig.cmake.in ${CMAKE_BINARY_DIR}/meshnnConfig.cmake
                              INSTALL_DESTINATION ${MESHNN_INSTALL_CMAKEDIR})
# Before 1.0 a minor version may change the API, so only the same major.minor is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/meshnnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/meshnnConfig.cmake ${CMAKE_BINARY_DIR}/meshnnConfigVersion.cmake
        DESTINATION ${MESHNN_INSTALL_CMAKEDIR})
