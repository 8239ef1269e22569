// HT dispatch, the counts: the exchange that opens the op, and the receiver-side summary built
// from it (ht/dispatch.cuh composes the roles).
//
//  notify_peers       block 0 of a cached dispatch (no routing kernel ran): this rank's row counts
//                     to every peer, each in a 64-bit word tagged with the op's sequence
//                     (transport/counts_exchange.cuh), or the failure of a poisoned buffer;
//  wait_for_counts    every block: waits until all peers' words carry this op's tag, which also
//                     proves each destination has entered this op (its region is free), and sums
//                     where this rank's rows start at each destination; a peer's announced
//                     failure ends the op here (kErrorPeerFailed); with masking, block 0 first
//                     decides which peers the op goes on with (ht/masking.cuh) and masked peers
//                     count as sending nothing and receiving nothing;
//  publish_recv_info  block 0: rows per source, expert counts and offsets, for the receive
//                     kernel, combine and (host-synced counts) the host.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/ht/masking.cuh"
#include "switchyard/transport/completion.cuh"
#include "switchyard/transport/counts_exchange.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

SY_DEVICE HtNotifyView notify_entry(const HtCommon& c, uint8_t* base, int32_t source) {
    return ht_notify_view(c.layout.workspace, base, source, c.num_ranks);
}

// A count of an arrived entry (after wait_for_counts): the low half of its tagged word; nothing
// from a masked source.
SY_DEVICE int32_t tagged_count(const HtCommon& c, const uint64_t* word, int32_t source) {
    return ht_peer_masked(c, source) ? 0 : HtNotifyView::count_of(ptx::ld_relaxed_sys(word));
}

// Block 0 (all threads), when the routing kernel has not notified (a cached dispatch): publish this
// rank's counts, from the handle, to every peer (`failure`: announce that instead).
SY_DEVICE void notify_peers(const HtDispatchArgs& args, uint64_t sequence, uint32_t failure) {
    const HtCommon& c = args.common;
    const HtNotifyTarget target{c.peer_bases,
                                c.layout.workspace,
                                nullptr,
                                c.rank,
                                c.num_ranks,
                                c.local_experts,
                                c.mask_unresponsive ? c.layout.workspace.ht_mask(c.local_base) : nullptr};
    ht_notify_peers(
        target, sequence, [&](int32_t rank) { return args.num_tokens_per_rank[rank]; },
        [&](int32_t expert) { return args.num_tokens_per_expert[expert]; }, failure);
}

// Waits until *word carries this op's tag (the sequence's low 32 bits) and checks that it is not a
// later op's (lock step); `value` gets the word the wait's acquire load saw (no second load).
// Returns false on timeout or mismatch (reported).
template <typename Details>
SY_DEVICE bool wait_for_tag(const uint64_t* word, uint64_t sequence, const Diagnostics& diagnostics,
                            int32_t peer, Details details, uint64_t& value) {
    if (!wait_until(
            word,
            [sequence, &value](uint64_t seen) {
                value = seen;
                return HtNotifyView::reached(seen, sequence);
            },
            diagnostics, kPhaseHtNotify, peer, sequence, details))
        return false;
    if (HtNotifyView::written_by(value, sequence)) return true;
    report_error(diagnostics, kErrorSequenceMismatch, kPhaseHtNotify, peer, sequence,
                 HtNotifyView::tag_of(value), 0);
    return false;
}

// Every block: wait for every word of all peers' entries; returns false on timeout, and when a
// source announced that it failed the op (reported as kErrorPeerFailed naming it). Also fills
// `dest_offset` [R] (shared): the rows that sources before this rank send to each rank q, where
// this rank's rows start at q (-1 for a masked q: nothing goes there). They are summed from the
// words as they arrive (integer adds, so the order does not matter): reading them again after the
// wait cost every block one more round trip before its first row. Masked sources are skipped.
SY_DEVICE bool wait_for_counts(const HtCommon& c, uint64_t sequence, int32_t* dest_offset) {
    __shared__ int ok;
    if (threadIdx.x == 0) ok = 1;
    for (int q = threadIdx.x; q < c.num_ranks; q += blockDim.x) dest_offset[q] = 0;
    __syncthreads();
    const int words = HtNotifyView::num_words(c.num_ranks, c.local_experts);
    for (int i = threadIdx.x; i < c.num_ranks * words; i += blockDim.x) {
        const int source = i / words, word = i % words;
        if (ht_peer_masked(c, source)) continue;
        const HtNotifyView entry = notify_entry(c, c.local_base, source);
        uint64_t value = 0;
        const bool arrived = word == 0 ? wait_for_sequence(entry.sequence(), sequence, c.diagnostics,
                                                           kPhaseHtNotify, source, peer_details(c, source))
                                       : wait_for_tag(entry.words + word, sequence, c.diagnostics, source,
                                                      peer_details(c, source), value);
        const bool failed = arrived && word >= 1 && HtNotifyView::is_failure(value);
        if (failed && source != c.rank)  // (this rank's own failure is already recorded)
            report_error(c.diagnostics, kErrorPeerFailed, kPhaseHtNotify, source, sequence,
                         HtNotifyView::failure_of(value), 0);
        if (!arrived || failed) ok = 0;
        const bool rows_to_rank = word >= 1 && word < 1 + c.num_ranks;
        if (arrived && !failed && rows_to_rank && source < c.rank)
            atomicAdd(dest_offset + word - 1, HtNotifyView::count_of(value));
    }
    __syncthreads();
    if (c.mask_unresponsive) {
        for (int q = threadIdx.x; q < c.num_ranks; q += blockDim.x)
            if (ht_peer_masked(c, q)) dest_offset[q] = -1;
        __syncthreads();
    }
    return ok != 0;
}

