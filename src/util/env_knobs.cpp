#include "util/env_knobs.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "switchyard/errors.hpp"

extern char** environ;

namespace switchyard::util {
namespace {

const char* raw_value(const KnobInfo& info) {
    const char* value = std::getenv(info.name);
    return value && *value ? value : nullptr;
}

// Logs a set knob once per process, and once reports SWITCHYARD_* variables that are no knob.
// Variables of the project's tools (SWITCHYARD_BENCH_*, SWITCHYARD_TEST_*) are theirs to read.
void log_once(const KnobInfo& info, const char* value) {
    static std::mutex mutex;
    static std::set<int> logged;
    static bool scanned = false;
    std::lock_guard<std::mutex> lock(mutex);
    if (!scanned) {
        scanned = true;
        for (char** entry = environ; entry && *entry; ++entry) {
            const std::string text(*entry);
            const std::string name = text.substr(0, text.find('='));
            if (name.rfind("SWITCHYARD_", 0) != 0 || name.rfind("SWITCHYARD_BENCH_", 0) == 0 ||
                name.rfind("SWITCHYARD_TEST_", 0) == 0)
                continue;
            bool known = false;
            for (const KnobInfo& knob : knob_registry()) known = known || name == knob.name;
            if (!known)
                std::fprintf(stderr, "[switchyard] %s is not a Switchyard knob and is ignored (see README)\n",
                             name.c_str());
        }
    }
    if (value == nullptr || !logged.insert(int(info.knob)).second) return;
    std::fprintf(stderr, "[switchyard] %s=%s (%s)\n", info.name, value, info.doc);
    std::fflush(stderr);
}

[[noreturn]] void malformed(const KnobInfo& info, const char* value, const char* expected) {
    throw InvalidArgument(std::string("switchyard: ") + info.name + "='" + value + "' is not " + expected +
                          " (" + info.doc + ")");
}

}  // namespace

const std::vector<KnobInfo>& knob_registry() {
    static const std::vector<KnobInfo> registry = {
        {Knob::kCacheDir, "SWITCHYARD_CACHE_DIR", KnobType::kText, "~/.cache/switchyard",
         "directory of the JIT's cubin cache"},
        {Knob::kJitDebug, "SWITCHYARD_JIT_DEBUG", KnobType::kFlag, "0",
         "log JIT compiles, cache hits, loads and launches to stderr"},
        {Knob::kJitDumpPtx, "SWITCHYARD_JIT_DUMP_PTX", KnobType::kFlag, "0",
         "write <family>-<key>.ptx beside each compiled cubin"},
        {Knob::kJitDumpSass, "SWITCHYARD_JIT_DUMP_SASS", KnobType::kFlag, "0",
         "write <family>-<key>.sass beside each compiled cubin (needs cuobjdump or nvdisasm)"},
        {Knob::kJitLineInfo, "SWITCHYARD_JIT_LINE_INFO", KnobType::kFlag, "0",
         "compile kernels with -lineinfo (profilers, compute-sanitizer)"},
        {Knob::kJitFailOnSpills, "SWITCHYARD_JIT_FAIL_ON_SPILLS", KnobType::kFlag, "0",
         "a kernel that spills registers is a CompileError"},
        {Knob::kTrace, "SWITCHYARD_TRACE", KnobType::kFlag, "0",
         "HT and LL kernels record their phase timelines; each op prints the previous one's to stderr"},
        {Knob::kNcclLibrary, "SWITCHYARD_NCCL_LIBRARY", KnobType::kText, "",
         "path or soname of the NCCL library to load (default: libnccl.so.2 from the usual places)"},
        {Knob::kEmulatedNodes, "SWITCHYARD_EMULATED_NODES", KnobType::kInt, "",
         "split the ranks into this many emulated nodes (tests and benchmarks on one host)", 1, 1 << 20},
    };
    return registry;
}

const KnobInfo& knob_info(Knob knob) {
    return knob_registry().at(size_t(knob));
}

bool knob_is_set(Knob knob) {
    return raw_value(knob_info(knob)) != nullptr;
}

bool knob_flag(Knob knob) {
    const KnobInfo& info = knob_info(knob);
    const char* value = raw_value(info);
    log_once(info, value);
    if (!value) return false;
    for (const char* on : {"1", "true", "yes", "on"})
        if (std::strcmp(value, on) == 0) return true;
    for (const char* off : {"0", "false", "no", "off"})
        if (std::strcmp(value, off) == 0) return false;
    malformed(info, value, "a flag (1/0, true/false, yes/no, on/off)");
}

int64_t knob_int(Knob knob, int64_t fallback) {
    const KnobInfo& info = knob_info(knob);
    const char* value = raw_value(info);
    log_once(info, value);
    if (!value) return fallback;
    char* end = nullptr;
    const long long number = std::strtoll(value, &end, 10);
    if (*end != '\0' || number < info.min_value || number > info.max_value)
        malformed(info, value,
                  ("an integer in [" + std::to_string(info.min_value) + ", " + std::to_string(info.max_value) + "]")
                      .c_str());
    return number;
}

std::string knob_text(Knob knob) {
    const KnobInfo& info = knob_info(knob);
    const char* value = raw_value(info);
    log_once(info, value);
    return value ? std::string(value) : std::string();
}

std::vector<std::pair<std::string, std::string>> knobs_set() {
    std::vector<std::pair<std::string, std::string>> set;
    for (const KnobInfo& info : knob_registry())
        if (const char* value = raw_value(info)) set.emplace_back(info.name, value);
    return set;
}

}  // namespace switchyard::util
