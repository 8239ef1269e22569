// The library's version. CMake checks at configure time that these values equal project(VERSION)
// in CMakeLists.txt (cmake/switchyard_version.cmake), and the Python package reads the string
// from here (pyproject.toml), so there is one version for C++, CMake and Python.
#pragma once

namespace switchyard {

inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 2;
inline constexpr int kVersionPatch = 0;
inline constexpr const char* kVersionString = "0.2.0";

}  // namespace switchyard
