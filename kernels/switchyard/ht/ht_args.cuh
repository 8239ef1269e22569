// Argument structs of the high-throughput (HT) kernels, shared by the host launchers and the
// device code. One struct per kernel; the launcher fills it, the kernel reads it by value.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/record_layout.cuh"

namespace switchyard::device {

// Most ranks the HT kernels take (per-destination offsets live in shared memory).
constexpr int kHtMaxRanks = 128;

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

struct HtCommon {
    uint8_t* local_base;
    uint8_t* const* peer_bases;  // [R] device array
    BufferLayout layout;
    Diagnostics diagnostics;
    int32_t rank, num_ranks;
    int32_t num_tokens;  // T of this rank
    int32_t max_tokens;  // T_max (stride of the combine slots)
    int32_t hidden, topk, num_experts, local_experts;
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
    const int32_t* topk_idx;               // [T, K] int32 copy (from the layout kernel)
    const int32_t* token_rank_slot;        // [T, R]
    const int32_t* token_expert_pos;       // [T, K]
    const int32_t* num_tokens_per_rank;    // [R]
    const int32_t* num_tokens_per_expert;  // [E]
    int32_t input_payload;                 // PayloadKind of x
    int32_t quantize;                      // 1: bf16 x quantized to fp8 here
    int32_t scale_kind;                    // ScaleKind of the records
    RecordLayout record;                   // records as they land in the receive region
    int32_t stage_bytes;      // shared memory per pipeline stage (payload + scales of one record)
    int32_t generic_stores;   // 1: lanes copy the staged record with 16-byte stores instead of a bulk store
    int32_t self_bulk;        // 1: this rank's own rows always leave through a bulk store (local memory)
    int32_t claim_tokens;     // > 0: warps claim tokens in chunks of this many (WarpTokens); 0: static ranges
    int32_t counts_notified;  // 1: the layout kernel of this op sent the counts notify (else block 0 does)
    // Outputs for the receiver side (this rank as a destination).
    int32_t* recv_info;  // HtRecvInfoLayout
    int32_t expert_alignment;
    int32_t masked_layout;  // expert offsets are e * R * T_max instead of aligned prefix sums
    int32_t* host_counts;   // mapped host memory or null: [0] = ready flag, [1] = rows, [2] = expert rows,
                            // [3..3+L) per-expert counts
    OpTrace trace;  // SWITCHYARD_TRACE=1: the op's timeline (common/op_trace.cuh); null slots when off
};

struct HtReceiveArgs {
    HtCommon common;
    RecordLayout record;
    const int32_t* recv_info;  // from the dispatch kernel
    int32_t layout_kind;       // 0 rank-major, 1 expert contiguous, 2 expert masked
    int32_t zero_padding;
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
    RecordLayout record;  // combine records (bf16 payload + K weights)
    const int32_t* recv_info;
    int32_t layout_kind;  // of the dispatch
    int32_t mode;         // 0 rank-major sum, 1 expert flat, 2 expert hierarchical
    int32_t weighted;
    int32_t send_warps;   // warps per block that send rows; the others reduce as rows arrive
    int32_t send_group;   // rows a sender warp writes per system fence and arrival (1..32)
    int32_t claim_sends;  // 1: sender warps claim groups of consecutive rows at run time; 0: strided
    int32_t publish;      // 1: one warp per block fences and signals the senders' rows (combine_publish.cuh)
    int32_t entry_handshake;  // 1: announce and wait for entry even right after a dispatch (an A/B knob)
    int32_t split_tail;   // 1: the last chunks are reduced in (token, channel part) items (claimed reduce)
    int32_t bulk_stages;  // > 0: rank-major rows leave through one bulk-copy warp per block with this
                          // many shared-memory stages (combine_bulk_send.cuh); 0: register senders
    const uint8_t* y;     // rows in the dispatch's layout, bf16
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
