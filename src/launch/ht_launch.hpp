// Launchers of the high-throughput (HT) kernels, one per kernel family: routing (for an HT
// dispatch), dispatch, receive and combine. Core validates a call, plans it (HtDispatchPlan,
// HtCombinePlan) and allocates its outputs; a launcher fills its kernel's argument struct
// (kernels/switchyard/ht/ht_args.cuh) from the plan and the views, and spells the kernel's template
// arguments: the launch constants (threads, warps, shared memory; core/tuning.hpp), each passed to
// both the template and the launch, and what is fixed per op shape (HtDispatchKernelShape, ...).
#pragma once

#include <cstdint>
#include <vector>

#include "jit/jit.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/ops.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::launch {

// The extents of one HT op on this rank.
struct HtExtents {
    int32_t num_tokens = 0;  // T of this rank
    int32_t max_tokens = 0;  // T_max of the buffer
    int32_t hidden = 0, topk = 0, num_experts = 0, local_experts = 0;
};

// What core decided for one dispatch (or cached dispatch).
struct HtDispatchPlan {
    HtExtents extents;
    int32_t input_payload = device::kPayloadBf16;  // x's PayloadKind (bf16 with a scale kind: quantized)
    int32_t scale_kind = device::kScaleNone;       // the records' ScaleKind
    device::RecordLayout record{};                 // the records as they land in the receive region
    bool index_is_int64 = false;                   // topk_idx's type
    bool cached = false;  // routing from a handle: no routing kernel, the dispatch kernel notifies
    bool has_weights = false;
    RecvLayout layout = RecvLayout::kRankMajor;
    int32_t expert_alignment = 1;
    bool zero_padding = false;
    bool host_synced = false;  // the host waits for this rank's counts between dispatch and receive
    int num_sms = 1;
    // Ranks on several nodes: the hierarchical kernels (launch/hier_launch.hpp) on the network
    // backend of the buffer (GIN kernels come from the nvcc path).
    int32_t num_nodes = 1, ranks_per_node = 1;
    bool gin = false;
    bool hierarchical() const { return num_nodes > 1; }
    // Rows of the outputs: the worst case until the host has this rank's counts (host-synced).
    int64_t rows = 0;         // rank-major
    int64_t expert_rows = 0;  // expert-major (masked: L * R * T_max)
};

// Device memory one dispatch reads and writes. The routing arrays belong to the dispatch's handle
// (written by the routing kernel, or those of the handle a cached dispatch reuses).
struct HtDispatchViews {
    TensorView x, x_scales, topk_idx, topk_weights;  // the caller's inputs, validated
    int32_t* token_rank_slot = nullptr;              // [T, R]
    int32_t* token_expert_pos = nullptr;             // [T, K]
    int32_t* topk_copy = nullptr;                    // [T, K] int32 copy of topk_idx
    float* weights_copy = nullptr;                   // [T, K] copy of topk_weights, or null
    int32_t* num_tokens_per_rank = nullptr;          // [R]
    int32_t* num_tokens_per_expert = nullptr;        // [E]
    int32_t* recv_info = nullptr;                    // device::HtRecvInfoLayout
    int32_t* host_counts = nullptr;                  // host-synced: mapped host memory for the counts
    // Hierarchical: the node streams (routing kernel) and what the forwarders keep for the combine.
    int32_t* token_node_slot = nullptr;      // [T, N]
    int32_t* num_tokens_per_node = nullptr;  // [N]
    int32_t* forward_meta = nullptr;         // [N][T_max][HierForwardMeta words]
    int32_t* forward_counts = nullptr;       // [N]
    // Per received rank-major row (for combine), and the expert-major outputs.
    int32_t* row_src_token = nullptr;
    int32_t* row_combine_slot = nullptr;
    int32_t* row_expert_row = nullptr;
    float* row_weights = nullptr;
    uint8_t* out_x = nullptr;
    uint32_t* out_scales = nullptr;
    float* out_weights = nullptr;
    int32_t* out_num_rows = nullptr;
    device::OpTrace trace{};  // the op's timeline (SWITCHYARD_TRACE=1), shared by its three kernels
};

// The dispatch's kernels, in stream order: routing (not for a cached dispatch), dispatch, and,
// once the outputs are allocated, receive.
void launch_ht_routing(const LaunchContext& context, const HtDispatchPlan& plan,
                       const HtDispatchViews& views);
void launch_ht_dispatch(const LaunchContext& context, const HtDispatchPlan& plan,
                        const HtDispatchViews& views);
void launch_ht_receive(const LaunchContext& context, const HtDispatchPlan& plan,
                       const HtDispatchViews& views);

