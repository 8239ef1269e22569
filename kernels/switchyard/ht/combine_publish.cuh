// HT combine: arrivals published by one warp per block instead of by each sender warp.
//
// A sender warp that fenced its own rows would stall until they had crossed the link, and the
// senders of a block would then stall and reload together. With a publisher, a sender only queues
// (home, chunk, records) for each row it wrote, in a ring in shared memory, and goes on copying;
// the publisher warp takes everything queued so far, makes it visible with one system fence, and
// raises the homes' arrival counters (consecutive entries of the same home chunk added together).
// The senders' rows are covered by the publisher's fence through causality: row stores -> warp
// barrier -> the sender's arrival on the entry's "full" mbarrier (release, block scope) -> the
// publisher's wait on it (acquire) -> its system fence -> the relaxed remote add that completes the
// release pattern, which the home acquires.
//
// Every hand-off between warps goes through mbarriers (a "full" and an "empty" one per ring
// entry, and one that counts finished senders), which compute-sanitizer racecheck follows; it
// does not follow acquire/release loads and stores of shared words.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

constexpr int kHtPublishRing = 32;  // queued rows per sender warp

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Shared-memory queues of one block with kSendWarps sender warps (the publisher's lane w serves
// sender w). Entry n of warp w sits at slot n % kHtPublishRing; its pass n / kHtPublishRing picks
// the mbarrier phase (parity) to wait for.
template <int kSendWarps>
struct PublishQueues {
    static_assert(kSendWarps >= 1 && kSendWarps <= 32, "one publisher lane per sender warp");
    uint64_t entries[kSendWarps][kHtPublishRing];
    uint64_t full[kSendWarps][kHtPublishRing];   // the sender wrote the entry
    uint64_t empty[kSendWarps][kHtPublishRing];  // the publisher consumed it
    uint64_t senders_done;                       // one arrival per finished sender warp

    // Every thread of the block, before the block barrier that precedes the roles.
    SY_DEVICE void init() {
        for (int i = int(threadIdx.x); i < kSendWarps * kHtPublishRing; i += int(blockDim.x)) {
            ptx::mbarrier_init(&full[0][0] + i, 1);
            ptx::mbarrier_init(&empty[0][0] + i, 1);
        }
        if (threadIdx.x == 0) ptx::mbarrier_init(&senders_done, uint32_t(kSendWarps));
        ptx::fence_mbarrier_init();
    }
};

SY_DEVICE uint64_t publish_entry(int home, int chunk, int records) {
    return (uint64_t(uint32_t(chunk)) << 32) | (uint64_t(uint32_t(home) & 0xffffu) << 16) |
           uint64_t(uint32_t(records) & 0xffffu);
}

// Sender warp `warp` (all lanes), after a group of `group` rows (lane j < group: row j's home,
// token and records written, 0 for none): queues the rows for the publisher. `head` is the
// warp's count of queued entries (warp-uniform).
template <int kSendWarps>
SY_DEVICE void queue_rows(PublishQueues<kSendWarps>& queues, int warp, uint32_t& head, int group, int home,
                          int token, int written) {
    const uint32_t lane = ptx::lane_id();
    const uint32_t n = head + lane;
    const int slot = int(n % kHtPublishRing);
    if (int(lane) < group) {
        // Room: the publisher has consumed this slot's previous entry (a fresh slot passes at once).
        while (!ptx::mbarrier_try_wait_parity(&queues.empty[warp][slot], ((n / kHtPublishRing) & 1u) ^ 1u)) {
        }
        queues.entries[warp][slot] = publish_entry(home, token / kHtCombineChunkTokens, written);
    }
    __syncwarp();  // every lane's row stores precede each lane's arrival
    if (int(lane) < group) ptx::mbarrier_arrive(&queues.full[warp][slot]);
    head += uint32_t(group);
}

// Sender warp, after its last group.
template <int kSendWarps>
SY_DEVICE void finish_queueing(PublishQueues<kSendWarps>& queues) {
    __syncwarp();
    if (ptx::lane_id() == 0) ptx::mbarrier_arrive(&queues.senders_done);
}

// The publisher warp: lane w serves sender warp w until every sender has finished and its last
// entries are published.
template <int kSendWarps>
SY_DEVICE void publish_rows(const HtCommon& c, PublishQueues<kSendWarps>& queues) {
    const int lane = int(ptx::lane_id());
    const bool serves = lane < kSendWarps;
    uint32_t published = 0;
    for (;;) {
        // The finished test first: once it passes, every entry the senders queued is visible to the
        // scan after it.
        const bool done = ptx::mbarrier_test_wait_parity(&queues.senders_done, 0);
        uint32_t ready = published;
        while (serves && ready - published < uint32_t(kHtPublishRing) &&
               ptx::mbarrier_test_wait_parity(&queues.full[lane][ready % kHtPublishRing],
                                              (ready / kHtPublishRing) & 1u))
            ++ready;
        const bool fresh = ready != published;
        if (!__any_sync(0xffffffffu, fresh)) {
            if (done) return;
            __nanosleep(64);  // leave the issue slots to the senders
            continue;
        }
        ptx::fence_acq_rel_sys();  // one fence covers every queued row the lanes have acquired
        int run_home = -1, run_chunk = -1;
        uint64_t run_records = 0;
        for (uint32_t n = published; n != ready; ++n) {
            const int slot = int(n % kHtPublishRing);
            const uint64_t entry = queues.entries[lane][slot];
            ptx::mbarrier_arrive(&queues.empty[lane][slot]);  // the entry is read: the slot is free
            const int home = int((entry >> 16) & 0xffffu), chunk = int(entry >> 32);
            const uint64_t records = entry & 0xffffu;
            if (records == 0) continue;
            if (home != run_home || chunk != run_chunk) {
                if (run_records > 0)
                    ptx::red_add_relaxed_sys(
                        c.layout.workspace.ht_combine_arrival(c.peer_bases[run_home], run_chunk, c.rank),
                        run_records);
                run_home = home, run_chunk = chunk, run_records = 0;
            }
            run_records += records;
        }
        if (run_records > 0)
            ptx::red_add_relaxed_sys(
                c.layout.workspace.ht_combine_arrival(c.peer_bases[run_home], run_chunk, c.rank),
                run_records);
        published = ready;
    }
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
