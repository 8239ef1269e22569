// The HT counts notify: before its rows, a source writes its row counts into an entry of each
// destination's workspace (rows to every rank, and rows to each of that destination's local
// experts). The entry is also the HT entry handshake: a destination that sees a source's entry of
// op n knows the source has entered op n. Written by the routing kernel's last chunk as soon as
// the totals are known, or by the dispatch kernel when no routing kernel runs (a cached dispatch).
// Here, not in ht/, because the routing kernel needs nothing else from ht/.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

// The notify entry one source writes into each destination's workspace: 64-bit words, the op's
// sequence, then each count with the sequence's low 32 bits above it: rows to each rank, rows to
// each of the peer's experts (ht_notify_words). A word is written by one store, so a reader that
// sees this op's tag sees this op's count: the entry needs no fence at the sender (a fence and a
// release store per entry would sit on the op's critical path) and the reader waits on every word.
//
// A source that fails the op before moving any data (invalid routing, or a buffer an earlier
// failure poisoned) still writes its entry, with kNotifyFailedBit and its PeerFailure
// (common/diagnostics.cuh) in place of every count: its peers, already waiting on these words,
// stop at once and name it, instead of waiting out the timeout. A count never reaches that bit.
struct HtNotifyView {
    static constexpr uint32_t kNotifyFailedBit = 1u << 31;
    uint64_t* words;
    int32_t num_ranks;
    SY_HOST_DEVICE static int32_t num_words(int32_t num_ranks, int32_t local_experts) {
        return int32_t(ht_notify_words(num_ranks, local_experts));
    }
    SY_HOST_DEVICE static uint64_t tagged(uint64_t sequence, int32_t count) {
        return (sequence << 32) | uint32_t(count);
    }
    SY_HOST_DEVICE static uint32_t tag_of(uint64_t word) { return uint32_t(word >> 32); }
    SY_HOST_DEVICE static int32_t count_of(uint64_t word) { return int32_t(uint32_t(word)); }
    // Whether `word` was written by op `sequence` or a later one (tags wrap at 2^32 ops).
    SY_HOST_DEVICE static bool reached(uint64_t word, uint64_t sequence) {
        return int32_t(tag_of(word) - uint32_t(sequence)) >= 0;
    }
    SY_HOST_DEVICE static bool written_by(uint64_t word, uint64_t sequence) {
        return tag_of(word) == uint32_t(sequence);
    }
    // A count word of a source that failed the op (see above), and its PeerFailure.
    SY_HOST_DEVICE static uint64_t failed(uint64_t sequence, uint32_t failure) {
        return (sequence << 32) | kNotifyFailedBit | failure;
    }
    SY_HOST_DEVICE static bool is_failure(uint64_t word) { return (uint32_t(word) & kNotifyFailedBit) != 0; }
    SY_HOST_DEVICE static uint32_t failure_of(uint64_t word) { return uint32_t(word) & ~kNotifyFailedBit; }
    SY_HOST_DEVICE uint64_t* sequence() const { return words; }
    SY_HOST_DEVICE uint64_t* rows_to_word(int32_t rank) const { return words + 1 + rank; }
    SY_HOST_DEVICE uint64_t* expert_rows_word(int32_t expert) const { return words + 1 + num_ranks + expert; }
};

// Source `source`'s entry in the workspace at `base`.
SY_HOST_DEVICE HtNotifyView ht_notify_view(const WorkspaceLayout& workspace, uint8_t* base, int32_t source,
                                           int32_t num_ranks) {
    return {reinterpret_cast<uint64_t*>(workspace.ht_notify_entry(base, source)), num_ranks};
}

// Where a rank's notify goes, for the routing kernel (peer_bases null: it notifies nobody).
struct HtNotifyTarget {
    uint8_t* const* peer_bases;  // [R] device array
    WorkspaceLayout workspace;
    const uint64_t* op_counter;  // this rank's HT op counter: the op's sequence is its value + 1
    int32_t rank, num_ranks, local_experts;
    const uint32_t* mask;  // this rank's HT mask (null without masking): masked peers get nothing
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// All threads of one block: write this rank's entry at every peer, `rows_to(r)` rows to rank r and
// `expert_rows(e)` rows to global expert e; with a non-zero PeerFailure `failure`, the failure
// marker in every count word instead (HtNotifyView). The words are spread over the threads: a
// thread walking a peer's whole entry serializes one load latency per expert (the loads cannot
// pass the remote stores they might alias).
template <typename RowsTo, typename ExpertRows>
SY_DEVICE void ht_notify_peers(const HtNotifyTarget& target, uint64_t sequence, RowsTo rows_to,
                               ExpertRows expert_rows, uint32_t failure = 0) {
    const int R = target.num_ranks;
    const int words = HtNotifyView::num_words(R, target.local_experts);
    for (int i = threadIdx.x; i < R * words; i += blockDim.x) {
        const int peer = i / words, word = i % words;
        if (target.mask != nullptr && ptx::ld_relaxed_gpu(target.mask + peer) != 0) continue;
        const HtNotifyView entry = ht_notify_view(target.workspace, target.peer_bases[peer], target.rank, R);
        uint64_t value = sequence;  // word 0
        if (word >= 1 && failure != 0)
            value = HtNotifyView::failed(sequence, failure);
        else if (word >= 1 && word < 1 + R)
            value = HtNotifyView::tagged(sequence, rows_to(word - 1));
        else if (word >= 1 + R)
            value = HtNotifyView::tagged(sequence, expert_rows(peer * target.local_experts + word - 1 - R));
        ptx::st_relaxed_sys(entry.words + word, value);
    }
}

#endif

}  // namespace switchyard::device
