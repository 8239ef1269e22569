// What the LL kernels signal between ranks: the per-op sequence numbers (device counters, so
// CUDA-graph replays stay valid), the per-source arrival counters that sending blocks raise, and
// the bounded wait for every source's arrivals, with optional masking of a source that does not
// arrive in time. The kernels' data (records, headers, combine rows) is in ll/ll_layout.cuh.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/transport/peer_masking.cuh"

namespace switchyard::device {

// What the LL signalling needs to know about the buffer (the LL kernels' argument structs extend
// it with their data, ll/ll_args.cuh).
struct LlSignalArgs {
    uint8_t* const* peer_bases;  // [R] each rank's buffer base as mapped here (device array)
    uint8_t* local_base;
    WorkspaceLayout workspace;
    LlSignalLayout signals;
    int32_t rank;
    int32_t num_ranks;
    int32_t mask_unresponsive;  // 1: a source that times out is masked instead of failing the op
    Diagnostics diagnostics;

    SY_HOST_DEVICE uint8_t* signal_area() const { return workspace.ll_signals(local_base); }
};

// Arrivals. A sending block raises, at every unmasked destination, that destination's arrival
// counter of (kind, set, this source) once, after all its stores (system fence, release add). The
// counters only grow: block 0 adds 2^32 - S + 1 and the S - 1 other sending blocks add 1, so each
// op adds exactly 2^32 however many blocks sent, and a receiver needs no count from the sender.
// Op `sequence` (of its kind) is the ceil(sequence / 2)-th op of that kind on its set, so its data
// is complete once the counter reaches ll_arrival_target(sequence). A single counter per source
// replaces a grid-wide "last block publishes" election: no block waits for another block of its
// own grid.
SY_HOST_DEVICE constexpr uint64_t ll_arrival_target(uint64_t sequence) {
    return ((sequence + 1) / 2) << 32;
}

// What sending block `block` of `sending_blocks` adds to each destination's counter.
SY_HOST_DEVICE constexpr uint64_t ll_arrival_amount(uint32_t block, int32_t sending_blocks) {
    return block == 0 ? (uint64_t(1) << 32) - uint64_t(sending_blocks) + 1 : 1;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The workspace counters that hold the latest send and receive sequence of op kind `kind`.
SY_HOST_DEVICE constexpr int32_t ll_send_counter(int32_t kind) {
    return kind == kLlDispatch ? kCounterLlDispatchSend : kCounterLlCombineSend;
}
SY_HOST_DEVICE constexpr int32_t ll_recv_counter(int32_t kind) {
    return kind == kLlDispatch ? kCounterLlDispatchRecv : kCounterLlCombineRecv;
}

// (Spelled out rather than returning the namespace-scope constants: nvcc, which compiles the GIN
// kernels, does not let device code read a host constexpr object.)
SY_HOST_DEVICE constexpr KernelStartSlots ll_start_slots(int32_t kind) {
    return kind == kLlDispatch ? KernelStartSlots{kCounterLlDispatchRunning, kCounterLlDispatchStartNs,
                                                  kCounterLlDispatchArrived}
                               : KernelStartSlots{kCounterLlCombineRunning, kCounterLlCombineStartNs,
                                                  kCounterLlCombineArrived};
}

// Block prologue: reads this op's send and receive sequence numbers (counter + 1, the counters of
// op kind `kKind`) into `shared_sequences` and the mask snapshot into `shared_mask` [R], then
// synchronises the block. Returns false (in every thread of the block) when the buffer is already
// poisoned: an op queued behind a failed one must neither send nor signal, or peers would consume
// its garbage. Every block must then call ll_block_done once, on every path.
template <int32_t kKind, bool kSend, bool kRecv>
SY_DEVICE bool ll_prologue(const LlSignalArgs& buffer, uint64_t* shared_sequences, uint32_t* shared_mask) {
    __shared__ int healthy;
    uint64_t* counters = buffer.workspace.counters(buffer.local_base);
    if (threadIdx.x == 0) {
        shared_sequences[0] = ptx::ld_relaxed_sys(counters + ll_send_counter(kKind)) + 1;
        shared_sequences[1] = ptx::ld_relaxed_sys(counters + ll_recv_counter(kKind)) + 1;
        healthy = !is_poisoned(buffer.diagnostics);
        if (kSend && blockIdx.x == 0) mark_kernel_start(counters, ll_start_slots(kKind), shared_sequences[0]);
    }
    const uint32_t* mask = buffer.signals.mask(buffer.signal_area());
    for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x)
        shared_mask[s] = ptx::ld_relaxed_gpu(mask + s);
    __syncthreads();
    return healthy != 0;
}

// After its prologue, the block's last thread arrives on the prologue counter; the last block to
// arrive advances the counters of the halves this kernel runs, which the next LL kernel in the
// stream reads (so every block must have read them first: the prologue's barrier orders thread
// 0's reads before this). The arrival's atomic returns a value, a global round trip the thread
// waits for: the kernels call this where the block waits anyway (before the arrival wait, or at
// the end of a send-only kernel), not between the prologue and the first sends, where the next
// block barrier would make every warp wait for it.
template <int32_t kKind, bool kSend, bool kRecv>
SY_DEVICE void ll_block_done(const LlSignalArgs& buffer, const uint64_t* shared_sequences) {
    if (threadIdx.x != blockDim.x - 1) return;
    uint64_t* counters = buffer.workspace.counters(buffer.local_base);
    ptx::fence_acq_rel_gpu();
    auto* arrived = reinterpret_cast<unsigned long long*>(counters + kCounterLlBlocksDone);
    if (atomicAdd(arrived, 1ull) == gridDim.x - 1) {
        ptx::fence_acq_rel_gpu();
        *arrived = 0;
        if (kSend) counters[ll_send_counter(kKind)] = shared_sequences[0];
        if (kRecv) counters[ll_recv_counter(kKind)] = shared_sequences[1];
    }
}

// Blocks that send (and arrive): `items_per_warp` work items per warp, at least one (block 0 also
// writes what an empty op must publish), at most the grid. Fewer senders mean fewer system fences
// and remote adds per op but more items in a row per warp; the other blocks only receive.
SY_DEVICE int32_t ll_sending_blocks(int64_t items, int32_t warps_per_block, int32_t items_per_warp) {
    const int64_t per_block = int64_t(warps_per_block) * items_per_warp;
    const int64_t wanted = (items + per_block - 1) / per_block;
    return int32_t(wanted < 1 ? 1 : (wanted > int64_t(gridDim.x) ? int64_t(gridDim.x) : wanted));
}

// Called by every sending block after its stores (all threads): raises this rank's arrival counter
// of `kind` at every unmasked destination.
SY_DEVICE void ll_arrive(const LlSignalArgs& buffer, int32_t kind, uint64_t sequence, int32_t sending_blocks,
                         const uint32_t* shared_mask) {
    __syncthreads();
    const int32_t set = ll_set_of(sequence);
    for (int q = threadIdx.x; q < buffer.num_ranks; q += blockDim.x) {
        if (shared_mask[q]) continue;
        uint64_t* counters =
            buffer.signals.arrivals(buffer.workspace.ll_signals(buffer.peer_bases[q]), kind, set);
        const uint64_t amount = ll_arrival_amount(blockIdx.x, sending_blocks);
        ptx::fence_acq_rel_sys();
        ptx::red_add_relaxed_sys(counters + buffer.rank, amount);  // the fence made it a release
    }
    if (blockIdx.x == 0) {
        // For a peer's timeout report: block 0 has raised its arrivals of this op everywhere.
        __syncthreads();
        if (threadIdx.x == 0)
            ptx::st_relaxed_sys(buffer.workspace.counters(buffer.local_base) + ll_start_slots(kind).arrived,
                                sequence);
    }
}

// Without masking, waits for source s's arrivals of `kind` for op `sequence`; a timeout is an
// error record whose details `details` fills in. The record's expected value carries the op's set
// in bit 0 (a target's low 32 bits are zero): ops n and n + 1 of a kind have the same target on
// different sets.
template <typename Details>
SY_DEVICE void ll_wait_arrivals(const LlSignalArgs& buffer, int32_t kind, uint64_t sequence, int32_t s,
                                const Details& details) {
    const int32_t set = ll_set_of(sequence);
    const uint64_t target = ll_arrival_target(sequence);
    wait_until(
        buffer.signals.arrivals(buffer.signal_area(), kind, set) + s,
        [target](uint64_t value) { return value >= target; }, buffer.diagnostics,
        kind == kLlDispatch ? kPhaseLlDispatch : kPhaseLlCombine, s, target | uint64_t(set), details);
}

// What a timeout report says of a source s of this node: the send sequence of its latest kernel of
// `kind` and when it started (or that it never did), whether it is poisoned or has masked this
// rank, and the latest op whose arrivals its block 0 raised.
SY_DEVICE PeerKernelDetails ll_peer_details(const LlSignalArgs& buffer, int32_t kind, int32_t s) {
    uint8_t* peer = buffer.peer_bases[s];
    return PeerKernelDetails{buffer.workspace.counters(peer), ll_start_slots(kind),
                             buffer.workspace.poison(peer),
                             buffer.signals.mask(buffer.workspace.ll_signals(peer)) + buffer.rank};
}

// Block-level wait until the arrivals of `kind` for op `sequence` of every unmasked source that
// `selected(s)` picks are complete, filling `shared_present` [R] for those (1 = the source's data of
// this op is here; other entries are left as they are). Without masking, `wait_one(s)` waits for
// source s and a source that does not arrive in time is a TimeoutError; with masking, block 0
// waits quietly, masks a source that does not arrive, and publishes its decision on `decided`,
// which the other blocks follow, so all blocks agree on the sources. Returns false (in every
// thread) when the op failed (the buffer is poisoned).
template <typename Selected, typename WaitOne>
SY_DEVICE bool ll_wait_selected_sources(const LlSignalArgs& buffer, int32_t kind, uint64_t sequence,
                                        const uint32_t* shared_mask, uint32_t* shared_present,
                                        int64_t* wait_time_stats, uint64_t* decided, Selected selected,
                                        WaitOne wait_one) {
    uint8_t* signals = buffer.signal_area();
    const bool record_stats = wait_time_stats != nullptr && blockIdx.x == 0;
    auto record = [&](int32_t s, uint64_t start) {
        if (record_stats)
            atomicAdd(reinterpret_cast<unsigned long long*>(wait_time_stats + s),
                      (unsigned long long)(ptx::globaltimer_ns() - start));
    };
    if (!buffer.mask_unresponsive) {
        for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x) {
            if (!selected(s)) continue;
            shared_present[s] = shared_mask[s] == 0;
            if (shared_mask[s]) continue;
            const uint64_t start = ptx::globaltimer_ns();
            wait_one(s);
            record(s, start);
        }
        return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
    }
    uint32_t* mask = buffer.signals.mask(signals);
    if (blockIdx.x == 0) {
        const uint64_t* arrivals = buffer.signals.arrivals(signals, kind, ll_set_of(sequence));
        const uint64_t target = ll_arrival_target(sequence);
        for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x) {
            if (!selected(s) || shared_mask[s]) continue;
            const uint64_t start = ptx::globaltimer_ns();
            const bool arrived = wait_bounded(arrivals + s, target, buffer.diagnostics);
            if (!arrived && !is_poisoned(buffer.diagnostics)) atomicExch(mask + s, 1u);
            record(s, start);
        }
        __syncthreads();
        if (threadIdx.x == 0) publish_mask_decision(decided, sequence);
    } else if (threadIdx.x == 0) {
        follow_mask_decision(decided, sequence, buffer.diagnostics,
                             kind == kLlDispatch ? kPhaseLlDispatch : kPhaseLlCombine, buffer.rank);
    }
    __syncthreads();
    for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x)
        if (selected(s)) shared_present[s] = ptx::ld_relaxed_gpu(mask + s) == 0;
    return __syncthreads_and(!is_poisoned(buffer.diagnostics)) != 0;
}

// ll_wait_selected_sources over every source of one node.
SY_DEVICE bool ll_wait_sources(const LlSignalArgs& buffer, int32_t kind, uint64_t sequence,
                               const uint32_t* shared_mask, uint32_t* shared_present,
                               int64_t* wait_time_stats) {
    return ll_wait_selected_sources(
        buffer, kind, sequence, shared_mask, shared_present, wait_time_stats,
        buffer.signals.decided(buffer.signal_area(), kind, ll_set_of(sequence)), [](int32_t) { return true; },
        [&](int32_t s) { ll_wait_arrivals(buffer, kind, sequence, s, ll_peer_details(buffer, kind, s)); });
}

#endif

}  // namespace switchyard::device
