// Synchronisation shared by the LL kernels: the per-op sequence numbers (device counters, so
// CUDA-graph replays stay valid), the "last block publishes" step, and the wait for every source's
// signal, with optional masking of a source that does not arrive in time.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ll/ll_layout.cuh"

namespace switchyard::device {

// What every LL kernel knows about the buffer (filled by the host from its LaunchContext).
struct LlBufferArgs {
    uint8_t* const* peer_bases;  // [R] each rank's buffer base as mapped here (device array)
    uint8_t* local_base;
    WorkspaceLayout workspace;
    LlSignalLayout signals;
    LlSetLayout set_layout;
    int64_t ll_offset;     // first LL set in every rank's buffer
    int64_t ll_set_bytes;  // stride between the two sets
    int32_t rank;
    int32_t num_ranks;
    int32_t mask_unresponsive;  // 1: a source that times out is masked instead of failing the op
    Diagnostics diagnostics;

    SY_HOST_DEVICE uint8_t* set_base(uint8_t* base, int32_t set) const {
        return base + ll_offset + set * ll_set_bytes;
    }
    SY_HOST_DEVICE uint8_t* signal_area() const { return workspace.ll_signals(local_base); }
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Block prologue: reads this op's send and receive sequence numbers (counter + 1) into
// `shared_sequences` and the mask snapshot into `shared_mask` [R]. The last block to have read them
// advances the counters of the halves this kernel runs; the next LL kernel in the stream sees them.
// Returns false (in every thread of the block) when the buffer is already poisoned: an op queued
// behind a failed one must neither send nor signal, or peers would consume its garbage.
template <bool kSend, bool kRecv>
SY_DEVICE bool ll_prologue(const LlBufferArgs& buffer, uint64_t* shared_sequences, uint32_t* shared_mask) {
    __shared__ int healthy;
    uint64_t* counters = buffer.workspace.counters(buffer.local_base);
    if (threadIdx.x == 0) {
        shared_sequences[0] = ptx::ld_relaxed_sys(counters + kCounterLlSend) + 1;
        shared_sequences[1] = ptx::ld_relaxed_sys(counters + kCounterLlRecv) + 1;
        healthy = !is_poisoned(buffer.diagnostics);
    }
    const uint32_t* mask = buffer.signals.mask(buffer.signal_area());
    for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x)
        shared_mask[s] = ptx::ld_relaxed_gpu(mask + s);
    __syncthreads();
    if (threadIdx.x == 0) {
        ptx::fence_acq_rel_gpu();
        auto* arrived = reinterpret_cast<unsigned long long*>(counters + kCounterLlBlocksDone2);
        if (atomicAdd(arrived, 1ull) == gridDim.x - 1) {
            ptx::fence_acq_rel_gpu();
            *arrived = 0;
            if (kSend) counters[kCounterLlSend] = shared_sequences[0];
            if (kRecv) counters[kCounterLlRecv] = shared_sequences[1];
        }
    }
    return healthy != 0;
}

// Every block calls this after its sends: each block fences its writes (system scope) and arrives
// on the local counter; returns true in the last block to arrive (which resets the counter). All
// data of all blocks is then visible to whoever acquires what the last block releases.
SY_DEVICE bool ll_last_block_arrives(uint64_t* counters, uint32_t* shared_flag) {
    __syncthreads();
    if (threadIdx.x == 0) {
        ptx::fence_acq_rel_sys();
        auto* arrived = reinterpret_cast<unsigned long long*>(counters + kCounterLlBlocksDone);
        const bool last = atomicAdd(arrived, 1ull) == gridDim.x - 1;
        if (last) {
            ptx::fence_acq_rel_sys();
            *arrived = 0;
        }
        *shared_flag = last ? 1u : 0u;
    }
    __syncthreads();
    return *shared_flag != 0;
}

// Spins until *address >= target. False on timeout (no error record) or when the buffer is poisoned.
SY_DEVICE bool ll_wait_bounded(const uint64_t* address, uint64_t target, const Diagnostics& diagnostics) {
    if (ptx::ld_acquire_sys(address) >= target) return true;
    const uint64_t start = ptx::globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
        if (ptx::ld_acquire_sys(address) >= target) return true;
        if ((spin & 63u) == 0) {
            if (is_poisoned(diagnostics)) return false;
            if (ptx::globaltimer_ns() - start > diagnostics.timeout_ns) return false;
        }
    }
}

// Block-level wait until every unmasked source's signal of `kind` reached `sequence`. Fills
// `shared_present` [R] (1 = the source's data of this op is here). Without masking a source that
// does not arrive in time is a TimeoutError; with masking, block 0 masks it and publishes its
// decision, which the other blocks follow, so all blocks agree on the sources. Returns false when
// the op failed (the buffer is poisoned); all threads return the same value.
SY_DEVICE bool ll_wait_sources(const LlBufferArgs& buffer, int32_t kind, uint64_t sequence,
                               const uint32_t* shared_mask, uint32_t* shared_present,
                               int64_t* wait_time_stats) {
    uint8_t* signals = buffer.signal_area();
    const int32_t set = ll_set_of(sequence);
    const uint64_t* flags = buffer.signals.flags(signals, kind, set);
    const int32_t phase = kind == kLlDispatch ? kPhaseLlDispatch : kPhaseLlCombine;
    const bool record_stats = wait_time_stats != nullptr && blockIdx.x == 0;
    if (!buffer.mask_unresponsive) {
        for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x) {
            shared_present[s] = shared_mask[s] == 0;
            if (shared_mask[s]) continue;
            const uint64_t start = ptx::globaltimer_ns();
            wait_at_least(flags + s, sequence, buffer.diagnostics, phase, s);
            if (record_stats)
                atomicAdd(reinterpret_cast<unsigned long long*>(wait_time_stats + s),
                          (unsigned long long)(ptx::globaltimer_ns() - start));
        }
        __syncthreads();
        const bool ok = !is_poisoned(buffer.diagnostics);
        __syncthreads();
        return ok;
    }
    uint32_t* mask = buffer.signals.mask(signals);
    uint64_t* decided = buffer.signals.decided(signals, kind, set);
    if (blockIdx.x == 0) {
        for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x) {
            if (shared_mask[s]) continue;
            const uint64_t start = ptx::globaltimer_ns();
            const bool arrived = ll_wait_bounded(flags + s, sequence, buffer.diagnostics);
            if (!arrived && !is_poisoned(buffer.diagnostics)) atomicExch(mask + s, 1u);
            if (record_stats)
                atomicAdd(reinterpret_cast<unsigned long long*>(wait_time_stats + s),
                          (unsigned long long)(ptx::globaltimer_ns() - start));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            ptx::fence_acq_rel_sys();
            ptx::st_release_sys(decided, sequence);
        }
    } else if (threadIdx.x == 0) {
        // Block 0 decides within one timeout per round of sources; allow it that and slack.
        Diagnostics patient = buffer.diagnostics;
        patient.timeout_ns = 2 * buffer.diagnostics.timeout_ns + 1000000000ull;
        wait_at_least(decided, sequence, patient, phase, buffer.rank);
    }
    __syncthreads();
    for (int s = threadIdx.x; s < buffer.num_ranks; s += blockDim.x)
        shared_present[s] = ptx::ld_relaxed_gpu(mask + s) == 0;
    __syncthreads();
    const bool ok = !is_poisoned(buffer.diagnostics);
    __syncthreads();
    return ok;
}

#endif

}  // namespace switchyard::device
