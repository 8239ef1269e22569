// Dispatch layout from topk_idx (one block): per-rank and per-expert token counts, the
// token-in-rank mask, each token's slot in each destination rank and each (token, k)'s position
// among this rank's rows for that expert.
//
// Slots are deterministic prefix sums in token order (never racing atomics), so layouts are
// reproducible bit for bit. Warp w owns a contiguous token range; pass 1 counts per warp, a scan
// over warps turns counts into starting offsets, pass 2 walks the same tokens again and writes.
// Expert ids outside [-1, E) are reported as invalid routing before any data moves.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

struct LayoutArgs {
    const void* topk_idx;     // [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;  // in elements
    int32_t num_tokens;
    int32_t topk;  // <= 32
    int32_t num_experts;
    int32_t num_ranks;
    int32_t* num_tokens_per_rank;    // [R]
    int32_t* num_tokens_per_expert;  // [E] (entries of one token to the same expert count twice)
    uint8_t* token_in_rank;          // [T, R] 0/1, may be null
    int32_t* token_rank_slot;        // [T, R] slot in the destination's rows from this rank, -1 if none
    int32_t* token_expert_pos;       // [T, K] position among this rank's (t, k) rows of that expert, -1
    int32_t* topk_copy;  // [T, K] int32 copy of topk_idx (ids out of range become -1), may be null
    Diagnostics diagnostics;
};

