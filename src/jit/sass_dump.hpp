// SWITCHYARD_JIT_DUMP_SASS: disassembles a cached cubin with the toolkit's cuobjdump (or nvdisasm).
#pragma once

#include <string>

namespace switchyard::jit {

// Writes the SASS of `cubin_path` to `sass_path`. Returns an empty string on success, otherwise a
// message saying why not (no disassembler found, or it failed) for the caller to print. Never
// throws: a dump is a debugging aid and must not break a run.
std::string dump_sass(const std::string& cubin_path, const std::string& sass_path);

}  // namespace switchyard::jit
