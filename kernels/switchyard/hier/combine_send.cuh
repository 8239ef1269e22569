// Hierarchical HT combine, the contributing role (hier/combine.cuh composes the roles):
//
//  enter_combine        a combine right after a dispatch needs no handshake (every rank it writes
//                       into has entered that dispatch, so it finished its earlier ops); otherwise
//                       every rank announces its entry to the ranks of its node (NVLink) and to its
//                       rail peers (a network signal) and waits for theirs. Then, in a flat weighted
//                       combine, block 0 sends this home's top-k weights to its rail peers;
//  send_contributions   each received row goes back over NVLink to the rank of this node that
//                       forwarded its token here (the source's rail peer in this node), into that
//                       forwarder's stage at the token's stream slot: rank-major rows whole (slot:
//                       this rank's index in the node), expert-major rows per k (flat; slot k) or
//                       reduced over this rank's k first and rounded to bf16 once (hierarchical);
//                       the direct path's publisher warp raises the forwarders' arrival counters.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ht/combine_publish.cuh"
#include "switchyard/ht/combine_send.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// Combine arrival chunks of a stream: a forwarder's arrival counter of (source node, chunk) is
// chunk `node * chunks_per_node + slot / kHtCombineChunkTokens` of the workspace's arrays.
SY_DEVICE int32_t combine_chunks_per_node(const HtCommon& c) {
    return int32_t(ceil_div(c.max_tokens, kHtCombineChunkTokens));
}
// The "token" whose chunk is that chunk (what the publisher queue takes).
SY_DEVICE int32_t arrival_key(const HtCommon& c, int32_t node, int32_t slot) {
    return node * combine_chunks_per_node(c) * kHtCombineChunkTokens + slot;
}

// Block 0, all threads, when the combine's weights travel: this home's [T, K] weights into the
// buffer, then thread 0 puts them to each rail peer with the weights signal (`put`).
template <class Backend>
SY_DEVICE void send_home_weights(const HierCombineArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                                 int32_t topk) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    float* weights = reinterpret_cast<float*>(c.local_base + h.weights_send(0, topk));
    for (int i = threadIdx.x; i < c.num_tokens * topk; i += blockDim.x)
        weights[i] = args.ht.home_weights[int64_t(i / topk) * args.ht.home_weights_stride + i % topk];
    __syncthreads();  // written before thread 0 puts them (contract 5)
    if (threadIdx.x != 0) return;
    const uint64_t bytes = uint64_t(c.num_tokens) * topk * 4;
    for (int32_t m = 0; m < op.num_nodes; ++m) {
        if (m == op.node) continue;
        const NetSignal signal = net_signal_add(h.signals().home_weights(op.node), 1);
        const bool sent = bytes > 0 ? port.put(m, uint64_t(h.weights_recv(op.node, 0, topk)),
                                               uint64_t(h.weights_send(0, topk)), bytes, signal,
                                               net_counter_inc(kHierCombineSourceCounter))
                                    : port.signal(m, signal);
        if (!sent) return;
    }
}

// Every thread: the combine's entry (see the file comment). `handshake`: whether it announced
// itself. False when a wait failed (reported).
template <class Backend>
SY_DEVICE bool enter_combine(const HierCombineArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                             const uint64_t* counters, int32_t topk, bool& handshake) {
    const HtCommon& c = args.ht.common;
    const WorkspaceLayout& ws = c.layout.workspace;
    __shared__ int ok;
    if (threadIdx.x == 0) ok = 1;
    handshake = counters[kCounterHtLastDispatch] + 1 != op.sequence;
    if (handshake) {
        if (blockIdx.x == 0 && !is_poisoned(c.diagnostics)) {
            for (int g = threadIdx.x; g < op.ranks_per_node; g += blockDim.x)
                ptx::st_release_sys(ws.ht_combine_entry(c.peer_bases[op.rank_of(op.node, g)]) + c.rank, op.sequence);
            if (threadIdx.x == 0)
                for (int32_t m = 0; m < op.num_nodes; ++m)
                    if (m != op.node && !port.signal(m, net_signal_add(c.layout.hier.signals().combine_entry(op.node), 1)))
                        ok = 0;
        }
        __syncthreads();
        const int t = int(threadIdx.x);
        if (t < op.ranks_per_node) {
            const int q = op.rank_of(op.node, t);
            if (!wait_for_sequence(ws.ht_combine_entry(c.local_base) + q, op.sequence, c.diagnostics, kPhaseHtCombine,
                                   q, node_peer_details(c, q)))
                ok = 0;
        } else if (t < op.ranks_per_node + op.num_nodes && t - op.ranks_per_node != op.node) {
            const int32_t m = t - op.ranks_per_node;
            if (!wait_signal_exact(port, c.diagnostics, c.layout.hier.signals().combine_entry(m),
                                   counters[kCounterHierCombineEntries] + 1, m, kPhaseHierEntry))
                ok = 0;
        }
    }
    // Before this op rewrites its sources (the weights below, the partials later): the previous
    // combine's puts have read theirs (HierSources).
    if (threadIdx.x == 0 && !combine_sources().wait_read(port, counters)) ok = 0;
    __syncthreads();
    const bool entered = ok != 0;
    if (entered && args.weights_travel && blockIdx.x == 0) send_home_weights(args, op, port, topk);
    return entered;
}