// Shared memory of the kernel: per-warp counters for every expert and rank.
SY_HOST_DEVICE int64_t layout_shared_bytes(int num_warps, int num_experts, int num_ranks, int topk = 32) {
    // Per warp: counters for every expert and rank, then a batch of 32 tokens' ids (int64).
    return int64_t(num_warps) * (align_up(int64_t(num_experts + num_ranks) * 4, 8) + 32 * int64_t(topk) * 8);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace layout_detail {

// One token by one warp: lanes k < K hold the top-k entries. Updates the warp's counters and,
// in the writing pass, the token's outputs.
// Ids of the warp's next kLayoutBatch tokens, loaded with all lanes at once: the per-token walk
// then reads shared memory instead of waiting on one global load per token.
constexpr int kLayoutBatch = 32;

template <typename IndexT>
SY_DEVICE void stage_ids(const LayoutArgs& args, int first, int count, int64_t* staged) {
    for (int i = int(ptx::lane_id()); i < count * args.topk; i += 32) {
        const int token = first + i / args.topk, k = i % args.topk;
        staged[i] =
            int64_t(static_cast<const IndexT*>(args.topk_idx)[int64_t(token) * args.topk_row_stride + k]);
    }
    __syncwarp();
}

template <bool kWrite>
SY_DEVICE void process_token(const LayoutArgs& args, int token, const int64_t* staged_ids,
                             int32_t* expert_counts, int32_t* rank_counts, bool& routing_ok) {
    const uint32_t lane = ptx::lane_id();
    const int experts_per_rank = args.num_experts / args.num_ranks;
    const bool active = int(lane) < args.topk;
    int64_t expert = -1;
    if (active) expert = staged_ids[lane];
    const bool bad = active && (expert < -1 || expert >= args.num_experts);
    const uint32_t bad_mask = __ballot_sync(0xffffffffu, bad);
    if (bad_mask != 0) {
        if (int(lane) == __ffs(bad_mask) - 1)
            report_error(args.diagnostics, kErrorInvalidRouting, kPhaseLayout, -1, uint64_t(args.num_experts),
                         uint64_t(expert), 0, token, lane);
        routing_ok = false;
    }
    const bool valid = active && !bad && expert >= 0;
    const uint32_t valid_mask = __ballot_sync(0xffffffffu, valid);

    if constexpr (kWrite) {
        for (int rank = lane; rank < args.num_ranks; rank += 32) {
            args.token_rank_slot[int64_t(token) * args.num_ranks + rank] = -1;
            if (args.token_in_rank) args.token_in_rank[int64_t(token) * args.num_ranks + rank] = 0;
        }
        __syncwarp();
    }
    int position = -1;
    if (valid) {
        // Entries of this token that name the same expert take consecutive positions in k order.
        const int expert32 = static_cast<int>(expert);
        const uint32_t same_expert = __match_any_sync(valid_mask, expert32);
        const int expert_base = expert_counts[expert32];
        position = expert_base + __popc(same_expert & ptx::lanemask_lt());
        // A token goes to each destination rank once: the lowest lane naming that rank owns it.
        const int rank = expert32 / experts_per_rank;
        const uint32_t same_rank = __match_any_sync(valid_mask, rank);
        const bool rank_leader = int(lane) == __ffs(same_rank) - 1;
        const int rank_slot = rank_leader ? rank_counts[rank] : 0;
        __syncwarp(valid_mask);
        if (int(lane) == __ffs(same_expert) - 1) expert_counts[expert32] = expert_base + __popc(same_expert);
        if (rank_leader) {
            rank_counts[rank] = rank_slot + 1;
            if constexpr (kWrite) {
                args.token_rank_slot[int64_t(token) * args.num_ranks + rank] = rank_slot;
                if (args.token_in_rank) args.token_in_rank[int64_t(token) * args.num_ranks + rank] = 1;
            }
        }
    }
    if constexpr (kWrite) {
        if (active && args.token_expert_pos)
            args.token_expert_pos[int64_t(token) * args.topk + lane] = position;
        if (active && args.topk_copy)
            args.topk_copy[int64_t(token) * args.topk + lane] = valid ? int32_t(expert) : -1;
    }
    __syncwarp();
}

}  // namespace layout_detail

template <typename IndexT>
__global__ void __launch_bounds__(1024, 1) layout_kernel(const __grid_constant__ LayoutArgs args) {
    extern __shared__ __align__(16) int32_t shared_counts[];
    const int num_warps = blockDim.x / 32, warp = threadIdx.x / 32;
    const int columns = args.num_experts + args.num_ranks;
    for (int i = threadIdx.x; i < num_warps * columns; i += blockDim.x) shared_counts[i] = 0;
    // Id batches live after all warps' counters (8-byte aligned).
    int64_t* staged_ids =
        reinterpret_cast<int64_t*>(shared_counts + align_up(int64_t(num_warps) * columns, 2)) +
        int64_t(warp) * layout_detail::kLayoutBatch * args.topk;
    __syncthreads();

    int32_t* expert_counts = shared_counts + warp * columns;
    int32_t* rank_counts = expert_counts + args.num_experts;
    const int first = int(int64_t(args.num_tokens) * warp / num_warps);
    const int last = int(int64_t(args.num_tokens) * (warp + 1) / num_warps);
    bool routing_ok = true;
    for (int batch = first; batch < last; batch += layout_detail::kLayoutBatch) {
        const int count = min(layout_detail::kLayoutBatch, last - batch);
        layout_detail::stage_ids<IndexT>(args, batch, count, staged_ids);
        for (int i = 0; i < count; ++i)
            layout_detail::process_token<false>(args, batch + i, staged_ids + i * args.topk, expert_counts,
                                                rank_counts, routing_ok);
        __syncwarp();
    }
    __syncthreads();

    // Exclusive scan over warps, column by column: warp w starts where warps < w ended.
    for (int column = threadIdx.x; column < columns; column += blockDim.x) {
        int32_t running = 0;
        for (int w = 0; w < num_warps; ++w) {
            const int32_t count = shared_counts[w * columns + column];
            shared_counts[w * columns + column] = running;
            running += count;
        }
        if (column < args.num_experts)
            args.num_tokens_per_expert[column] = running;
        else
            args.num_tokens_per_rank[column - args.num_experts] = running;
    }
    __syncthreads();

    for (int batch = first; batch < last; batch += layout_detail::kLayoutBatch) {
        const int count = min(layout_detail::kLayoutBatch, last - batch);
        layout_detail::stage_ids<IndexT>(args, batch, count, staged_ids);
        for (int i = 0; i < count; ++i)
            layout_detail::process_token<true>(args, batch + i, staged_ids + i * args.topk, expert_counts,
                                               rank_counts, routing_ok);
        __syncwarp();
    }
}

#endif

}  // namespace switchyard::device
