// HT combine: arrivals published by one warp per block instead of by each sender warp.
//
// A sender warp that fences its own rows (signal_arrivals) stalls until they have crossed the
// link, and the senders of a block then stall and reload together (design notes §3). With a
// publisher, a sender only queues (home, chunk, records) for each row it wrote, in a ring in
// shared memory, and goes on copying; the publisher warp takes everything queued so far, makes it
// visible with one system fence, and raises the homes' arrival counters (consecutive entries of
// the same home chunk added together). The senders' rows are covered by the publisher's fence
// through causality: row stores -> the sender's release of its ring count (block scope) -> the
// publisher's acquire of it -> its system fence -> the relaxed remote add that completes the
// release pattern, which the home acquires.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

constexpr int kHtPublishRing = 64;        // queued rows per sender warp
constexpr int kHtPublishMaxSenders = 15;  // sender warps of a 16-warp block (one publishes)

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Shared-memory queues of one block; counts only grow (ring positions are counts mod the ring).
struct PublishQueues {
    uint64_t entries[kHtPublishMaxSenders][kHtPublishRing];
    uint32_t produced[kHtPublishMaxSenders];  // written by sender warp w (release)
    uint32_t consumed[kHtPublishMaxSenders];  // written by the publisher (release)
    uint32_t senders_done;                    // sender warps that have queued their last row

    // Threads 0..31, before the block barrier that precedes the roles.
    SY_DEVICE void reset() {
        const uint32_t lane = threadIdx.x;
        if (lane < uint32_t(kHtPublishMaxSenders)) produced[lane] = consumed[lane] = 0;
        if (lane == 0) senders_done = 0;
    }
};

SY_DEVICE uint64_t publish_entry(int home, int chunk, int records) {
    return (uint64_t(uint32_t(chunk)) << 32) | (uint64_t(uint32_t(home) & 0xffffu) << 16) |
           uint64_t(uint32_t(records) & 0xffffu);
}

// Sender warp `warp` (all lanes), after a group of `group` rows (lane j < group: row j's home,
// token and records written, 0 for none): queues the rows for the publisher. `head` is the
// warp's count of queued entries (warp-uniform).
SY_DEVICE void queue_rows(PublishQueues& queues, int warp, uint32_t& head, int group, int home, int token,
                          int written) {
    const uint32_t lane = ptx::lane_id();
    if (lane == 0)  // wait for room: the publisher drains without waiting on anything but its fence
        while (head + uint32_t(group) - ptx::ld_acquire_cta(&queues.consumed[warp]) >
               uint32_t(kHtPublishRing)) {
        }
    __syncwarp();
    if (int(lane) < group)
        queues.entries[warp][(head + lane) % kHtPublishRing] =
            publish_entry(home, token / kHtCombineChunkTokens, written);
    head += uint32_t(group);
    __syncwarp();  // orders every lane's row stores and entry before lane 0's release
    if (lane == 0) ptx::st_release_cta(&queues.produced[warp], head);
}

// Sender warp, after its last group.
SY_DEVICE void finish_queueing(PublishQueues& queues) {
    __syncwarp();
    if (ptx::lane_id() == 0) ptx::red_add_release_cta(&queues.senders_done, 1u);
}

// The publisher warp: lane w serves sender warp w until every sender has finished and its last
// entries are published.
SY_DEVICE void publish_rows(const HtCommon& c, PublishQueues& queues, int send_warps) {
    const int lane = int(ptx::lane_id());
    const bool serves = lane < send_warps;
    uint32_t published = 0;
    for (;;) {
        // Read the finished count first: once it says all, the produced counts read after it are final.
        const uint32_t done = ptx::ld_acquire_cta(&queues.senders_done);
        const uint32_t produced = serves ? ptx::ld_acquire_cta(&queues.produced[lane]) : 0u;
        const bool fresh = produced != published;
        if (!__any_sync(0xffffffffu, fresh)) {
            if (done == uint32_t(send_warps)) return;
            __nanosleep(64);  // leave the issue slots to the senders
            continue;
        }
        ptx::fence_acq_rel_sys();  // one fence covers every queued row the lanes have acquired
        int run_home = -1, run_chunk = -1;
        uint64_t run_records = 0;
        for (uint32_t i = published; i != produced; ++i) {
            const uint64_t entry = queues.entries[lane][i % kHtPublishRing];
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
        if (fresh) ptx::st_release_cta(&queues.consumed[lane], produced);
        published = produced;
    }
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
