// What a timed-out wait on a peer reports about that peer (ErrorDetails, diagnostics.cuh): which
// op its latest kernel of the same family runs and how long before the report it started (or that
// it never started one on this buffer), whether the peer's own buffer is poisoned (it failed and
// sends nothing more), and for the LL kernels whether the peer has masked this rank and the latest
// op whose arrivals the peer's block 0 raised. That tells a peer that never ran (queued behind
// something) from one that gave up, skipped this rank, or whose signals went astray. Each family's
// kernel records its start in its own workspace counters (mark_kernel_start); the waiter reads the
// peer's (PeerKernelDetails).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

// Error detail 1 when the peer has not started a kernel of the family on this buffer.
constexpr int64_t kPeerKernelNeverStarted = -(int64_t(1) << 62);

// The counters a kernel family records its progress in (-1: the family does not record it).
struct KernelStartSlots {
    int32_t running;   // the op sequence of the latest kernel started
    int32_t start_ns;  // the global timer when it started
    int32_t arrived;   // the op sequence whose arrivals block 0 raised last (LL)
};
constexpr KernelStartSlots kBarrierStartSlots{kCounterBarrierRunning, kCounterBarrierStartNs, -1};
constexpr KernelStartSlots kHtStartSlots{kCounterHtRunning, kCounterHtStartNs, -1};
constexpr KernelStartSlots kLlDispatchStartSlots{kCounterLlDispatchRunning, kCounterLlDispatchStartNs,
                                                 kCounterLlDispatchArrived};
constexpr KernelStartSlots kLlCombineStartSlots{kCounterLlCombineRunning, kCounterLlCombineStartNs,
                                                kCounterLlCombineArrived};

// Detail words of a timeout about a peer (ErrorDetails::word).
enum PeerDetailWord : int32_t {
    kPeerDetailOp = 0,          // the op of the peer's latest kernel of the family
    kPeerDetailSinceStart = 1,  // ns since it started, or kPeerKernelNeverStarted
    kPeerDetailPoisoned = 2,    // 1: the peer's buffer is poisoned, 0: healthy
    kPeerDetailMasksMe = 3,     // LL: 1 when the peer's mask skips this rank, 0 when not
    kPeerDetailArrived = 4,     // LL: the latest op whose arrivals the peer's block 0 raised
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// One thread of the kernel, as it starts op `sequence`.
SY_DEVICE void mark_kernel_start(uint64_t* counters, KernelStartSlots slots, uint64_t sequence) {
    ptx::st_relaxed_sys(counters + slots.start_ns, ptx::globaltimer_ns());
    ptx::st_relaxed_sys(counters + slots.running, sequence);
}

// A wait_until details functor: reads the peer's workspace through its mapping.
struct PeerKernelDetails {
    const uint64_t* peer_counters;
    KernelStartSlots slots;
    const uint32_t* peer_poison = nullptr;      // the peer's poison word
    const uint32_t* peer_mask_of_me = nullptr;  // LL: the peer's mask entry for this rank
    SY_DEVICE void operator()(ErrorDetails& details) const {
        details.word[kPeerDetailOp] = int64_t(ptx::ld_relaxed_sys(peer_counters + slots.running));
        const uint64_t started = ptx::ld_relaxed_sys(peer_counters + slots.start_ns);
        details.word[kPeerDetailSinceStart] =
            started != 0 ? int64_t(ptx::globaltimer_ns() - started) : kPeerKernelNeverStarted;
        if (peer_poison) details.word[kPeerDetailPoisoned] = ptx::ld_relaxed_sys(peer_poison) != 0;
        if (peer_mask_of_me) details.word[kPeerDetailMasksMe] = ptx::ld_relaxed_sys(peer_mask_of_me) != 0;
        if (slots.arrived >= 0)
            details.word[kPeerDetailArrived] = int64_t(ptx::ld_relaxed_sys(peer_counters + slots.arrived));
    }
};

#endif

}  // namespace switchyard::device
