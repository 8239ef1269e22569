// The environment knob registry (util/env_knobs.hpp): every knob declared once with a doc line,
// flags and integers parsed strictly (a malformed value is an InvalidArgument naming the knob), and
// the set knobs listed for benchmark metadata.
#include <cstdlib>
#include <set>
#include <string>

#include "common/testing.hpp"
#include "switchyard/errors.hpp"
#include "util/env_knobs.hpp"

using namespace switchyard;
using util::Knob;

SY_TEST(EnvKnobs, RegistryIsSmallDocumentedAndInOrder) {
    const auto& registry = util::knob_registry();
    SY_CHECK(registry.size() == size_t(Knob::kCount));
    SY_CHECK(registry.size() <= 12);
    std::set<std::string> names;
    for (size_t i = 0; i < registry.size(); ++i) {
        SY_CHECK(size_t(registry[i].knob) == i);
        SY_CHECK(std::string(registry[i].name).rfind("SWITCHYARD_", 0) == 0);
        SY_CHECK(std::string(registry[i].doc).size() > 10);
        SY_CHECK(names.insert(registry[i].name).second);
    }
}

SY_TEST(EnvKnobs, FlagsParseStrictly) {
    const char* name = util::knob_info(Knob::kJitDumpPtx).name;
    unsetenv(name);
    SY_CHECK(!util::knob_flag(Knob::kJitDumpPtx));
    setenv(name, "", 1);
    SY_CHECK(!util::knob_flag(Knob::kJitDumpPtx));
    for (const char* on : {"1", "true", "yes", "on"}) {
        setenv(name, on, 1);
        SY_CHECK(util::knob_flag(Knob::kJitDumpPtx));
    }
    for (const char* off : {"0", "false", "no", "off"}) {
        setenv(name, off, 1);
        SY_CHECK(!util::knob_flag(Knob::kJitDumpPtx));
    }
    setenv(name, "maybe", 1);
    SY_CHECK_THROWS_WITH(util::knob_flag(Knob::kJitDumpPtx), InvalidArgument, "SWITCHYARD_JIT_DUMP_PTX='maybe'");
    unsetenv(name);
}

SY_TEST(EnvKnobs, IntegersParseStrictlyWithinTheirRange) {
    const char* name = util::knob_info(Knob::kEmulatedNodes).name;
    unsetenv(name);
    SY_CHECK_EQ(util::knob_int(Knob::kEmulatedNodes, 0), int64_t(0));
    setenv(name, "4", 1);
    SY_CHECK_EQ(util::knob_int(Knob::kEmulatedNodes, 0), int64_t(4));
    for (const char* bad : {"abc", "3x", "0", "-2"}) {
        setenv(name, bad, 1);
        SY_CHECK_THROWS_WITH(util::knob_int(Knob::kEmulatedNodes, 0), InvalidArgument, "SWITCHYARD_EMULATED_NODES");
    }
    unsetenv(name);
}

SY_TEST(EnvKnobs, SetKnobsAreListed) {
    const char* name = util::knob_info(Knob::kTrace).name;
    setenv(name, "1", 1);
    bool found = false;
    for (const auto& [knob, value] : util::knobs_set()) found = found || (knob == name && value == "1");
    SY_CHECK(found);
    unsetenv(name);
    for (const auto& [knob, value] : util::knobs_set()) SY_CHECK(knob != name);
}

SY_TEST_MAIN()
