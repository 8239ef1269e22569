// The receive half of the LL combine (ll/combine.cuh), on the home rank: once every source has
// arrived, each token's output row reduced in a fixed order from the rows (flat) or the partials
// (hierarchical) sent back.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_reduce.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_combine_detail {

// The home's routing of one token as a warp holds it, loaded before it is used: lane k < K holds
// slot k's raw expert id and (flat combine) its weight. Each receiving warp loads its first
// token's slots before it waits for the arrivals, so after them only the rows' loads remain.
template <typename IndexT>
struct HomeSlots {
    IndexT raw;    // -1 past K
    float weight;  // 0 past K, and in the hierarchical combine (its partials are weighted)
};

template <int kTopk, typename IndexT, bool kWeights>
SY_DEVICE HomeSlots<IndexT> load_home_slots(const LlCombineArgs& args, int32_t t) {
    const int k = int(ptx::lane_id());
    HomeSlots<IndexT> slots{IndexT(-1), 0.0f};
    if (k < kTopk) {
        slots.raw = static_cast<const IndexT*>(args.topk_idx)[int64_t(t) * args.topk_row_stride + k];
        if (kWeights) slots.weight = args.topk_weights[int64_t(t) * args.weights_row_stride + k];
    }
    return slots;
}

// Lane k < K: the expert of the token's slot k, or -1 for an empty or invalid slot and for a
// repeat of an earlier slot's expert (the dispatch sent the token to it once).
template <typename IndexT>
SY_DEVICE int32_t home_slot_expert(const LlCombineArgs& args, const HomeSlots<IndexT>& slots) {
    const int64_t raw = int64_t(slots.raw);
    const int32_t expert = raw < 0 || raw >= args.num_experts ? -1 : int32_t(raw);
    return first_lane_with(expert) ? expert : -1;
}

// Flat receive, item `part` of token t: fma over k ascending of w[t][k] * y(t, k), skipping
// empty slots, repeats and slots whose owner is masked.
template <int kHidden, int kTopk, int kSteps, typename IndexT>
SY_DEVICE void reduce_token(const LlCombineArgs& args, uint8_t* set_base, int32_t t, int part,
                            const HomeSlots<IndexT>& home, const uint32_t* shared_present) {
    const uint32_t lane = ptx::lane_id();
    const int32_t expert = home_slot_expert(args, home);
    const bool valid = expert >= 0 && shared_present[expert / args.local_experts] != 0;
    const float weight = valid ? home.weight : 0.0f;
    const uint32_t slots = __ballot_sync(0xffffffffu, valid);
    const uint8_t* row = valid ? args.buffer.set_layout.combine_row(set_base, int32_t(lane), t,
                                                                    LlSetLayout::combine_row_bytes(kHidden))
                               : nullptr;
    reduce_rows_to<kTopk>(static_cast<uint8_t*>(args.out) + int64_t(t) * args.out_row_stride * 2, row, weight,
                          valid, __popc(slots & ptx::lanemask_lt()), reduce_item<kHidden, kSteps>(part));
}

// Hierarchical receive, item `part` of token t: the sum of the ranks' partials in ascending rank
// order. Each present rank that owns one of the token's experts sent one partial, in the slot of
// its first k.
template <int kHidden, int kTopk, int kSteps, typename IndexT>
SY_DEVICE void reduce_partials(const LlCombineArgs& args, uint8_t* set_base, int32_t t, int part,
                               const HomeSlots<IndexT>& home, const uint32_t* shared_present) {
    const uint32_t lane = ptx::lane_id();
    const int32_t expert = home_slot_expert(args, home);
    const int32_t owner =
        expert >= 0 && shared_present[expert / args.local_experts] != 0 ? expert / args.local_experts : -1;
    // The lowest k of each owner holds its partial; `position` orders those slots by rank.
    const bool holds = first_lane_with(owner);
    const int position = position_among_selected(holds, owner);
    const uint8_t* row = holds ? args.buffer.set_layout.combine_row(set_base, int32_t(lane), t,
                                                                    LlSetLayout::combine_row_bytes(kHidden))
                               : nullptr;
    reduce_rows_to<kTopk>(static_cast<uint8_t*>(args.out) + int64_t(t) * args.out_row_stride * 2, row, 1.0f,
                          holds, position, reduce_item<kHidden, kSteps>(part));
}

// The receive half of every block: items of kLlReduceStepsPerItem steps of a token when they keep
// at least a quarter of the grid's warps busy, else of one step (a few tokens spread over more
// warps). Consecutive items of a token stay on one block. Each warp loads its first token's
// routing while the block waits for the arrivals. Returns early (every thread of the block) when
// the op failed.
template <int kNumWarps, int kHidden, int kTopk, typename IndexT, bool kHierarchical>
SY_DEVICE void reduce_home(const LlCombineArgs& args, const LlCombineShared& shared, uint64_t sequence) {
    const LlBufferArgs& buffer = args.buffer;
    const int global_warp = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    const int num_warps = int(gridDim.x) * kNumWarps;
    constexpr int kItemsPerToken = reduce_items_per_token(kHidden);
    constexpr int kStepsPerToken = reduce_items_per_token(kHidden, 1);
    const bool long_items = int64_t(args.num_tokens) * kItemsPerToken * 4 >= num_warps;
    const int32_t per_token = long_items ? kItemsPerToken : kStepsPerToken;
    const int32_t items = args.num_tokens * per_token;
    auto home_of = [&](int32_t item) {
        return load_home_slots<kTopk, IndexT, !kHierarchical>(args, item / per_token);
    };
    HomeSlots<IndexT> home{IndexT(-1), 0.0f};
    if (global_warp < items) home = home_of(global_warp);
    if (!ll_wait_sources(buffer, kLlCombine, sequence, shared.mask, shared.present, args.wait_time_stats))
        return;
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlCombineWaited);
    uint8_t* set_base = buffer.set_base(buffer.local_base, ll_set_of(sequence));
    for (int32_t item = global_warp; item < items; item += num_warps) {
        const int32_t t = item / per_token, part = item % per_token;
        if (item != global_warp) home = home_of(item);
        if constexpr (kHierarchical) {
            if (long_items)
                reduce_partials<kHidden, kTopk, kLlReduceStepsPerItem, IndexT>(args, set_base, t, part, home,
                                                                               shared.present);
            else
                reduce_partials<kHidden, kTopk, 1, IndexT>(args, set_base, t, part, home, shared.present);
        } else if (long_items) {
            reduce_token<kHidden, kTopk, kLlReduceStepsPerItem, IndexT>(args, set_base, t, part, home,
                                                                        shared.present);
        } else {
            reduce_token<kHidden, kTopk, 1, IndexT>(args, set_base, t, part, home, shared.present);
        }
    }
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlCombineReduced);
}

}  // namespace ll_combine_detail

#endif

}  // namespace switchyard::device
