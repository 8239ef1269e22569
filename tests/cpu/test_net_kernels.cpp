// The network's device code compiles for both backends: the self-test kernel family (tests/kernels/
// switchyard/testing/net_selftest.cuh) for the emulated network through NVRTC, without spills.
#include <cstdio>
#include <string>

#include "common/testing.hpp"
#include "jit/jit.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;

namespace {

jit::KernelSource selftest_source(const std::string& backend) {
    return {"net_selftest_" + backend, "switchyard/testing/net_selftest.cuh",
            "switchyard::device::net_selftest_kernel<switchyard::device::Net" + backend + ">"};
}

}  // namespace

SY_TEST(NetKernels, EmulatedSelftestCompilesWithNvrtc) {
    jit::CompileOptions options;
    options.arch = "sm_90a";
    const jit::CompiledKernel compiled = jit::compile(selftest_source("Emulated"), options);
    std::printf("  net_selftest<NetEmulated> sm_90a: %d registers, %d spill bytes%s\n", compiled.num_registers,
                compiled.spill_bytes, compiled.cache_hit ? " (cache hit)" : "");
    SY_CHECK(compiled.cubin.size() > 4);
    SY_CHECK_EQ(compiled.spill_bytes, 0);
}

SY_TEST(NetKernels, GinUnderNvrtcStopsWithAClearMessage) {
    // NetGin's definitions need the NCCL headers, which only the nvcc path provides.
    jit::CompileOptions options;
    options.arch = "sm_90a";
    SY_CHECK_THROWS_WITH(jit::compile(selftest_source("Gin"), options), CompileError,
                         "this network backend is not compiled in");
}

SY_TEST_MAIN()
