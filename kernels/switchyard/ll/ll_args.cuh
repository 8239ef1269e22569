// The argument structs of the LL kernels (one per kernel family), filled by their launchers
// (src/launch/ll_*_launch.cpp): what every LL kernel knows about the buffer, and what a dispatch
// and a combine add to it.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

// The halves an LL kernel runs (a template argument): both, or one of them in hook mode.
enum LlPhases : int32_t { kLlSendHalf = 1, kLlRecvHalf = 2, kLlBothHalves = 3 };

// What every LL kernel knows about the buffer: the signalling's view of it, and where its data sets are.
struct LlBufferArgs : LlSignalArgs {
    LlSetLayout set_layout;
    int64_t ll_offset;     // first LL set in every rank's buffer
    int64_t ll_set_bytes;  // stride between the two sets
    OpTrace trace;         // SWITCHYARD_TRACE=1: the op's timeline (common/op_trace.cuh); null slots when off

    SY_HOST_DEVICE uint8_t* set_base(uint8_t* base, int32_t set) const {
        return base + ll_offset + set * ll_set_bytes;
    }
};

struct LlDispatchArgs {
    LlBufferArgs buffer;
    const void* x;            // bf16 [T, H]
    int64_t x_row_stride;     // elements
    const void* topk_idx;     // [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;  // elements
    int32_t num_tokens;       // T of this rank
    int32_t num_experts;      // E
    int32_t local_experts;    // L = E / R
    void* recv_x;             // masked: [L, R*T_ll, H]; contiguous: [recv_rows, H] (fp8 or bf16)
    uint32_t* recv_scales;    // masked: [L, words, R*T_ll]; contiguous: [words, recv_rows] (column-major)
    int32_t* recv_count;      // [L]
    int32_t* recv_expert_offsets;  // [L + 1]: first row of each expert, then the end
    int32_t expert_alignment;      // contiguous layout: expert starts are multiples; 0 = masked
    int64_t recv_rows;             // contiguous layout: rows of recv_x (its capacity)
    int32_t zero_padding;          // contiguous layout: zero the segments' padding rows and their scales
    int32_t* recv_source;          // [L, R*T_ll]: ll_pack_source(s, t, k) of each valid row
    const float* topk_weights;     // optional [T, K] fp32: travel with the tokens (hierarchical combine)
    int64_t weights_row_stride;    // elements
    // Per received record (source s, slot i), for a hierarchical combine: the token's rows here
    // [R*T_ll, K + 1] {home token, then ll_pack_row of slot k or -1}, its weights [R*T_ll, K] (0
    // without topk_weights), and the records per source as a prefix [R + 1].
    int32_t* recv_token_rows;
    float* recv_token_weights;
    int32_t* recv_record_starts;
    int32_t* cumulative_local_expert_recv_stats;  // optional [L]
    int64_t* wait_time_stats;                     // optional [R]
};

struct LlCombineArgs {
    LlBufferArgs buffer;
    const void* y;              // bf16, the dispatch's layout: masked [L, R*T_ll, H] or contiguous [rows, H]
    int64_t y_expert_stride;    // elements (masked layout)
    int64_t y_row_stride;       // elements
    int32_t y_alignment;        // 0: y is masked; > 0: contiguous, expert starts rounded up to this
    const void* topk_idx;       // home: [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;    // elements
    const float* topk_weights;  // home: [T, K] (flat reduction)
    int64_t weights_row_stride;
    void* out;  // home: bf16 [T, H]
    int64_t out_row_stride;
    int32_t num_tokens;  // T of this (home) rank's dispatch
    int32_t num_experts;
    int32_t local_experts;
    const int32_t* recv_count;   // [L] from the dispatch
    const int32_t* recv_source;  // [L, R*T_ll] from the dispatch
    int64_t* wait_time_stats;    // optional [R]
    // Hierarchical: partials per (token, rank), weighted with the dispatch's weights (the
    // dispatch's per-record routing, LlDispatchArgs::recv_token_rows and the rest).
    const int32_t* recv_token_rows;     // [R*T_ll, K + 1]
    const float* recv_token_weights;    // [R*T_ll, K]
    const int32_t* recv_record_starts;  // [R + 1]
};

}  // namespace switchyard::device
