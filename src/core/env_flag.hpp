// Boolean environment knobs (A/B switches and profiling aids, read once by their users).
#pragma once

#include <cstdlib>
#include <string>

namespace switchyard::core {

// Unset or empty: `default_value`; "0", "false", "no" and "off": false; anything else: true.
inline bool env_flag(const char* name, bool default_value = false) {
    const char* value = std::getenv(name);
    if (!value || !*value) return default_value;
    const std::string text(value);
    return text != "0" && text != "false" && text != "no" && text != "off";
}

}  // namespace switchyard::core
