// Hierarchical HT dispatch, the counts (hier/dispatch.cuh composes the roles). Block 0, all its
// threads, before its warps take their roles:
//
//  send_counts     this rank's counts block for each other node (rows to each of its ranks and
//                  experts, records of the stream) is put to the rail peer there, with its counts
//                  signal; this rank's own notify entry (the direct path's format, tagged with the
//                  op's sequence) is written at every rank of this node;
//  relay_counts    the counts of each rail peer on another node, once its signal is in, become that
//                  source's notify entry at every rank of this node: so each rank holds the entries
//                  of all R sources, as on one node (each entry is written by a rank of this node,
//                  so having all R also proves every rank of this node entered the op);
//  publish_counts  the direct path's wait for every entry and its receive summary (recv_info, host
//                  counts), then the first row of each source at each rank of this node (for the
//                  forwarders) and the records forwarded from each node (for the combine), released
//                  to the forwarders of every block with the op's sequence.
// No count is needed before records move: the senders start at once (the streams' regions are
// per source node, at worst case).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ht/dispatch_counts.cuh"
#include "switchyard/transport/counts_exchange.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// Block 0: the counts blocks and their puts (thread 0 issues them), and the own entry.
template <class Backend>
SY_DEVICE void send_counts(const HierDispatchArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port) {
    const HtDispatchArgs& ht = args.ht;
    const HtCommon& c = ht.common;
    const HierLayout& h = c.layout.hier;
    const int32_t G = op.ranks_per_node, L = c.local_experts;
    const HierCounts counts{G, L};
    const int words = counts.words();
    for (int i = threadIdx.x; i < op.num_nodes * words; i += blockDim.x) {
        const int m = i / words, w = i % words;
        if (m == op.node) continue;
        const int32_t value = w < G                  ? ht.num_tokens_per_rank[op.rank_of(m, w)]
                              : w < counts.records() ? ht.num_tokens_per_expert[int64_t(m) * G * L + (w - G)]
                                                     : args.num_tokens_per_node[m];
        reinterpret_cast<int32_t*>(c.local_base + h.counts_send(m))[w] = value;
    }
    // The own entry at each rank of this node (ht_notify_peers, restricted to the mapped peers).
    const int entry_words = HtNotifyView::num_words(c.num_ranks, L);
    for (int i = threadIdx.x; i < G * entry_words; i += blockDim.x) {
        const int q = op.rank_of(op.node, i / entry_words), word = i % entry_words;
        const HtNotifyView entry = ht_notify_view(c.layout.workspace, c.peer_bases[q], c.rank, c.num_ranks);
        uint64_t value = op.sequence;
        if (word >= 1 && word < 1 + c.num_ranks)
            value = HtNotifyView::tagged(op.sequence, ht.num_tokens_per_rank[word - 1]);
        else if (word >= 1 + c.num_ranks)
            value = HtNotifyView::tagged(op.sequence, ht.num_tokens_per_expert[q * L + word - 1 - c.num_ranks]);
        ptx::st_relaxed_sys(entry.words + word, value);
    }
    __syncthreads();  // the blocks are written before thread 0 puts them (contract 5)
    if (threadIdx.x != 0) return;
    const HierSignals signals = h.signals();
    for (int32_t m = 0; m < op.num_nodes; ++m) {
        if (m == op.node) continue;
        if (!port.put(m, uint64_t(h.counts_recv(op.parity, op.node)), uint64_t(h.counts_send(m)),
                      uint64_t(counts.bytes()), net_signal_add(signals.counts(op.parity, op.node), 1),
                      net_counter_inc(kHierDispatchSourceCounter)))
            return;
    }
}

// One warp: the counts of the rail peer on node `node` (arrived: `counts`) as that source's notify
// entry at each rank of this node.
SY_DEVICE void write_relayed_entry(const HtCommon& c, const HierOp& op, int32_t node, const int32_t* counts_block) {
    const int32_t G = op.ranks_per_node, L = c.local_experts;
    const HierCounts counts{G, L};
    const int32_t source = op.rail_peer(node);
    const int entry_words = HtNotifyView::num_words(c.num_ranks, L);
    for (int i = int(ptx::lane_id()); i < G * entry_words; i += 32) {
        const int g = i / entry_words, word = i % entry_words;
        const HtNotifyView entry =
            ht_notify_view(c.layout.workspace, c.peer_bases[op.rank_of(op.node, g)], source, c.num_ranks);
        uint64_t value = op.sequence;
        if (word >= 1 && word < 1 + c.num_ranks) {
            const int32_t rank = word - 1;
            value = HtNotifyView::tagged(op.sequence,
                                         rank / G == op.node ? counts_block[counts.rows_to(rank % G)] : 0);
        } else if (word >= 1 + c.num_ranks) {
            value = HtNotifyView::tagged(op.sequence,
                                         counts_block[counts.expert_rows(g * L + word - 1 - c.num_ranks)]);
        }
        ptx::st_relaxed_sys(entry.words + word, value);
    }
}

