// Arguments of dispatch and combine (DESIGN.md §2), shared by the high-throughput and the
// low-latency paths. Inputs are TensorViews of device memory on the buffer's GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "switchyard/device_tensor.hpp"
#include "switchyard/formats.hpp"
#include "switchyard/op_event.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard {

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
    OpOrder order;        // after the caller's stream, synchronous (op_event.hpp)
};

struct CombineArgs {
    // bf16 rows in exactly the layout the dispatch produced: [rows, H]; masked [L, R*T_max, H] or
    // its flattening [L * R*T_max, H] (the LL combine takes the same two forms). Its shape for given
    // arguments: ht_output_shapes (planning.hpp).
    TensorView y;
    TensorView row_weights;     // optional: rank-major [N, K] / expert-major [N] fp32, sent back
    TensorView topk_weights;    // optional, home rank: [T, K] fp32 for weighted expert-major combine
    TensorView bias0;           // optional [T, H] bf16 on the home rank
    TensorView bias1;           // optional [T, H] bf16 on the home rank
    bool weighted = false;      // expert-major layouts: out = sum_k w_k * y_k
    bool hierarchical = false;  // expert-major layouts: reduce per receiving rank first
    TensorView out;             // optional caller-provided output [T, H] bf16
    int32_t num_sms = 0;
    OpOrder order;
};

// ---------------------------------------------------------------------------------------------
// High-throughput results
// ---------------------------------------------------------------------------------------------
class DispatchHandle;  // the routing of one dispatch (src/core/ht_handle.hpp); reused by combine

struct DispatchResult {
    // Rank-major: views into the buffer's receive region, valid until the next dispatch on this
    // buffer (clone them to keep them longer). Expert-major layouts: memory owned by the result.
    DeviceTensor recv_x;                      // [N, H] (masked: [L, R*T_max, H])
    DeviceTensor recv_scales;                 // fp8 payloads: [N, words] (fp32 or packed UE8M0 int32)
    DeviceTensor recv_topk_idx;               // rank-major: int32 [N, K], local expert id or -1
    DeviceTensor recv_topk_weights;           // rank-major: fp32 [N, K]; expert-major: fp32 [N]
    DeviceTensor num_recv_tokens_per_expert;  // int32 [L] on the GPU (unaligned counts)
    // int32 [1] on the GPU, every layout: the rows of recv_x that hold this op's data. Rank-major:
    // the rows received; contiguous: up to the last segment's end, padding included
    // (recv_expert_offsets[L] of the reference); masked: L * R*T_max, the whole output (expert e's
    // valid rows are its first num_recv_tokens_per_expert[e] of R*T_max).
    DeviceTensor num_recv_rows;
    // Host-synced counts only (CountMode::kHostSynced): num_recv_rows's value on the host (the
    // rows of recv_x and of the combine's y); -1 / empty in device-count mode, where the outputs
    // have the worst case's rows (ht_output_shapes in planning.hpp gives both).
    int64_t host_num_recv_rows = -1;
    std::vector<int32_t> host_num_recv_tokens_per_expert;
    std::shared_ptr<const DispatchHandle> handle;
    OpEvent done;  // when the op has finished (wait on it in asynchronous mode)
};

struct CombineResult {
    DeviceTensor out;                    // [T, H] bf16 (the caller's `out` when given)
    DeviceTensor combined_topk_weights;  // [T, K] fp32 when row weights were sent back
    OpEvent done;
};

// ---------------------------------------------------------------------------------------------
// Low latency (decoding): one kernel per op, no host round-trip, CUDA-graph capturable.
// ---------------------------------------------------------------------------------------------
class LowLatencyHandle;  // routing of one LL dispatch (src/core/ll_handle.hpp)

