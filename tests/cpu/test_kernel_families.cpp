// Every kernel family compiles through the JIT for sm_90a (one instantiation each, to keep CI's
// two cores busy for seconds, not minutes) with no register spills.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "jit/jit.hpp"

using namespace switchyard;

namespace {

const std::vector<jit::KernelSource>& families() {
    static const std::vector<jit::KernelSource> sources = {
        {"barrier", "switchyard/transport/barrier.cuh", "switchyard::device::barrier_kernel<128>"},
        {"dispatch_layout", "switchyard/routing/routing_kernel.cuh",
         "switchyard::device::routing_kernel<long long>"},
        {"ht_dispatch", "switchyard/ht/dispatch.cuh", "switchyard::device::ht_dispatch_kernel"},
        {"ht_receive", "switchyard/ht/receive.cuh", "switchyard::device::ht_receive_kernel"},
        {"ht_combine", "switchyard/ht/combine.cuh", "switchyard::device::ht_combine_kernel<true>"},
        {"peer_store", "switchyard/testing/peer_store.cuh", "switchyard::device::peer_store_kernel"},
        {"coresidency_probe", "switchyard/testing/coresidency_probe.cuh",
         "switchyard::device::coresidency_probe_kernel"},
        {"ll_dispatch", "switchyard/ll/dispatch.cuh",
         "switchyard::device::ll_dispatch_kernel<8, 7168, 8, 1, long long, 3, false>"},
        {"ll_combine", "switchyard/ll/combine.cuh",
         "switchyard::device::ll_combine_kernel<8, 7168, 8, long long, 3, false, false>"},
    };
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
    const jit::CompiledKernel compiled = jit::compile(families()[1], options);
    SY_CHECK(compiled.cubin.size() > 4);
}

SY_TEST_MAIN()