// Every block: the op's entry. Block 0 decides once whether to announce this op (the routing
// kernel may have announced it; a poisoned buffer announces its failure instead of counts); the
// notify synchronizes the block, so every thread must take the same branch. Then the wait for
// every peer's counts.
SY_DEVICE bool exchange_counts(const HtDispatchArgs& args, uint64_t sequence, int32_t* dest_offset) {
    const HtCommon& c = args.common;
    __shared__ int announce;
    __shared__ uint32_t failure;
    if (threadIdx.x == 0) {
        announce = blockIdx.x == 0 && !args.counts_notified;
        failure = announce && is_poisoned(c.diagnostics) ? kPeerFailurePoisoned : 0u;
    }
    __syncthreads();
    if (announce) notify_peers(args, sequence, failure);
    if (announce && threadIdx.x == 0) trace_mark(args.trace, kHtDispatchNotified);
    if (c.mask_unresponsive)
        decide_op_peers(c, sequence, kPhaseHtNotify, [&](int32_t source) -> const uint64_t* {
            return notify_entry(c, c.local_base, source).sequence();
        });
    const bool ok = wait_for_counts(c, sequence, dest_offset);
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchCounts);
    // (dest_offset is complete after the wait's closing barrier: the sends need no other.)
    return ok;
}

// Rows of local expert `e` that sources 0..R-1 send here, eight sources' loads in flight at once.
// With `offsets`, also writes each source's first row within the expert.
SY_DEVICE int32_t expert_rows_from_sources(const HtCommon& c, int e, int32_t* offsets) {
    int32_t count = 0;
    for (int first = 0; first < c.num_ranks; first += 8) {
        int32_t rows[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            rows[i] =
                first + i < c.num_ranks
                    ? tagged_count(c, notify_entry(c, c.local_base, first + i).expert_rows_word(e), first + i)
                    : 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (offsets && first + i < c.num_ranks) offsets[(first + i) * c.local_experts + e] = count;
            count += rows[i];
        }
    }
    return count;
}

// Block 0 (all threads): the receiver-side summary (rows per source, expert counts and offsets)
// for the receive kernel, combine and the host. Experts are spread over the threads in contiguous
// runs; the expert-major offsets are a block-wide prefix sum over the runs. In the masked layout
// expert e's rows start at e * R * T_max instead of at aligned prefix sums.
template <bool kMaskedLayout>
SY_DEVICE void publish_recv_info(const HtDispatchArgs& args) {
    const HtCommon& c = args.common;
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    int32_t* out = args.recv_info;
    volatile int32_t* host = args.host_counts;  // mapped host memory: [0] ready, [1] rows, ...
    const int L = c.local_experts;
    if (threadIdx.x == 0) {
        int32_t rows = 0;
        for (int s = 0; s < c.num_ranks; ++s) {
            out[info.row_offsets() + s] = rows;
            rows += tagged_count(c, notify_entry(c, c.local_base, s).rows_to_word(c.rank), s);
        }
        out[info.row_offsets() + c.num_ranks] = rows;
        if (host) host[1] = rows;
    }
    const int per_thread = int(ceil_div(L, blockDim.x));
    const int first = int(threadIdx.x) * per_thread;
    const int last = int(min64(L, first + per_thread));
    int64_t run_rows = 0;  // rows of this thread's experts in the contiguous layout
    if (!kMaskedLayout)
        for (int e = first; e < last; ++e)
            run_rows += align_up(expert_rows_from_sources(c, e, nullptr), args.expert_alignment);
    int64_t total_rows = 0;
    int64_t expert_rows = block_exclusive_sum(run_rows, total_rows);
    for (int e = first; e < last; ++e) {
        const int32_t count = expert_rows_from_sources(c, e, out + info.source_expert_offsets());
        out[info.expert_counts() + e] = count;
        out[info.expert_offsets() + e] =
            int32_t(kMaskedLayout ? int64_t(e) * c.num_ranks * c.max_tokens : expert_rows);
        expert_rows += kMaskedLayout ? 0 : align_up(count, args.expert_alignment);
        if (host) host[3 + e] = count;
    }
    const int32_t end = int32_t(kMaskedLayout ? int64_t(L) * c.num_ranks * c.max_tokens : total_rows);
    if (threadIdx.x == 0) {
        out[info.expert_offsets() + L] = end;
        if (host) host[2] = end;
    }
    if (host) {
        // Every writer's fence, the barrier, then the flag after a fence of its own (cumulativity).
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence_system();
            host[0] = 1;
            __threadfence_system();
        }
    }
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
