// Every kernel family compiles through the JIT for sm_90a (one instantiation each, to keep CI's
// two cores busy for seconds, not minutes) with no register spills.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"

using namespace switchyard;

namespace {

// The first instantiation of each family in the launchers' catalog, and the tests' own kernels.
std::vector<jit::KernelSource> families() {
    std::vector<jit::KernelSource> sources;
    for (const jit::KernelSource& source : launch::kernel_catalog()) {
        bool seen = false;
        for (const auto& known : sources) seen = seen || known.family == source.family;
        if (!seen) sources.push_back(source);
    }
    sources.push_back({"peer_store", "switchyard/testing/peer_store.cuh", "switchyard::device::peer_store_kernel"});
    sources.push_back({"coresidency_probe", "switchyard/testing/coresidency_probe.cuh",
                       "switchyard::device::coresidency_probe_kernel"});
    return sources;
}

}  // namespace

SY_TEST(KernelFamilies, CompileForSm90aWithoutSpills) {
    for (const auto& source : families()) {
        jit::CompileOptions options;
        options.arch = "sm_90a";
        const jit::CompiledKernel compiled = jit::compile(source, options);
        std::printf("  %-20s %s: %d registers, %d spill bytes, %d stack bytes%s\n", source.family.c_str(),
                    options.arch.c_str(), compiled.num_registers, compiled.spill_bytes, compiled.stack_bytes,
                    compiled.cache_hit ? " (cache hit)" : "");
        SY_CHECK(compiled.cubin.size() > 4 && compiled.cubin.compare(0, 4,
                                                                     "\x7f"
                                                                     "ELF") == 0);
        SY_CHECK_MSG(compiled.spill_bytes == 0,
                     source.family << " spills " << compiled.spill_bytes << " bytes");
    }
}

SY_TEST(KernelFamilies, CompileForSm100a) {
    // One family is enough to show the headers are not Hopper-only.
    jit::CompileOptions options;
    options.arch = "sm_100a";
    const jit::CompiledKernel compiled = jit::compile(launch::routing_catalog()[0], options);
    SY_CHECK(compiled.cubin.size() > 4);
}

SY_TEST_MAIN()
