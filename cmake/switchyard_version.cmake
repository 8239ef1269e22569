# Checks that include/switchyard/version.hpp states PROJECT_VERSION (the one version of C++, the
# CMake package and the Python package; pyproject.toml reads the header's string).
file(READ "${PROJECT_SOURCE_DIR}/include/switchyard/version.hpp" _sy_version_header)
foreach(_sy_part Major Minor Patch)
  string(REGEX MATCH "kVersion${_sy_part} = ([0-9]+);" _sy_match "${_sy_version_header}")
  set(_sy_version_${_sy_part} "${CMAKE_MATCH_1}")
endforeach()
string(REGEX MATCH "kVersionString = \"([0-9.]+)\";" _sy_match "${_sy_version_header}")
set(_sy_version_string "${CMAKE_MATCH_1}")
set(_sy_version_parts "${_sy_version_Major}.${_sy_version_Minor}.${_sy_version_Patch}")
if(NOT _sy_version_parts STREQUAL PROJECT_VERSION OR NOT _sy_version_string STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "include/switchyard/version.hpp says ${_sy_version_parts} (string "
                      "\"${_sy_version_string}\") but project(VERSION) is ${PROJECT_VERSION}: "
                      "change both together")
endif()
