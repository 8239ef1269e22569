// The device headers under kernels/, embedded at build time (cmake/embed_headers.cmake).
#pragma once

#include <cstddef>

namespace switchyard::jit::embedded {

struct EmbeddedFile {
    const char* path;      // relative to kernels/, e.g. "switchyard/common/base.cuh"
    const char* contents;  // NUL-terminated
    size_t size;
};

extern const EmbeddedFile kFiles[];
extern const size_t kNumFiles;
extern const char* const kDigest;  // SHA-256 over all paths and contents

}  // namespace switchyard::jit::embedded
