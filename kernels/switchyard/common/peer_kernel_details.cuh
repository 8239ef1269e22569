// What a timed-out wait on a peer reports about that peer's own kernel: which op its latest kernel
// of the same family runs and how long before the report it started, or that it never started
// one on this buffer. That tells a peer that never ran (queued behind something) from one whose
// signal went astray. Each family's kernel records both in its own workspace counters as it
// starts (mark_kernel_start); the waiter reads the peer's (PeerKernelDetails).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

// Error detail 1 when the peer has not started a kernel of the family on this buffer.
constexpr int64_t kPeerKernelNeverStarted = -(int64_t(1) << 62);

// The two counters a kernel family records its start in.
struct KernelStartSlots {
    int32_t running;   // the op sequence of the latest kernel started
    int32_t start_ns;  // the global timer when it started
};
constexpr KernelStartSlots kBarrierStartSlots{kCounterBarrierRunning, kCounterBarrierStartNs};
constexpr KernelStartSlots kHtStartSlots{kCounterHtRunning, kCounterHtStartNs};
constexpr KernelStartSlots kLlDispatchStartSlots{kCounterLlDispatchRunning, kCounterLlDispatchStartNs};
constexpr KernelStartSlots kLlCombineStartSlots{kCounterLlCombineRunning, kCounterLlCombineStartNs};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// One thread of the kernel, as it starts op `sequence`.
SY_DEVICE void mark_kernel_start(uint64_t* counters, KernelStartSlots slots, uint64_t sequence) {
    ptx::st_relaxed_sys(counters + slots.start_ns, ptx::globaltimer_ns());
    ptx::st_relaxed_sys(counters + slots.running, sequence);
}

// A wait_until details functor (detail 0: the peer's op, detail 1: ns since it started).
struct PeerKernelDetails {
    const uint64_t* peer_counters;
    KernelStartSlots slots;
    SY_DEVICE void operator()(int64_t& running, int64_t& since_start) const {
        running = int64_t(ptx::ld_relaxed_sys(peer_counters + slots.running));
        const uint64_t started = ptx::ld_relaxed_sys(peer_counters + slots.start_ns);
        since_start = started != 0 ? int64_t(ptx::globaltimer_ns() - started) : kPeerKernelNeverStarted;
    }
};

#endif

}  // namespace switchyard::device
