// The JIT's environment knobs (declared in util/env_knobs.hpp), read at every compile: cheap, and a
// test or a user can flip one without restarting the process.
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
