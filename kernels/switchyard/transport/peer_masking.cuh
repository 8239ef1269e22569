// Masking a peer that does not come (BufferConfig::ll_mask_unresponsive_ranks and
// ht_mask_unresponsive_ranks): one block of the grid waits for each peer with a bounded wait that
// records no error, masks the peers that did not come, and publishes its decision for the op; the
// other blocks wait for that decision and then read the mask, so every block of the grid agrees on
// the peers of the op.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Spins until *address >= target. False on timeout (no error record) or when the buffer is poisoned.
SY_DEVICE bool wait_bounded(const uint64_t* address, uint64_t target, const Diagnostics& diagnostics) {
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

// The deciding block's thread 0, after the block's masking writes (a block barrier before it):
// op `sequence`'s decision is made.
SY_DEVICE void publish_mask_decision(uint64_t* decided, uint64_t sequence) {
    ptx::fence_acq_rel_sys();
    ptx::st_relaxed_sys(decided, sequence);  // the fence made it a release
}

// Thread 0 of every other block: waits for op `sequence`'s decision. The deciding block takes up to
// one timeout per round of peers; allow it that and slack. A TimeoutError names this rank.
SY_DEVICE bool follow_mask_decision(const uint64_t* decided, uint64_t sequence,
                                    const Diagnostics& diagnostics, int32_t phase, int32_t rank) {
    Diagnostics patient = diagnostics;
    patient.timeout_ns = 2 * diagnostics.timeout_ns + 1000000000ull;
    return wait_at_least(decided, sequence, patient, phase, rank);
}

#endif

}  // namespace switchyard::device
