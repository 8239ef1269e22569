// Launcher of the cross-rank barrier kernel.
#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/transport/barrier.cuh"

namespace switchyard::launch {

namespace {
constexpr int kBarrierThreads = 128;

const jit::CachedKernel& cached_barrier() {
    static const jit::CachedKernel cached(
        {"barrier", "switchyard/transport/barrier.cuh",
         "switchyard::device::barrier_kernel<" + std::to_string(kBarrierThreads) + ">"});
    return cached;
}
}  // namespace

void preload_barrier(int device) {
    cached_barrier().get(device);
}

void launch_barrier(const LaunchContext& context) {
    const jit::Kernel& kernel = cached_barrier().get(context.device);
    device::BarrierArgs args{};
    args.peer_bases = context.peer_bases;
    args.peer_table_digest = context.peer_table_digest;
    args.local_base = context.local_base;
    args.workspace = context.layout.workspace;
    args.rank = context.rank;
    args.num_ranks = context.num_ranks;
    args.diagnostics = context.diagnostics;
    jit::LaunchConfig config;
    config.block[0] = kBarrierThreads;
    config.stream = context.stream;
    jit::launch(kernel, config, &args, sizeof(args));
}

std::vector<jit::KernelSource> barrier_catalog() {
    return {cached_barrier().source()};
}

}  // namespace switchyard::launch
