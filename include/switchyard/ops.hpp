// Arguments of dispatch and combine (DESIGN.md §2), shared by the high-throughput and the
// low-latency paths. Inputs are TensorViews of device memory on the buffer's GPU.
#pragma once

#include <cstdint>

#include "switchyard/tensor.hpp"

namespace switchyard {

// How received rows are laid out (DESIGN.md §2).
enum class RecvLayout : uint8_t {
    kRankMajor,         // one row per (source rank, token), ordered by source then token
    kExpertContiguous,  // one row per (source, token, k), grouped by local expert, aligned segments
    kExpertMasked,      // [L, R*T_max, H]: expert e's first count[e] rows are valid
};

// Scales that travel with an FP8 payload, one per 128 channels.
enum class ScaleFormat : uint8_t {
    kNone,     // bf16 payload
    kFloat32,  // fp32 [T, ceil(H/128)]
    kUE8M0,    // exponent bytes packed four per int32: [T, ceil(H/512)]
};

// Host-synced: the call returns exact counts on the host and sizes outputs exactly (not
// graph-capturable). Device: outputs sized for the worst case, true counts stay on the GPU.
enum class CountMode : uint8_t { kHostSynced, kDevice };

struct DispatchArgs {
    TensorView x;             // [T, H] bf16, or fp8 e4m3 (then x_scales is required); any row stride
    TensorView x_scales;      // fp32 [T, ceil(H/128)] or int32 [T, ceil(H/512)]; any strides
    TensorView topk_idx;      // [T, K] int32 or int64, -1 = empty slot
    TensorView topk_weights;  // optional [T, K] fp32
    int32_t num_experts = 0;  // E, E % R == 0
    RecvLayout layout = RecvLayout::kRankMajor;
    int32_t expert_alignment = 1;  // contiguous layout only
    bool zero_padding = false;     // contiguous layout only
    bool quantize_fp8 = false;     // bf16 input quantized to fp8 inside the dispatch
    ScaleFormat quantize_format = ScaleFormat::kFloat32;
    CountMode counts = CountMode::kHostSynced;
    int32_t num_sms = 0;  // 0 = the buffer's setting or the analytical SM model
};

struct CombineArgs {
    TensorView y;             // bf16 rows in exactly the layout the dispatch produced
    TensorView row_weights;   // optional: rank-major [N, K] / expert-major [N] fp32, sent back
    TensorView topk_weights;  // optional, home rank: [T, K] fp32 for weighted expert-major combine
    TensorView bias0;         // optional [T, H] bf16 on the home rank
    TensorView bias1;         // optional [T, H] bf16 on the home rank
    bool weighted = false;      // expert-major layouts: out = sum_k w_k * y_k
    bool hierarchical = false;  // expert-major layouts: reduce per receiving rank first
    TensorView out;           // optional caller-provided output [T, H] bf16
    int32_t num_sms = 0;
};

}  // namespace switchyard