// One received row `row` from source rank `source` (its token at stream slot `slot`) to the
// forwarder's stage. Returns the records written (the forwarder's arrival count for them).
template <typename Shape, class Backend>
SY_DEVICE int send_contribution(const HierCombineArgs<Backend>& args, const HierOp& op, int64_t row, int source,
                                int slot) {
    constexpr int kTopk = Shape::kTopk;
    const HtCombineArgs& ht = args.ht;
    const RecordLayout r = Shape::record();
    const int lane = int(ptx::lane_id());
    uint8_t* forwarder = ht.common.peer_bases[op.rank_of(op.node, source % op.ranks_per_node)];
    const HierLayout& h = ht.common.layout.hier;
    auto stage = [&](int contribution) {
        return forwarder + h.stage(source / op.ranks_per_node, slot, contribution, r.total_bytes);
    };
    if constexpr (Shape::kMode == kHtCombineRankMajor) {
        uint8_t* destination = stage(op.local_index);
        ht_detail::copy_row_to<Shape>(destination, ht.y + row * ht.y_row_stride_bytes);
        if (lane < kTopk)
            reinterpret_cast<float*>(destination + r.meta_offset)[lane] =
                ht.row_weights ? ht.row_weights[row * ht.row_weights_stride + lane] : 0.0f;
        return 1;
    } else if constexpr (Shape::kMode == kHtCombineExpertFlat) {
        int written = 0;
        for (int k = 0; k < kTopk; ++k) {
            const int32_t expert_row = ht.row_expert_row[row * kTopk + k];
            if (expert_row < 0) continue;
            uint8_t* destination = stage(k);
            ht_detail::copy_row_to<Shape>(destination, ht.y + int64_t(expert_row) * ht.y_row_stride_bytes);
            if (lane < kTopk)
                reinterpret_cast<float*>(destination + r.meta_offset)[lane] =
                    lane == k && ht.row_weights ? ht.row_weights[int64_t(expert_row) * ht.row_weights_stride] : 0.0f;
            ++written;
        }
        return written;
    } else {
        uint8_t* destination = stage(op.local_index);
        ht_detail::reduce_own_rows_to<Shape>(ht, row, destination);
        if (lane < kTopk) {
            const int32_t expert_row = ht.row_expert_row[row * kTopk + lane];
            reinterpret_cast<float*>(destination + r.meta_offset)[lane] =
                expert_row >= 0 && ht.row_weights ? ht.row_weights[int64_t(expert_row) * ht.row_weights_stride] : 0.0f;
        }
        return 1;
    }
}

// The received rows in the order they are sent, in groups of at most kGroup rows of one source:
// first the rows from other nodes' sources (their partials cross the network, so they go first), a
// group of each such source in turn (so every rail's forwarder, and its stream to its home, starts
// at once: one source after another would leave the later rails' network idle for much of the op);
// then, the same way, the rows of this node's own sources (their partials stay in the node).
template <int kGroup>
struct ContributionGroups {
    const int32_t* row_offsets;  // [R + 1] rank-major rows of each source
    int32_t node, ranks_per_node;
    int32_t remote_sources, remote_rounds, own_rounds;  // rounds: groups of the longest source

