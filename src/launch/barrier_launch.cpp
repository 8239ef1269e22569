// Launchers of the cross-rank barrier kernels: the one-node barrier over NVLink
// (transport/barrier.cuh) and, for a buffer spanning nodes, the barrier that meets the rail peers
// over the network first (transport/net_barrier.cuh), on the emulated network (NVRTC) or GIN (nvcc
// against the NCCL headers).
#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "net/gin_kernels.hpp"
#include "net/network.hpp"
#include "switchyard/transport/barrier.cuh"
#include "switchyard/transport/net_barrier.cuh"

namespace switchyard::launch {

namespace {
constexpr int kBarrierThreads = 128;

const jit::CachedKernel& cached_barrier() {
    static const jit::CachedKernel cached(
        {"barrier", "switchyard/transport/barrier.cuh",
         "switchyard::device::barrier_kernel<" + std::to_string(kBarrierThreads) + ">"});
    return cached;
}

const jit::CachedKernel& cached_net_barrier(bool gin) {
    auto source = [](bool on_gin) {
        return jit::KernelSource{"net_barrier", "switchyard/transport/net_barrier.cuh",
                                 std::string("switchyard::device::net_barrier_kernel<switchyard::device::") +
                                     (on_gin ? "NetGin" : "NetEmulated") + ", " +
                                     std::to_string(kBarrierThreads) + ">"};
    };
    static const jit::CachedKernel on_emulated(source(false));
    static const jit::CachedKernel on_gin(source(true), net::gin_compile_options());
    return gin ? on_gin : on_emulated;
}

// The one-node barrier's arguments: every rank of the buffer, or this node's of a buffer spanning
// nodes.
device::BarrierArgs barrier_args(const LaunchContext& context) {
    device::BarrierArgs args{};
    args.peer_bases = context.peer_bases;
    args.peer_table_digest = context.peer_table_digest;
    args.local_base = context.local_base;
    args.workspace = context.layout.workspace;
    args.rank = context.rank;
    args.num_ranks = context.num_ranks;
    args.first_peer = 0;
    args.num_peers = context.num_ranks;
    if (context.network) {
        const comm::NodeLayout& nodes = context.network->layout();
        args.first_peer = nodes.node * nodes.ranks_per_node;
        args.num_peers = nodes.ranks_per_node;
    }
    args.diagnostics = context.diagnostics;
    return args;
}

// One block on the op's stream.
jit::LaunchConfig barrier_config(const LaunchContext& context) {
    jit::LaunchConfig config;
    config.block[0] = kBarrierThreads;
    config.stream = context.stream;
    return config;
}

template <class Backend>
void launch_net_barrier(const LaunchContext& context, const typename Backend::Context& net, bool gin) {
    device::NetBarrierArgs<Backend> args{};
    args.node = barrier_args(context);
    args.net = net;
    jit::launch(cached_net_barrier(gin).get(context.device), barrier_config(context), args);
}

}  // namespace

void preload_barrier(int device, bool nodes) {
    cached_barrier().get(device);
    if (nodes) cached_net_barrier(false).get(device);  // ranks sharing a GPU: the emulated network
}

void launch_barrier(const LaunchContext& context) {
    if (!context.network)
        jit::launch(cached_barrier().get(context.device), barrier_config(context), barrier_args(context));
    else if (context.network->kind() == net::NetworkKind::kGin)
        launch_net_barrier<device::NetGin>(context, context.network->gin_context(), true);
    else
        launch_net_barrier<device::NetEmulated>(context, context.network->emulated_context(), false);
}

std::vector<jit::KernelSource> barrier_catalog() {
    return {cached_barrier().source(), cached_net_barrier(false).source()};
}

std::vector<jit::KernelSource> barrier_gin_catalog() {
    return {cached_net_barrier(true).source()};
}

}  // namespace switchyard::launch
