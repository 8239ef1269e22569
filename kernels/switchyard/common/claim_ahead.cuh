// Work claimed at run time from a shared counter, one claim ahead: lane 0 of a warp holds the
// claim for the warp's next range while the warp works on the current one, so the atomic's
// latency hides behind the work. Used where a fixed split of the work over warps would leave the
// grid waiting for its slowest SMs (HT dispatch tokens, HT combine sender groups).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

struct ClaimAhead {
    unsigned long long* counter;   // items claimed so far (reset by the op's last block)
    unsigned long long size;       // items per claim
    unsigned long long ahead = 0;  // lane 0: the warp's next claim

    // Issues the warp's next claim.
    SY_DEVICE void issue() {
        if (ptx::lane_id() == 0) ahead = atomicAdd(counter, size);
    }
    // The first item of the claim issued last (the same on every lane); the next claim is issued
    // only while this one is below `limit` (a warp past the end claims nothing more).
    SY_DEVICE int64_t take(int64_t limit) {
        const int64_t first = int64_t(__shfl_sync(0xffffffffu, ahead, 0));
        if (first < limit) issue();
        return first;
    }
};

#endif

}  // namespace switchyard::device
