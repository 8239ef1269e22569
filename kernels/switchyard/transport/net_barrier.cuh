// Cross-rank barrier of a buffer whose ranks span nodes (one block; Buffer::barrier).
//
// Each rank adds one to its barrier signal at its rail peer on every other node (a bare signal on
// the network, no pointer into another node's memory) and waits until each rail peer's signal here
// reaches this barrier's sequence; then it meets the ranks of its node over NVLink
// (transport/barrier.cuh). A rank leaves once every rank of its node has heard from its rail peers,
// so once every rank of every node has arrived. The sequence is the buffer's barrier counter (the
// same one the one-node barrier advances), kept on the device: a captured graph replays correctly,
// and reset() zeroes the counter and the network's signals together. A rail peer that never signals
// ends in an error record naming it, its node, the network and the phase "barrier".
//
// Signal ids: kNetBarrierSignalBase + source node (transport/net_types.cuh), on context
// kNetBarrierContext. A signal on a context lands after every earlier put of that context to the
// same peer, so the barrier also orders the HT puts before it.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/transport/barrier.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

constexpr int32_t kNetBarrierContext = 0;
SY_HOST_DEVICE constexpr uint32_t net_barrier_signal(int32_t source_node) {
    return kNetBarrierSignalBase + uint32_t(source_node);
}

template <class Backend>
struct NetBarrierArgs {
    BarrierArgs node;  // this node's ranks over NVLink: [first_peer, first_peer + num_peers)
    typename Backend::Context net;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <class Backend, int kNumThreads>
__global__ void __launch_bounds__(kNumThreads, 1)
    net_barrier_kernel(const __grid_constant__ NetBarrierArgs<Backend> args) {
    const NetPort<Backend> port(args.net, kNetBarrierContext, args.node.diagnostics);
    barrier_detail::run_barrier<kNumThreads>(args.node, [&](uint64_t sequence) {
        // This rank's earlier kernels' writes are visible before its signals say it arrived.
        ptx::fence_acq_rel_sys();
        bool ok = true;
        for (int32_t peer_node = threadIdx.x; ok && peer_node < port.num_nodes(); peer_node += kNumThreads)
            if (peer_node != port.node())
                ok = port.signal(peer_node, net_signal_add(net_barrier_signal(port.node()), 1));
        for (int32_t peer_node = threadIdx.x; ok && peer_node < port.num_nodes(); peer_node += kNumThreads)
            if (peer_node != port.node())
                ok = port.wait_signal(net_barrier_signal(peer_node), sequence, peer_node, kPhaseBarrier);
        return ok;
    });
}

#endif

}  // namespace switchyard::device
