// Test diagnostics: a readable dump of one rank's control workspace (sequence counters and every
// signal peers write into it), printed when a multi-rank test fails, so a divergence between
// ranks (who is at which op, which signal never arrived) can be read from the log.
#pragma once

#include <cstdio>
#include <string>

namespace switchyard {
class Buffer;
}

namespace switchyard::testing {

// Reads the workspace with a synchronous copy; call after the failing op's kernels have ended.
std::string describe_workspace(const Buffer& buffer);

// Runs `body`; if it throws, prints this rank's workspace dump and rethrows.
template <typename Body>
void dump_workspace_on_failure(const Buffer& buffer, Body&& body) {
    try {
        body();
    } catch (...) {
        std::printf("%s", describe_workspace(buffer).c_str());
        std::fflush(stdout);
        throw;
    }
}

}  // namespace switchyard::testing
