#include "jit/knobs.hpp"
#include "util/env_flag.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace switchyard::jit {
namespace {

std::string default_cache_dir() {
    if (const char* home = std::getenv("HOME"); home && *home)
        return std::string(home) + "/.cache/switchyard";
    // No home directory (some batch systems): fall back to a per-user directory in /tmp.
    return "/tmp/switchyard-cache-" + std::to_string(static_cast<long>(getuid()));
}

}  // namespace

Knobs read_knobs() {
    Knobs knobs;
    const char* dir = std::getenv("SWITCHYARD_CACHE_DIR");
    knobs.cache_dir = (dir && *dir) ? std::string(dir) : default_cache_dir();
    knobs.debug = util::env_flag("SWITCHYARD_JIT_DEBUG");
    knobs.dump_ptx = util::env_flag("SWITCHYARD_JIT_DUMP_PTX");
    knobs.dump_sass = util::env_flag("SWITCHYARD_JIT_DUMP_SASS");
    knobs.line_info = util::env_flag("SWITCHYARD_JIT_LINE_INFO");
    knobs.fail_on_spills = util::env_flag("SWITCHYARD_JIT_FAIL_ON_SPILLS");
    return knobs;
}

bool debug_enabled() {
    return util::env_flag("SWITCHYARD_JIT_DEBUG");
}

void debug_log(const std::string& message) {
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    std::fprintf(stderr, "[switchyard jit] %s\n", message.c_str());
    std::fflush(stderr);
}

}  // namespace switchyard::jit