// What core decided for one combine.
struct HtCombinePlan {
    HtExtents extents;
    int32_t mode = device::kHtCombineRankMajor;  // device::HtCombineMode
    bool weighted = false;
    int num_sms = 1;
    int32_t num_nodes = 1, ranks_per_node = 1;  // as HtDispatchPlan
    bool gin = false;
    bool hierarchical() const { return num_nodes > 1; }
};

struct HtCombineViews {
    TensorView y;                       // rows in the dispatch's layout (a masked y as [L * R * T_max, H])
    TensorView row_weights;             // optional, sent back
    TensorView home_weights;            // weighted flat combine: [T, K] on this (home) rank
    TensorView bias0, bias1;            // optional [T, H]
    TensorView out;                     // [T, H] bf16
    float* combined_weights = nullptr;  // [T, K] or null
    // The dispatch handle's arrays.
    const int32_t* recv_info = nullptr;
    const int32_t* row_src_token = nullptr;
    const int32_t* row_combine_slot = nullptr;
    const int32_t* row_expert_row = nullptr;
    const float* dispatch_row_weights = nullptr;
    const int32_t* topk_idx = nullptr;
    const int32_t* token_rank_slot = nullptr;
    // Hierarchical: the dispatch handle's node streams and forward metadata.
    const int32_t* token_node_slot = nullptr;
    const int32_t* num_tokens_per_node = nullptr;
    const int32_t* forward_meta = nullptr;
    const int32_t* forward_counts = nullptr;
    device::OpTrace trace{};
};

void launch_ht_combine(const LaunchContext& context, const HtCombinePlan& plan, const HtCombineViews& views);

// Loads every HT kernel a dispatch of `plan`, a cached dispatch of its handle and the combines of
// that handle can use (every reduction its layout allows, every SM count), on `device`. With ranks
// sharing a GPU this must happen before the first op of a shape (see "Preloading" in
// launch_context.hpp); otherwise it saves the first op the compile and load.
void load_ht_kernels(int device, const HtDispatchPlan& plan);

// --- Instantiations: the template arguments that vary per op shape ------------------------------

struct HtDispatchKernelShape {
    int warps = 1;  // per block: tuning::ht_dispatch_warps of the record's stage
    int hidden = 0, topk = 0;
    int input_payload = device::kPayloadBf16, scale_kind = device::kScaleNone;
    bool masked_layout = false;  // the expert offsets the kernel publishes
    bool operator==(const HtDispatchKernelShape&) const = default;
};
HtDispatchKernelShape ht_dispatch_kernel_shape(int hidden, int topk, int input_payload, int scale_kind,
                                               bool masked_layout);
HtDispatchKernelShape ht_dispatch_kernel_shape(const HtDispatchPlan& plan);
jit::KernelSource ht_dispatch_source(const HtDispatchKernelShape& shape);
const jit::Kernel& ht_dispatch_kernel(const HtDispatchKernelShape& shape, int device);  // loaded once

struct HtReceiveKernelShape {
    int hidden = 0, topk = 0, scale_kind = device::kScaleNone;
    int layout = device::kHtRankMajor;  // device::HtRecvLayout
    bool operator==(const HtReceiveKernelShape&) const = default;
};
jit::KernelSource ht_receive_source(const HtReceiveKernelShape& shape);
const jit::Kernel& ht_receive_kernel(const HtReceiveKernelShape& shape, int device);
HtReceiveKernelShape ht_receive_kernel_shape(const HtDispatchPlan& plan);

struct HtCombineKernelShape {
    int hidden = 0, topk = 0;
    int mode = device::kHtCombineRankMajor;
    int send_group = 1;  // tuning::ht_combine_send_group of the grid
    bool operator==(const HtCombineKernelShape&) const = default;
};
jit::KernelSource ht_combine_source(const HtCombineKernelShape& shape);
const jit::Kernel& ht_combine_kernel(const HtCombineKernelShape& shape, int device);
HtCombineKernelShape ht_combine_kernel_shape(const HtExtents& extents, int mode, int num_sms);

// The one HtCommon fill every HT launcher uses.
device::HtCommon ht_common(const LaunchContext& context, const HtExtents& extents);

// The argument structs of the dispatch and the combine, filled from the plan and the views: the
// direct kernels take them as they are, the hierarchical ones (hier_launch.hpp) inside their own.
device::HtDispatchArgs ht_dispatch_args(const LaunchContext& context, const HtDispatchPlan& plan,
                                        const HtDispatchViews& views);
device::HtCombineArgs ht_combine_args(const LaunchContext& context, const HtCombinePlan& plan,
                                      const HtCombineViews& views);

}  // namespace switchyard::launch
