#include "jit/knobs.hpp"
#include "util/env_knobs.hpp"

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
    const std::string dir = util::knob_text(util::Knob::kCacheDir);
    knobs.cache_dir = dir.empty() ? default_cache_dir() : dir;
    knobs.debug = util::knob_flag(util::Knob::kJitDebug);
    knobs.dump_ptx = util::knob_flag(util::Knob::kJitDumpPtx);
    knobs.dump_sass = util::knob_flag(util::Knob::kJitDumpSass);
    knobs.line_info = util::knob_flag(util::Knob::kJitLineInfo);
    knobs.fail_on_spills = util::knob_flag(util::Knob::kJitFailOnSpills);
    return knobs;
}

bool debug_enabled() {
    return util::knob_flag(util::Knob::kJitDebug);
}

void debug_log(const std::string& message) {
    static std::mutex mutex;
    std::lock_guard<std::mutex> lock(mutex);
    std::fprintf(stderr, "[switchyard jit] %s\n", message.c_str());
    std::fflush(stderr);
}

}  // namespace switchyard::jit