struct LowLatencyDispatchArgs {
    TensorView x;         // bf16 [T, H], T <= BufferConfig::ll_max_tokens_per_rank
    TensorView topk_idx;  // [T, K] int32 or int64, -1 = empty slot
    // Optional fp32 [T, K]: the top-k weights travel with the tokens (in the records' metadata, no
    // extra transfer), so that a hierarchical ll_combine can weight on the expert ranks.
    TensorView topk_weights;
    int32_t num_experts = 0;
    bool use_fp8 = true;                               // quantize inside the kernel; false = bf16 passthrough
    ScaleFormat scale_format = ScaleFormat::kFloat32;  // kFloat32 or kUE8M0 when use_fp8
    TensorView cumulative_local_expert_recv_stats;     // optional int32 [L]: += received rows
    TensorView wait_time_stats;                        // optional int64 [R]: += ns waited per source
    bool return_recv_hook = false;  // issue only the send half; result.receive() runs the rest
    // Output layout: kExpertMasked ([L, R*T_ll, H], expert e's rows at e * R*T_ll) or
    // kExpertContiguous (experts' rows back to back, each expert's first row a multiple of
    // expert_alignment). There expert e's segment is its count rounded up to the alignment (none
    // when empty), and its rows past the count are padding: all padding lies in
    // [0, recv_expert_offsets[L]), as the HT path and the CPU reference define it. Padding is left
    // unwritten unless zero_padding is set; then the receiving warps zero its payload and its
    // entry in every scale column, from the device-side counts (hook mode and graph capture alike;
    // no extra work when unset). The capacity's rows past recv_expert_offsets[L] are not padding
    // and are never written.
    RecvLayout layout = RecvLayout::kExpertMasked;
    int32_t expert_alignment = 1;  // kExpertContiguous only
    bool zero_padding = false;     // kExpertContiguous only
    // Hook mode: the send half follows `order`; the receive half follows the caller's stream at
    // the time receive() is called, with order.async applied to it as well.
    OpOrder order;
};

struct LowLatencyDispatchResult {
    // Masked: [L, R*T_ll, H]; contiguous: [ll_contiguous_rows, H] (R*T_ll*min(K, L) + L*(alignment - 1)
    // rows of capacity). fp8 or bf16; expert e's recv_count[e] rows start at recv_expert_offsets[e].
    DeviceTensor recv_x;
    // Column-major scales for TMA-fed grouped GEMMs, fp32 (H/128 words) or int32 UE8M0 (H/512):
    // masked [L, R*T_ll, words] with strides {words*R*T_ll, 1, R*T_ll}; contiguous [rows, words]
    // with strides {1, rows}.
    DeviceTensor recv_scales;
    DeviceTensor recv_count;           // int32 [L]
    DeviceTensor recv_expert_offsets;  // int32 [L + 1]: each expert's first row, then the rows used
    std::shared_ptr<const LowLatencyHandle> handle;
    OpEvent done;  // hook mode: the send half's completion
    // Hook mode: launches the receive half on the same stream and returns its completion.
    std::function<OpEvent()> receive;
};

struct LowLatencyCombineArgs {
    // bf16 in the dispatch's layout: masked [L, R*T_ll, H] or its flattening [L * R*T_ll, H] (as the
    // HT combine takes it), contiguous [rows, H]; ll_output_shapes (planning.hpp) gives the shapes.
    TensorView y;
    TensorView topk_idx;      // the dispatch's [T, K] (on this, the home rank)
    TensorView topk_weights;  // fp32 [T, K]: out[t] = sum_k w[t][k] * y(t, k), k ascending, fp32
    // Hierarchical reduction (DESIGN.md §2): each expert rank q reduces its rows of a token in fp32
    // (k ascending, weighted with the weights given to ll_dispatch), rounds that partial to bf16
    // and sends one row per (token, rank) instead of one per (token, k); the home rank sums the
    // partials over q ascending in fp32 and rounds once. Needs the dispatch's topk_weights; the
    // combine's topk_weights must then be left empty (the dispatch's are the ones applied).
    bool hierarchical = false;
    TensorView out;          // optional caller-provided bf16 [T, H]
    bool zero_copy = false;  // y was written into ll_combine_input() (the buffer's send area)
    bool return_recv_hook = false;
    TensorView wait_time_stats;  // optional int64 [R]
    OpOrder order;               // as LowLatencyDispatchArgs::order
};

struct LowLatencyCombineResult {
    DeviceTensor out;
    OpEvent done;
    std::function<OpEvent()> receive;
};

}  // namespace switchyard
