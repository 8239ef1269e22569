// Warp and block primitives: the lowest lane holding a value, and prefix sums across one thread
// block (warp shuffles, then one warp over the warp totals).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Over a full warp: true in the lowest lane holding each non-negative `value` (a negative value
// means "none"); `same` gets the lanes holding the same value. Serves wherever one lane must act
// for a group, e.g. a token's repeated expert counted once, or one lane per destination rank.
SY_DEVICE bool first_lane_with(int32_t value, uint32_t& same) {
    same = __match_any_sync(0xffffffffu, value);
    return value >= 0 && (same & ptx::lanemask_lt()) == 0;
}
SY_DEVICE bool first_lane_with(int32_t value) {
    uint32_t same;
    return first_lane_with(value, same);
}

// Over a full warp: a selected lane's position among the selected lanes, ordered by `key`
// ascending (keys distinct among them); 0 in the others. Every lane takes part in each shuffle (the
// loop is warp-uniform): a shuffle that names lanes which skip it is undefined behaviour.
SY_DEVICE int position_among_selected(bool selected, int32_t key) {
    int position = 0;
    for (uint32_t rest = __ballot_sync(0xffffffffu, selected); rest != 0; rest &= rest - 1) {
        const int32_t other = __shfl_sync(0xffffffffu, key, __ffs(rest) - 1);
        if (selected && other < key) ++position;
    }
    return position;
}

// Inclusive prefix sum over the lanes of a full warp.
SY_DEVICE int64_t warp_inclusive_sum(int64_t value) {
    const int lane = int(threadIdx.x % 32);
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
        const int64_t other = __shfl_up_sync(0xffffffffu, value, offset);
        if (lane >= offset) value += other;
    }
    return value;
}

// Exclusive prefix sums of n values, by one full warp with a single shuffle scan: lane l sums its
// run of consecutive values [l * ceil(n / 32), ...), the warp scans the 32 run sums, and each lane
// then writes its run's prefixes. `value_of(i)` reads value i (called twice per value); `store(i,
// prefix)` writes prefix i, and may overwrite what value_of(i) reads (a lane stores only into its
// own run, after reading it). Returns the total in every lane. (One shuffle scan over the run sums
// instead of a scan step per 32 values: each step is a chain of dependent shuffles.)
template <typename ValueOf, typename Store>
SY_DEVICE int64_t warp_exclusive_scan(int32_t n, ValueOf value_of, Store store) {
    const int32_t per_lane = (n + 31) / 32;
    const int32_t first = int32_t(threadIdx.x % 32) * per_lane;
    const int32_t end = first + per_lane < n ? first + per_lane : n;
    int64_t run = 0;
    for (int32_t i = first; i < end; ++i) run += value_of(i);
    const int64_t inclusive = warp_inclusive_sum(run);
    int64_t prefix = inclusive - run;
    for (int32_t i = first; i < end; ++i) {
        const int64_t value = value_of(i);
        store(i, prefix);
        prefix += value;
    }
    return __shfl_sync(0xffffffffu, inclusive, 31);
}

// Exclusive prefix sum of `value` over threads 0..threadIdx.x-1 of the block; `total` gets the
// block's sum. Every thread of the block must call it (it synchronizes the block three times); the block
// size is a multiple of 32.
SY_DEVICE int64_t block_exclusive_sum(int64_t value, int64_t& total) {
    __shared__ int64_t warp_sums[33];  // exclusive sum per warp, then the block's total
    const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), warps = int(blockDim.x / 32);
    const int64_t inclusive = warp_inclusive_sum(value);
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        const int64_t sum = lane < warps ? warp_sums[lane] : 0;
        const int64_t prefix = warp_inclusive_sum(sum);
        if (lane < warps) warp_sums[lane] = prefix - sum;
        if (lane == 31) warp_sums[32] = prefix;
    }
    __syncthreads();
    const int64_t before = warp_sums[warp] + inclusive - value;
    total = warp_sums[32];
    __syncthreads();  // warp_sums may be reused by the next call
    return before;
}

#endif

}  // namespace switchyard::device
