// What the LL kernels across nodes signal (ll/net_layout.cuh says who writes what where): arrivals
// at the ranks of this node (NVLink, as transport/ll_arrivals.cuh), the election of the block that
// issues an op's network signals, the gateway's relay of a source's network signal to its node,
// and the waits for sources on this node and on others, with masking.
//
// Masking across nodes. A rank masks what it could not hear from: a source of this node whose
// arrivals did not come; in the dispatch, a source of another node whose relayed arrival did not
// come; in the combine, every rank of another node whose forwarder's signal did not come (their
// contributions reach this home only through it), and the ranks the forwarder's header leaves out.
// Each op's outputs are then those of the reference without the ranks this rank masked.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_arrivals.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Stages of the combine's decisions in masking mode (LlSignalLayout::net_decided).
enum LlNetStage : int32_t {
    kLlNetStageForwardReady = 0,  // which node-mates' forward areas this op may write
    kLlNetStageRemote = 1,        // which ranks of other nodes contributed to this home
};

// ll_arrive, to the unmasked ranks of this node only (the others are not in the peer table).
SY_DEVICE void ll_net_arrive_local(const LlSignalArgs& buffer, const LlNodes& nodes, int32_t kind,
                                   uint64_t sequence, int32_t sending_blocks, const uint32_t* shared_mask) {
    __syncthreads();
    const int32_t set = ll_set_of(sequence);
    for (int g = threadIdx.x; g < nodes.ranks_per_node; g += blockDim.x) {
        const int32_t q = nodes.rank_of(nodes.node, g);
        if (shared_mask[q]) continue;
        uint64_t* counters =
            buffer.signals.arrivals(buffer.workspace.ll_signals(buffer.peer_bases[q]), kind, set);
        ptx::fence_acq_rel_sys();
        ptx::red_add_relaxed_sys(counters + buffer.rank, ll_arrival_amount(blockIdx.x, sending_blocks));
    }
    if (blockIdx.x == 0) {
        __syncthreads();
        if (threadIdx.x == 0)
            ptx::st_relaxed_sys(buffer.workspace.counters(buffer.local_base) + ll_start_slots(kind).arrived,
                                sequence);
    }
}

// Each of the `participants` first blocks, all threads: true (in every thread) in the last block
// to get here, which then issues what needs every block's work done (an op's network signals: one
// per destination instead of one per block). The writes of every participant before the call
// happen before what the last block does after it (system fences around a GPU-scope counter).
// Resets the counter.
SY_DEVICE bool ll_net_last_block(const LlSignalArgs& buffer, int32_t counter_slot, int32_t participants) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t* counter = buffer.workspace.counters(buffer.local_base) + counter_slot;
        ptx::fence_acq_rel_sys();
        last = atomicAdd(reinterpret_cast<unsigned long long*>(counter), 1ull) == uint64_t(participants) - 1;
        if (last) {
            ptx::fence_acq_rel_sys();
            *counter = 0;
        }
    }
    __syncthreads();
    return last != 0;
}

// A bounded wait on this rank's network signal `id` that records no error (masking mode): false
// on timeout or when the buffer is poisoned.
template <class Backend>
SY_DEVICE bool ll_net_wait_quiet(const NetPort<Backend>& port, uint32_t id, uint64_t target,
                                 const Diagnostics& diagnostics) {
    if (port.read_signal(id) >= target) return true;
    const uint64_t start = ptx::globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
        if (port.read_signal(id) >= target) return true;
        if ((spin & 63u) == 0) {
            if (is_poisoned(diagnostics)) return false;
            if (ptx::globaltimer_ns() - start > diagnostics.timeout_ns) return false;
        }
    }
}

// A network signal of op `sequence`: complete once it reached ll_arrival_target(sequence). Waits
// with masking (quietly: false on timeout) or reports a timeout naming `phase` and the node.
template <class Backend>
SY_DEVICE bool ll_net_wait_signal(const NetPort<Backend>& port, bool masking, uint32_t id, uint64_t sequence,
                                  int32_t source_node, int32_t phase, const Diagnostics& diagnostics) {
    const uint64_t target = ll_arrival_target(sequence);
    return masking ? ll_net_wait_quiet(port, id, target, diagnostics)
                   : port.wait_signal(id, target, source_node, phase);
}

