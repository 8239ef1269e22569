// The network's device code compiles for both backends: the network check kernel family
// (transport/net_check.cuh), the barrier across nodes (transport/net_barrier.cuh) and the engine's
// copy kernel (transport/net_copy.cuh) for the emulated network through NVRTC, and for NCCL GIN,
// with the library's GIN set-up kernels, through the nvcc path against the NCCL headers the library
// was built with (skipped, saying why, where nvcc or those headers are missing). No spills.
#include <cstdio>
#include <set>
#include <string>

#include "common/testing.hpp"
#include "jit/jit.hpp"
#include "jit/nvcc_program.hpp"
#include "launch/hier_launch.hpp"
#include "launch/kernel_catalog.hpp"
#include "net/gin_kernels.hpp"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/net_barrier.cuh"
#include "switchyard/transport/net_copy.cuh"
#include "switchyard/errors.hpp"

using namespace switchyard;

namespace {

jit::KernelSource check_source(const std::string& backend) {
    return net::network_check_catalog()[backend == "Gin" ? 1 : 0];
}

}  // namespace

SY_TEST(NetKernels, EmulatedCheckCompilesWithNvrtc) {
    jit::CompileOptions options;
    options.arch = "sm_90a";
    const jit::CompiledKernel compiled = jit::compile(check_source("Emulated"), options);
    std::printf("  net_check_kernel<NetEmulated> sm_90a: %d registers, %d spill bytes%s\n",
                compiled.num_registers, compiled.spill_bytes, compiled.cache_hit ? " (cache hit)" : "");
    SY_CHECK(compiled.cubin.size() > 4);
    SY_CHECK_EQ(compiled.spill_bytes, 0);
}

// The emulated network engine's copy kernel: no spills, and registers few enough for the blocks per
// SM the engine sizes its launches by (device::kNetCopyBlocksPerSm).
SY_TEST(NetKernels, EngineCopyKernelCompilesWithNvrtc) {
    jit::CompileOptions options;
    options.arch = "sm_90a";
    const jit::KernelSource source = net::network_engine_catalog()[0];
    const jit::CompiledKernel compiled = jit::compile(source, options);
    std::printf("  %s sm_90a: %d registers, %d spill bytes%s\n", source.kernel.c_str(),
                compiled.num_registers, compiled.spill_bytes, compiled.cache_hit ? " (cache hit)" : "");
    SY_CHECK(compiled.cubin.size() > 4);
    SY_CHECK_EQ(compiled.spill_bytes, 0);
    SY_CHECK(compiled.num_registers * device::kNetCopyThreads * device::kNetCopyBlocksPerSm <= 65536);
}

SY_TEST(NetKernels, GinUnderNvrtcStopsWithAClearMessage) {
    // NetGin's definitions need the NCCL headers, which only the nvcc path provides.
    jit::CompileOptions options;
    options.arch = "sm_90a";
    SY_CHECK_THROWS_WITH(jit::compile(check_source("Gin"), options), CompileError,
                         "this network backend is not compiled in");
}

namespace {

// The nvcc path's toolchain, or a skip that says what is missing.
const jit::NvccToolchain& toolchain_or_skip() {
    try {
        return jit::nvcc_toolchain();
    } catch (const UnsupportedError& error) {
        SY_SKIP(std::string("the GIN kernels cannot be compiled on this machine: ") + error.what());
    }
}

void compile_with_nvcc(const jit::KernelSource& source, const char* arch) {
    jit::CompileOptions options = net::gin_compile_options();
    options.arch = arch;
    const jit::CompiledKernel compiled = jit::compile(source, options);
    std::printf("  %s %s (nvcc): %d registers, %d spill bytes, entry %s%s\n", source.kernel.c_str(), arch,
                compiled.num_registers, compiled.spill_bytes, compiled.lowered_name.c_str(),
                compiled.cache_hit ? " (cache hit)" : "");
    SY_CHECK(compiled.cubin.size() > 4 && compiled.cubin.compare(0, 4,
                                                                 "\x7f"
                                                                 "ELF") == 0);
    SY_CHECK(!compiled.lowered_name.empty());
    SY_CHECK_EQ(compiled.spill_bytes, 0);
    // A second compile of the same source is a cache hit under the nvcc path's own key.
    SY_CHECK(jit::compile(source, options).cache_hit);
}

}  // namespace

