// The sizes the LL combine kernel and its launcher agree on: its shared memory and its work items
// (slices of a row sent back, steps of a token reduced).
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

// Mask and presence [R each], the rows' prefix over experts [L + 1], for a contiguous y each
// expert's first row of y [L + 1], and (hierarchical) the records' prefix over sources [R + 1].
SY_HOST_DEVICE int64_t ll_combine_shared_bytes(int32_t num_ranks, int32_t local_experts) {
    return 4 * (3 * int64_t(num_ranks) + 1 + 2 * (int64_t(local_experts) + 1)) + 64;
}

// A row goes back in slices of 512-byte steps that separate warps copy in parallel (a warp per
// row keeps too few loads in flight).
constexpr int kLlCombineStepsPerSlice = 4;
SY_HOST_DEVICE constexpr int ll_combine_slices(int hidden) {
    return int(((int64_t(hidden) * 2 + 511) / 512 + kLlCombineStepsPerSlice - 1) / kLlCombineStepsPerSlice);
}

// The reductions (flat receive, hierarchical send and receive) work in items of kSteps
// 256-channel steps of one token: a lane holds eight channels of each step, and every step of
// every row of a batch is loaded before any is added. Many steps per item keep more loads in
// flight per warp; one step per item spreads a few tokens over more warps.
constexpr int kLlReduceStepsPerItem = 4;  // a receive with enough tokens
// The hierarchical send: while its records' four-step items would fit the grid's warps in one
// round, one step per item (a few tokens over many warps); else items of seven steps, four rows'
// loads in flight at a time (registers), so that at hidden 7168 the records of 128 tokens from two
// ranks fit the warps of a full H200 grid in one round. Only these two shapes: a third grows the
// kernel's code, which costs instruction fetch on every path.
constexpr int kLlWideSendSteps = 7;
constexpr int kLlWideSendBatch = 4;
SY_HOST_DEVICE constexpr int reduce_items_per_token(int hidden, int steps = kLlReduceStepsPerItem) {
    return ((hidden + 255) / 256 + steps - 1) / steps;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The combine kernel's dynamic shared memory as ll_combine_shared_bytes lays it out.
struct LlCombineShared {
    uint32_t* mask;          // [R] the mask snapshot of the prologue
    uint32_t* present;       // [R] receive: 1 = the source's data of this op is here
    int32_t* row_starts;     // [L + 1] send: the valid rows of the experts before e, then of all
    int32_t* y_starts;       // [L + 1] send, contiguous y: each expert's first row of y
    int32_t* record_starts;  // [R + 1] hierarchical send: the records in send order, as a prefix

    SY_DEVICE static LlCombineShared carve(int32_t* words, int32_t num_ranks, int32_t local_experts) {
        LlCombineShared shared;
        shared.mask = reinterpret_cast<uint32_t*>(words);
        shared.present = shared.mask + num_ranks;
        shared.row_starts = reinterpret_cast<int32_t*>(shared.present + num_ranks);
        shared.y_starts = shared.row_starts + local_experts + 1;
        shared.record_starts = shared.y_starts + local_experts + 1;
        return shared;
    }
};

#endif

}  // namespace switchyard::device
