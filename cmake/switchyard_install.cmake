# Install rules and the exported CMake package: `cmake --install` puts the public headers, the
# library and a package config under the prefix, and a consumer then writes
#
#   find_package(switchyard 0.2 CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE switchyard::switchyard)
#
# The device headers are embedded in the library (the JIT needs no install path) and libcuda /
# NCCL are opened at run time, so only include/switchyard/*.hpp is installed. Everything here is
# in the install COMPONENT "switchyard_development", which the Python wheel leaves out.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SWITCHYARD_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/switchyard"
    CACHE STRING "Where the CMake package files are installed (relative to the prefix)")

install(TARGETS switchyard EXPORT switchyardTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT switchyard_development
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT switchyard_development
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT switchyard_development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/switchyard
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT switchyard_development
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT switchyardTargets NAMESPACE switchyard:: DESTINATION ${SWITCHYARD_INSTALL_CMAKEDIR}
        COMPONENT switchyard_development)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/switchyardConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/switchyardConfig.cmake
                              INSTALL_DESTINATION ${SWITCHYARD_INSTALL_CMAKEDIR})
# 0.x: minor versions may break the API, so a request for 0.2 accepts 0.2.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/switchyardConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/switchyardConfig.cmake ${PROJECT_BINARY_DIR}/switchyardConfigVersion.cmake
        DESTINATION ${SWITCHYARD_INSTALL_CMAKEDIR} COMPONENT switchyard_development)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/switchyard COMPONENT switchyard_development)

# A consumer that vendors the tree (add_subdirectory / FetchContent) gets the same target name.
export(EXPORT switchyardTargets NAMESPACE switchyard:: FILE ${PROJECT_BINARY_DIR}/switchyardTargets.cmake)
