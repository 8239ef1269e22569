// Environment knobs of the JIT, read at every compile (cheap, and lets a test or a user flip one
// without restarting the process).
//
//   SWITCHYARD_CACHE_DIR=<dir>         cubin cache (default $HOME/.cache/switchyard)
//   SWITCHYARD_JIT_DEBUG=1             log compiles, cache hits, loads and launches to stderr
//   SWITCHYARD_JIT_DUMP_PTX=1          also write <family>-<key>.ptx next to the cubin
//   SWITCHYARD_JIT_DUMP_SASS=1         also write <family>-<key>.sass (needs cuobjdump or nvdisasm)
//   SWITCHYARD_JIT_LINE_INFO=1         compile with -lineinfo (for profilers / compute-sanitizer)
//   SWITCHYARD_JIT_FAIL_ON_SPILLS=1    throw CompileError when ptxas reports register spills
//   SWITCHYARD_JIT_PLAIN_LAUNCHES=1    cooperative launches become plain ones (launch.cpp; an
//                                      experiment: it showed that a cooperative HT dispatch did not
//                                      start early under PDL, which chained dispatches now avoid)
//   SWITCHYARD_JIT_CARVEOUT=<0..100>   one preferred shared-memory carveout for every kernel
//                                      (kernel.cpp; an experiment on kernel-switch cost)
#pragma once

#include <string>

namespace switchyard::jit {

struct Knobs {
    std::string cache_dir;
    bool debug = false;
    bool dump_ptx = false;
    bool dump_sass = false;
    bool line_info = false;
    bool fail_on_spills = false;
};

Knobs read_knobs();

// True when SWITCHYARD_JIT_DEBUG is set; for the load/launch paths that do not read all knobs.
bool debug_enabled();

// Writes one "[switchyard jit] ..." line to stderr, whole (lines of concurrent threads never mix).
void debug_log(const std::string& message);

}  // namespace switchyard::jit