SY_TEST(NetKernels, GinCheckCompilesWithNvcc) {
    const jit::NvccToolchain& toolchain = toolchain_or_skip();
    std::printf("  nvcc %s (%s), NCCL headers %s (version code %d)\n", toolchain.nvcc.c_str(),
                toolchain.version.c_str(), toolchain.nccl_include.c_str(), toolchain.nccl_version_code);
    compile_with_nvcc(check_source("Gin"), "sm_90a");
}

SY_TEST(NetKernels, GinSetupKernelsCompileWithNvcc) {
    toolchain_or_skip();
    for (const jit::KernelSource& source : net::gin_setup_catalog()) compile_with_nvcc(source, "sm_90a");
}

SY_TEST(NetKernels, HierarchicalGinKernelsCompileWithNvcc) {
    // One GIN instantiation of each hierarchical HT family (their emulated twins compile with the
    // catalog, KernelFamilies.CompileForSm90aWithoutSpills).
    toolchain_or_skip();
    std::set<std::string> families;
    for (const jit::KernelSource& source : launch::hier_gin_catalog({}))
        if (families.insert(source.family).second) compile_with_nvcc(source, "sm_90a");
    SY_CHECK_EQ(families.size(), size_t(2));
}

SY_TEST(NetKernels, BarrierAcrossNodesOnGinCompilesWithNvcc) {
    // Buffer::barrier of a buffer spanning hosts (its emulated twin compiles with the catalog).
    toolchain_or_skip();
    const auto catalog = launch::barrier_gin_catalog();
    SY_CHECK_EQ(catalog.size(), size_t(1));
    compile_with_nvcc(catalog[0], "sm_90a");
}

// The barrier's signal ids: one per source node, between the HT kernels' and the LL kernels', and
// the LL kernels' right under the network check's reserved ones.
SY_TEST(NetKernels, BarrierSignalIdsSitBetweenTheHtAndLlRanges) {
    using namespace switchyard::device;
    SY_CHECK(uint32_t(kHierSignalIdLimit) <= net_barrier_signal(0));
    SY_CHECK(net_barrier_signal(kNetBarrierMaxNodes - 1) < kLlNetSignalBase);
    SY_CHECK_EQ(kLlNetSignalBase + 4u * uint32_t(kLlNetMaxNodes), uint32_t(kNetNumSignals) - kNetCheckIds);
    SY_CHECK(kNetBarrierMaxNodes >= kNetCheckMaxNodes);
}

SY_TEST(NetKernels, HierarchicalKernelsOnGinStopUnderNvrtc) {
    // The GIN instantiations need the nvcc path; under NVRTC they stop with the backend's message.
    jit::CompileOptions options;
    options.arch = "sm_90a";
    SY_CHECK_THROWS_WITH(jit::compile(launch::hier_gin_catalog({})[0], options), CompileError,
                         "this network backend is not compiled in");
}

SY_TEST(NetKernels, EntrySymbolIsFoundByName) {
    // Two kernels in one cubin (the GIN set-up family): each is found by its own name.
    toolchain_or_skip();
    jit::CompileOptions options = net::gin_compile_options();
    options.arch = "sm_90a";
    const auto catalog = net::gin_setup_catalog();
    const jit::CompiledKernel first = jit::compile(catalog[0], options);
    const jit::CompiledKernel second = jit::compile(catalog[1], options);
    SY_CHECK(first.lowered_name != second.lowered_name);
    SY_CHECK_EQ(jit::find_entry_symbol(first.cubin, catalog[1].kernel), second.lowered_name);
    SY_CHECK(jit::find_entry_symbol("not an elf", "x").empty());
}

SY_TEST_MAIN()