    SY_DEVICE static ContributionGroups make(const int32_t* row_offsets, const HierOp& op, int32_t num_ranks) {
        ContributionGroups g;
        g.row_offsets = row_offsets;
        g.node = op.node;
        g.ranks_per_node = op.ranks_per_node;
        g.remote_sources = num_ranks - op.ranks_per_node;
        int32_t remote_longest = 0, own_longest = 0;
        for (int32_t source = 0; source < num_ranks; ++source) {
            const int32_t rows = row_offsets[source + 1] - row_offsets[source];
            if (source / op.ranks_per_node == op.node)
                own_longest = max(own_longest, rows);
            else
                remote_longest = max(remote_longest, rows);
        }
        g.remote_rounds = (remote_longest + kGroup - 1) / kGroup;
        g.own_rounds = (own_longest + kGroup - 1) / kGroup;
        return g;
    }
    SY_DEVICE int64_t remote_groups() const { return int64_t(remote_rounds) * remote_sources; }
    SY_DEVICE int64_t count() const { return remote_groups() + int64_t(own_rounds) * ranks_per_node; }
    // Group `group`: its source, first row and rows (0: none; a short source's later rounds).
    SY_DEVICE void at(int64_t group, int32_t& source, int64_t& first, int32_t& rows) const {
        int64_t round;
        if (group < remote_groups()) {
            const int32_t i = int32_t(group % remote_sources);
            source = i < node * ranks_per_node ? i : i + ranks_per_node;
            round = group / remote_sources;
        } else {
            const int64_t own = group - remote_groups();
            source = node * ranks_per_node + int32_t(own % ranks_per_node);
            round = own / ranks_per_node;
        }
        first = row_offsets[source] + round * kGroup;
        rows = int32_t(max64(0, min64(kGroup, int64_t(row_offsets[source + 1]) - first)));
    }
};

// send_contributions, sender warp `warp` of its block: groups of at most kSendGroup rows of one
// source (ContributionGroups) claimed from a counter (the direct path's send_rows, with the
// forwarders as homes), each group queued for the block's publisher.
template <typename Shape, class Backend, int kSendWarps, int kSendGroup>
SY_DEVICE void send_contributions(const HierCombineArgs<Backend>& args, const HierOp& op, uint64_t* counters,
                                  const int32_t* row_offsets, ht_detail::PublishQueues<kSendWarps>& queues, int warp) {
    static_assert(kSendGroup >= 1 && kSendGroup <= 32, "one lane per row of a group");
    const HtCommon& c = args.ht.common;
    const ContributionGroups<kSendGroup> groups = ContributionGroups<kSendGroup>::make(row_offsets, op, c.num_ranks);
    const int64_t total = groups.count();
    ClaimAhead claims{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextSendItem), 1ull};
    claims.issue();
    const int lane = int(ptx::lane_id());
    uint32_t queued = 0;
    for (;;) {
        const int64_t group = claims.take(total);
        if (group >= total) break;
        int64_t first = 0;
        int32_t rows = 0, source = 0;
        groups.at(group, source, first, rows);
        if (rows == 0) continue;
        // Lane j: row j's stream slot (its forwarder's stage slot) and the forwarder's arrival key.
        int my_slot = 0, my_key = 0;
        if (lane < rows) {
            my_slot = args.ht.row_combine_slot[first + lane];
            my_key = arrival_key(c, source / op.ranks_per_node, my_slot);
        }
        int my_written = 0;
#pragma unroll 1
        for (int j = 0; j < rows; ++j) {
            const int written = send_contribution<Shape>(args, op, first + j, source, __shfl_sync(0xffffffffu, my_slot, j));
            if (lane == j) my_written = written;
        }
        ht_detail::queue_rows(queues, warp, queued, rows, op.rank_of(op.node, source % op.ranks_per_node), my_key,
                              my_written);
    }
    ht_detail::finish_queueing(queues);
    if (lane == 0) trace_mark(args.ht.trace, kHtCombineSent);
}

}  // namespace hier_detail

#endif

}  // namespace switchyard::device
