// Turns a KernelSource into a cubin with NVRTC: generates the tiny translation unit, hands NVRTC
// the embedded device headers in memory, and collects cubin, PTX, log and the mangled kernel name.
#pragma once

#include <string>
#include <vector>

#include "jit/jit.hpp"

namespace switchyard::jit {

struct NvrtcResult {
    std::string cubin;
    std::string ptx;  // only when asked for
    std::string log;
    std::string lowered_name;
};

// Throws InvalidArgument when the family, header or kernel expression cannot be used.
void validate_source(const KernelSource& source);

// The translation unit NVRTC compiles for `source`.
std::string generate_source(const KernelSource& source);

// The NVRTC options for `options` (arch, standard, -lineinfo, -D...). Part of the cache key.
std::vector<std::string> compile_flags(const CompileOptions& options);

// "major.minor" of the NVRTC library loaded in this process. Part of the cache key.
std::string nvrtc_version();

// Compiles; throws CompileError carrying the NVRTC log when compilation fails.
NvrtcResult run_nvrtc(const KernelSource& source, const std::string& generated,
                      const std::vector<std::string>& flags, bool want_ptx);

}  // namespace switchyard::jit