// Block 0: warp w relays the rail peers on nodes w, w + warps, ... (this rank's own node: its own
// entry went out in send_counts). False when a wait failed (reported).
template <class Backend>
SY_DEVICE bool relay_counts(const HierDispatchArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                            uint64_t dispatch_index) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    const HierSignals signals = h.signals();
    bool ok = true;
    const int warps = int(blockDim.x / 32);
    for (int32_t node = int32_t(threadIdx.x / 32); node < op.num_nodes; node += warps) {
        if (node == op.node) continue;
        int arrived = 0;
        if (ptx::lane_id() == 0)
            arrived = wait_signal_exact(port, c.diagnostics, signals.counts(op.parity, node), (dispatch_index >> 1) + 1,
                                        node, kPhaseHierCounts);
        __syncwarp();  // the acquiring lane's view orders the warp's reads of the block
        if (!__shfl_sync(0xffffffffu, arrived, 0)) {
            ok = false;
            break;
        }
        write_relayed_entry(c, op, node,
                            reinterpret_cast<const int32_t*>(c.local_base + h.counts_recv(op.parity, node)));
    }
    return ok;
}

// Block 0, all threads: waits until every word of all R entries here carries this op's tag (the
// direct path's wait_for_counts, except that a timeout names the rank of this node that writes the
// entry: the source itself or its rail peer here, the relay). False on timeout or mismatch.
SY_DEVICE bool wait_for_entries(const HtCommon& c, const HierOp& op) {
    __shared__ int ok;
    if (threadIdx.x == 0) ok = 1;
    __syncthreads();
    const int words = HtNotifyView::num_words(c.num_ranks, c.local_experts);
    for (int i = threadIdx.x; i < c.num_ranks * words; i += blockDim.x) {
        const int source = i / words, word = i % words;
        const int writer = op.rank_of(op.node, source % op.ranks_per_node);
        const HtNotifyView entry = ht_detail::notify_entry(c, c.local_base, source);
        uint64_t value = 0;
        const bool arrived = word == 0 ? wait_for_sequence(entry.sequence(), op.sequence, c.diagnostics,
                                                           kPhaseHtNotify, writer, node_peer_details(c, writer))
                                       : ht_detail::wait_for_tag(entry.words + word, op.sequence, c.diagnostics,
                                                                 writer, node_peer_details(c, writer), value);
        if (!arrived) ok = 0;
    }
    __syncthreads();
    return ok != 0;
}

// Block 0, after every entry is in: where each source's rows start at each rank of this node
// (summed over the sources before it), and the records forwarded from each node; then released to
// every block's forwarders (the op's sequence in the ready word).
template <class Backend>
SY_DEVICE void publish_offsets(const HierDispatchArgs<Backend>& args, const HierOp& op) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    const int32_t G = op.ranks_per_node;
    int32_t* offsets = c.layout.workspace.hier_offsets(c.local_base);
    for (int g = threadIdx.x; g < G; g += blockDim.x) {
        int32_t rows = 0;
        for (int s = 0; s < c.num_ranks; ++s) {
            offsets[s * G + g] = rows;
            rows += ht_detail::tagged_count(
                c, ht_detail::notify_entry(c, c.local_base, s).rows_to_word(op.rank_of(op.node, g)), s);
        }
    }
    const HierCounts counts{G, c.local_experts};
    for (int n = threadIdx.x; n < op.num_nodes; n += blockDim.x)
        args.forward_counts[n] =
            n == op.node ? args.num_tokens_per_node[n]
                         : reinterpret_cast<const int32_t*>(c.local_base + h.counts_recv(op.parity, n))[counts.records()];
    __syncthreads();
    if (threadIdx.x == 0) {
        ptx::fence_acq_rel_sys();  // the block's writes (observed through the barrier) before the word
        ptx::st_relaxed_sys(c.layout.workspace.hier_offsets_ready(c.local_base), op.sequence);
    }
}

// Block 0, all threads: the counts exchange of the op. False when a wait failed (then nothing is
// published and the forwarders of every block stop at their wait for it).
template <class Backend, bool kMaskedLayout>
SY_DEVICE bool exchange_counts(const HierDispatchArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                               uint64_t dispatch_index) {
    __shared__ int ok;
    // A poisoned buffer (an earlier op failed) announces nothing: its peers report the stall.
    if (threadIdx.x == 0) ok = !is_poisoned(args.ht.common.diagnostics);
    __syncthreads();
    if (!ok) return false;
    send_counts(args, op, port);
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtDispatchNotified);
    if (!relay_counts(args, op, port, dispatch_index)) ok = 0;
    __syncthreads();
    if (!ok) return false;
    if (!wait_for_entries(args.ht.common, op)) return false;
    if (threadIdx.x == 0) trace_mark(args.ht.trace, kHtDispatchCounts);
    ht_detail::publish_recv_info<kMaskedLayout>(args.ht);
    publish_offsets(args, op);
    return true;
}

}  // namespace hier_detail

#endif

}  // namespace switchyard::device