// The gateway's relay (dispatch receive half; one warp, a lane per other node o): waits for the
// dispatch signal of op `sequence` from this rank's rail peer on node m, then adds a whole op to
// that source's arrival counter at every rank of this node its header names present. A source
// this rank has masked is not waited for (its node-mates then mask it too). False when the op
// failed (timeout without masking, or a poisoned buffer).
template <class Backend>
SY_DEVICE bool ll_net_relay_one(const LlSignalArgs& buffer, const LlNetArgs<Backend>& net,
                                const LlSetLayout& set_layout, uint8_t* own_set_base, uint64_t sequence,
                                const uint32_t* shared_mask, int32_t o) {
    const LlNodes& nodes = net.nodes;
    const int32_t m = nodes.other_node(o), source = nodes.rank_of(m, nodes.local_index);
    if (shared_mask[source]) return true;
    const NetPort<Backend> port(net.net, ll_net_context(net.net.num_contexts), buffer.diagnostics);
    const int32_t set = ll_set_of(sequence);
    if (!ll_net_wait_signal(port, buffer.mask_unresponsive != 0, ll_net_signal(kLlDispatch, set, m), sequence,
                            m, kPhaseLlDispatch, buffer.diagnostics))
        return buffer.mask_unresponsive != 0 && !is_poisoned(buffer.diagnostics);
    const int32_t* header = set_layout.node_header(own_set_base, o);
    const int32_t L = set_layout.max_local_experts, T = set_layout.max_tokens;
    ptx::fence_acq_rel_sys();  // the signal's acquire made the landed data ours: pass it on
    for (int32_t g = 0; g < nodes.ranks_per_node; ++g) {
        if (header[ll_node_header_rank(g, L, T) + kLlNodeHeaderPresent] == 0) continue;
        uint64_t* counters = buffer.signals.arrivals(
            buffer.workspace.ll_signals(buffer.peer_bases[nodes.rank_of(nodes.node, g)]), kLlDispatch, set);
        ptx::red_add_relaxed_sys(counters + source, kLlNetOpAmount);
    }
    return true;
}

template <class Backend>
SY_DEVICE void ll_net_relay(const LlSignalArgs& buffer, const LlNetArgs<Backend>& net,
                            const LlSetLayout& set_layout, uint8_t* own_set_base, uint64_t sequence,
                            const uint32_t* shared_mask) {
    for (int32_t o = int32_t(ptx::lane_id()); o < net.nodes.others(); o += 32)
        if (!ll_net_relay_one(buffer, net, set_layout, own_set_base, sequence, shared_mask, o)) return;
}

// A timeout's details about a source on another node: its data comes relayed by a node-mate, so
// nothing of its memory is read (kernels see only their node).
SY_DEVICE NetTimeoutDetails ll_net_relay_details(int32_t source_node, int32_t context) {
    return NetTimeoutDetails{source_node, -1, context, kNetWaitRelay};
}

// ll_wait_sources across nodes: the sources `selected(s)` picks, those of this node waited for
// directly, those of other nodes as their gateway relayed them (ll_wait_selected_sources).
template <typename Selected>
SY_DEVICE bool ll_net_wait_sources(const LlSignalArgs& buffer, const LlNodes& nodes, int32_t net_context,
                                   int32_t kind, uint64_t sequence, const uint32_t* shared_mask,
                                   uint32_t* shared_present, int64_t* wait_time_stats, uint64_t* decided,
                                   Selected selected) {
    return ll_wait_selected_sources(
        buffer, kind, sequence, shared_mask, shared_present, wait_time_stats, decided, selected,
        [&](int32_t s) {
            if (nodes.on_my_node(s))
                ll_wait_arrivals(buffer, kind, sequence, s, ll_peer_details(buffer, kind, s));
            else
                ll_wait_arrivals(buffer, kind, sequence, s,
                                 ll_net_relay_details(nodes.node_of(s), net_context));
        });
}

#endif

}  // namespace switchyard::device
