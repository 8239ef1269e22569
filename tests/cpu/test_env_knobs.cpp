// The environment knobs' parsing (util/env_flag.hpp): defaults, spellings and clamping.
#include <cstdlib>

#include "common/testing.hpp"
#include "util/env_flag.hpp"

using namespace switchyard;

namespace {
constexpr const char* kKnob = "SWITCHYARD_TEST_KNOB_PARSING";
}

SY_TEST(EnvKnobs, FlagsTakeTheirDefaultWhenUnsetOrEmpty) {
    unsetenv(kKnob);
    SY_CHECK(util::env_flag(kKnob) == false);
    SY_CHECK(util::env_flag(kKnob, true) == true);
    setenv(kKnob, "", 1);
    SY_CHECK(util::env_flag(kKnob, true) == true);
    for (const char* off : {"0", "false", "no", "off"}) {
        setenv(kKnob, off, 1);
        SY_CHECK(util::env_flag(kKnob, true) == false);
    }
    for (const char* on : {"1", "true", "yes", "on"}) {
        setenv(kKnob, on, 1);
        SY_CHECK(util::env_flag(kKnob) == true);
    }
    unsetenv(kKnob);
}

SY_TEST(EnvKnobs, IntegersAreClampedToTheirRange) {
    unsetenv(kKnob);
    SY_CHECK(util::env_int(kKnob, 7, 0, 64) == 7);
    setenv(kKnob, "", 1);
    SY_CHECK(util::env_int(kKnob, 7, 0, 64) == 7);
    setenv(kKnob, "0", 1);
    SY_CHECK(util::env_int(kKnob, 7, 0, 64) == 0);
    setenv(kKnob, "12", 1);
    SY_CHECK(util::env_int(kKnob, 7, 0, 64) == 12);
    setenv(kKnob, "1000", 1);
    SY_CHECK(util::env_int(kKnob, 7, 0, 64) == 64);
    setenv(kKnob, "-3", 1);
    SY_CHECK(util::env_int(kKnob, 7, 1, 64) == 1);
    unsetenv(kKnob);
}

SY_TEST_MAIN()
