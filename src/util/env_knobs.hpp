// Environment knobs: every SWITCHYARD_* variable the library reads is declared once, here (name,
// type, default, one line of doc). Knobs are for users and diagnostics, never A/B switches: a
// measured winner is a constant in core/tuning.hpp. A set knob is logged to stderr once per
// process, a malformed value is an InvalidArgument naming the variable, and an unknown
// SWITCHYARD_* variable is reported once (a retired knob must not be silently ignored).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace switchyard::util {

enum class Knob {
    kCacheDir,         // JIT cubin cache directory
    kJitDebug,         // log compiles, cache hits, loads and launches
    kJitDumpPtx,       // write the PTX beside each cubin
    kJitDumpSass,      // write the SASS beside each cubin
    kJitLineInfo,      // compile with -lineinfo
    kJitFailOnSpills,  // a register spill is a CompileError
    kTrace,            // HT and LL kernels record their timelines; each op prints the previous one's
    kNcclLibrary,      // the NCCL library to load
    kEmulatedNodes,    // split the ranks into this many emulated nodes (tests, benchmarks)
    kCount,
};

enum class KnobType { kFlag, kInt, kText };

struct KnobInfo {
    Knob knob;
    const char* name;
    KnobType type;
    const char* default_text;  // as documented; "" = unset
    const char* doc;           // one line
    int64_t min_value = 0, max_value = 0;  // kInt only
};

// The registry, in declaration order.
const std::vector<KnobInfo>& knob_registry();
const KnobInfo& knob_info(Knob knob);

// The value of a knob (read from the environment at every call, cheap). Flags accept 1/0, true/
// false, yes/no, on/off; anything else is an InvalidArgument, as is an integer that does not parse
// or lies outside its range. Unset or empty: the default (false, `fallback`, "").
bool knob_flag(Knob knob);
int64_t knob_int(Knob knob, int64_t fallback);
std::string knob_text(Knob knob);
bool knob_is_set(Knob knob);

// Every registry knob that is set, as (name, value), for benchmark metadata.
std::vector<std::pair<std::string, std::string>> knobs_set();

}  // namespace switchyard::util
