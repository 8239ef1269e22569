// Reads resource usage out of the verbose ptxas output that NVRTC appends to its log
// (--ptxas-options=-v), e.g.
//   ptxas info    : Compiling entry function '_Z...' for 'sm_90a'
//   ptxas info    : Function properties for _Z...
//   ptxas         .     408 bytes stack frame, 756 bytes spill stores, 760 bytes spill loads
//   ptxas info    : Used 32 registers, used 0 barriers, 408 bytes cumulative stack size
#pragma once

#include <string>

namespace switchyard::jit {

struct PtxasStats {
    int num_registers = -1;  // of the entry function; -1 if the log did not say
    int stack_bytes = -1;    // stack frame of the entry function
    int spill_bytes = -1;    // spill stores + loads summed over every function in the log
};

// `entry` is the lowered (mangled) kernel name; when empty, the first entry function is used.
PtxasStats parse_ptxas_log(const std::string& log, const std::string& entry);

}  // namespace switchyard::jit
