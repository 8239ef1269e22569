// Environment knobs (A/B switches, tuning values and profiling aids, read once by their users).
#pragma once

#include <cstdlib>
#include <string>

namespace switchyard::util {

// Unset or empty: `default_value`; "0", "false", "no" and "off": false; anything else: true.
inline bool env_flag(const char* name, bool default_value = false) {
    const char* value = std::getenv(name);
    if (!value || !*value) return default_value;
    const std::string text(value);
    return text != "0" && text != "false" && text != "no" && text != "off";
}

// Unset or empty: `default_value`; else the number, clamped to [min_value, max_value].
inline int env_int(const char* name, int default_value, int min_value, int max_value) {
    const char* value = std::getenv(name);
    if (!value || !*value) return default_value;
    const int number = std::atoi(value);
    return number < min_value ? min_value : number > max_value ? max_value : number;
}

}  // namespace switchyard::util
