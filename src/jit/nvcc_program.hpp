// The JIT's second compiler: nvcc in a subprocess, for kernels that use the NCCL device API (GIN:
// transport/net_gin.cuh). The stock NCCL device headers do not compile under NVRTC (libc headers,
// host-only prototypes, a packed proxy descriptor whose layout NVRTC would not keep), so rather
// than shim and patch a private copy whose descriptor layout nobody could verify, those kernels go
// through the compiler NCCL supports, as DeepEP V2 and NCCL EP do (docs/decisions.md).
//
// nvcc is taken from the CUDA toolkit the library was built with (then $CUDA_HOME, $CUDA_PATH,
// /usr/local/cuda, PATH); the NCCL headers are the ones the library was built with
// (SWITCHYARD_NCCL_INCLUDE_DIR at configure time). The embedded device headers are written once
// per header digest under the cache directory; cubins land in the same disk cache as NVRTC's, with
// a key that adds the nvcc version and the NCCL version.
#pragma once

#include <string>
#include <vector>

#include "jit/jit.hpp"
#include "jit/nvrtc_program.hpp"

namespace switchyard::jit {

struct NvccToolchain {
    std::string nvcc;           // path
    std::string version;        // nvcc's "release 13.0, V13.0.88" line
    std::string nccl_include;   // directory of nccl.h and nccl_device.h
    int nccl_version_code = 0;  // NCCL_VERSION_CODE of those headers
};

// nvcc's path (canonical), searched in the toolkit the library was built with, then $CUDA_HOME/bin,
// $CUDA_PATH/bin, /usr/local/cuda/bin and PATH; empty when it is in none of them.
std::string find_nvcc();

// Finds nvcc and the NCCL headers the library was built with. Throws UnsupportedError that names
// what is missing (nvcc, or a library built without NCCL device headers, or headers that changed
// since the build).
const NvccToolchain& nvcc_toolchain();

// nvcc's options for `options` (part of the cache key).
std::vector<std::string> nvcc_flags(const CompileOptions& options, const NvccToolchain& toolchain);

// Compiles `generated` to a cubin with nvcc; `cache_dir` holds the headers and the temporary files.
// Throws CompileError with nvcc's output when it fails.
NvrtcResult run_nvcc(const KernelSource& source, const std::string& generated, const std::vector<std::string>& flags,
                     const std::string& cache_dir);

// The mangled name of the entry function in `cubin` whose demangled name is `kernel` (an ELF
// symbol marked as a CUDA entry); the only entry when there is one. Empty when none matches.
std::string find_entry_symbol(const std::string& cubin, const std::string& kernel);

}  // namespace switchyard::jit
