// Argument structs of the high-throughput (HT) kernels, shared by the host launchers and the
// device code. One struct per kernel; the launcher fills it, the kernel reads it by value. What is
// fixed per op shape (hidden size, top-k, payload and scale kind, receive layout, combine
// reduction) is not here: the launchers pass it as template arguments (src/launch/ht_launch.hpp).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/record_layout.cuh"

namespace switchyard::device {

// Most ranks the HT kernels take (per-destination offsets live in shared memory).
constexpr int kHtMaxRanks = 128;

// Receive layouts, as template arguments of the HT kernels (the values of switchyard::RecvLayout).
enum HtRecvLayout : int32_t { kHtRankMajor = 0, kHtExpertContiguous = 1, kHtExpertMasked = 2 };

// The combine's reductions (DESIGN.md §2), as template arguments of the combine kernel: the
// unweighted sum of rank-major rows, the flat expert-major sum over (token, k) rows, or the
// hierarchical one (each expert rank reduces its rows of a token first).
enum HtCombineMode : int32_t {
    kHtCombineRankMajor = 0,
    kHtCombineExpertFlat = 1,
    kHtCombineHierarchical = 2
};

// Per-rank routing summary the dispatch kernel writes for the receive kernel and for combine
// (device memory owned by the handle). Offsets in ints from the start of the array.
struct HtRecvInfoLayout {
    int32_t num_ranks, local_experts;
    SY_HOST_DEVICE int32_t row_offsets() const { return 0; }                                   // [R + 1]
    SY_HOST_DEVICE int32_t expert_counts() const { return num_ranks + 1; }                     // [L]
    SY_HOST_DEVICE int32_t expert_offsets() const { return expert_counts() + local_experts; }  // [L + 1]
    SY_HOST_DEVICE int32_t source_expert_offsets() const {
        return expert_offsets() + local_experts + 1;
    }  // [R][L]
    SY_HOST_DEVICE int32_t total_ints() const { return source_expert_offsets() + num_ranks * local_experts; }
};

// What every HT kernel needs: this rank's buffer and its peers', and the op's extents.
struct HtCommon {
    uint8_t* local_base;
    uint8_t* const* peer_bases;  // [R] device array
    BufferLayout layout;
    Diagnostics diagnostics;
    int32_t rank, num_ranks;
    int32_t num_tokens;  // T of this rank
    int32_t max_tokens;  // T_max (stride of the combine slots)
    int32_t num_experts, local_experts;
    // 1: a peer that does not come within the timeout is masked (ht_mask_unresponsive_ranks); the
    // op then goes on without it, and later ops skip it (transport/completion.cuh, ht_peer_masked).
    int32_t mask_unresponsive;
};

struct HtDispatchArgs {
    HtCommon common;
    // Inputs (this rank's tokens).
    const uint8_t* x;  // [T, H] bf16 or fp8
    int64_t x_row_stride_bytes;
    const uint32_t* x_scales;  // fp8 input: [T, words] fp32 bits or packed UE8M0, any strides
    int64_t scale_row_stride, scale_col_stride;  // in 4-byte words
    const float* topk_weights;                   // [T, K] or null
    int64_t weights_row_stride;
    const int32_t* topk_idx;               // [T, K] int32 copy (from the routing kernel)
    const int32_t* token_rank_slot;        // [T, R]
    const int32_t* token_expert_pos;       // [T, K]
    const int32_t* num_tokens_per_rank;    // [R]
    const int32_t* num_tokens_per_expert;  // [E]
    int32_t counts_notified;  // 1: the routing kernel of this op sent the counts notify (else block 0 does)
    // 1: the receive kernel is scheduled as this grid starts, to wait at its own start (the rank has
    // its GPU alone); 0: as this grid's blocks exit, so no waiting receive block holds an SM that a
    // co-located rank's kernel needs (launch_context.hpp, gpu_alone).
    int32_t receive_scheduled_early;
    // 1: a routing kernel (a plain launch, after all the work before the op) precedes this grid, so
    // the caller's tokens and the counters the previous op's kernels wrote are final before this
    // grid waits for it: they are read, and the first tokens staged, ahead of the wait. 0 (a cached
    // dispatch): the grid may be chained after any kernel, the previous op's last one included,
    // whose writes are visible only after the wait: nothing is read before it.
    int32_t after_routing;
    // Outputs for the receiver side (this rank as a destination).
    int32_t* recv_info;  // HtRecvInfoLayout
    int32_t expert_alignment;
    int32_t* host_counts;  // mapped host memory or null: [0] = ready flag, [1] = rows, [2] = expert rows,
                           // [3..3+L) per-expert counts
    OpTrace trace;         // SWITCHYARD_TRACE=1: the op's timeline (common/op_trace.cuh); null slots when off
};

struct HtReceiveArgs {
    HtCommon common;
    const int32_t* recv_info;  // from the dispatch kernel
    int32_t zero_padding;      // contiguous layout: zero the padding rows of each expert's segment
    int32_t has_weights;
    // Handle arrays (per rank-major row).
    int32_t* row_src_token;     // [cap]
    int32_t* row_combine_slot;  // [cap]
    int32_t* row_expert_row;    // [cap, K]: expert-major row of (row, k) or -1
    float* row_weights;         // [cap, K]
    // Expert-major outputs.
    uint8_t* out_x;         // [rows, H]
    uint32_t* out_scales;   // [rows, words]
    float* out_weights;     // [rows]
    int32_t* out_num_rows;  // [1] rows written incl. padding (rank-major: valid rows)
    OpTrace trace;  // SWITCHYARD_TRACE=1: the op's timeline (common/op_trace.cuh); null slots when off
};

struct HtCombineArgs {
    HtCommon common;
    const int32_t* recv_info;
    int32_t weighted;  // expert-major: out = sum_k w_k * y_k
    const uint8_t* y;  // rows in the dispatch's layout, bf16
    int64_t y_row_stride_bytes;
    const float* row_weights;  // optional: rank-major [N, K] / expert-major [N] (sent back)
    int64_t row_weights_stride;
    const int32_t* row_src_token;  // handle arrays
    const int32_t* row_combine_slot;
    const int32_t* row_expert_row;
    const float* dispatch_row_weights;  // handle [cap, K]: weights of each received row (hierarchical)
    // Home side.
    const int32_t* topk_idx;         // [T, K] int32 (handle copy)
    const int32_t* token_rank_slot;  // [T, R]
    const float* home_weights;       // [T, K] for weighted flat combine
    int64_t home_weights_stride;
    const uint16_t* bias0;  // [T, H] or null
    const uint16_t* bias1;
    int64_t bias0_stride, bias1_stride;  // elements
    uint16_t* out;                       // [T, H]
    int64_t out_stride;                  // elements
    float* combined_weights;             // [T, K] or null
    OpTrace trace;  // SWITCHYARD_TRACE=1: the op's timeline (common/op_trace.cuh); null slots when off
};

}  // namespace switchyard::device
