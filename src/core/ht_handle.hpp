// DispatchHandle: everything one high-throughput dispatch decided, kept on the GPU so a cached
// dispatch can reproduce its layout byte for byte and a combine can send rows back to where they
// came from (DESIGN.md §2, "handle").
#pragma once

#include <cstdint>

#include "switchyard/common/record_layout.cuh"
#include "switchyard/device_tensor.hpp"
#include "switchyard/ops.hpp"

namespace switchyard {

class DispatchHandle {
  public:
    // Shape of the dispatch.
    int32_t num_tokens = 0, hidden = 0, topk = 0, num_experts = 0, num_ranks = 0, local_experts = 0;
    int32_t max_tokens = 0;
    RecvLayout layout = RecvLayout::kRankMajor;
    int32_t expert_alignment = 1;
    bool zero_padding = false;
    bool has_weights = false;
    int32_t payload_kind = 0, scale_kind = 0;  // device::PayloadKind / ScaleKind of the records
    device::RecordLayout record{};
    int64_t row_capacity = 0;         // rank-major rows the per-row arrays hold
    int64_t expert_row_capacity = 0;  // rows of the expert-major outputs
    int64_t host_num_rows = -1;       // host-synced only: rank-major rows received

    // This rank as a source (routing of its tokens).
    DeviceTensor token_rank_slot;        // int32 [T, R]
    DeviceTensor token_expert_pos;       // int32 [T, K]
    DeviceTensor topk_idx;               // int32 [T, K]
    DeviceTensor topk_weights;           // fp32 [T, K] (dispatch weights; default for weighted combine)
    DeviceTensor num_tokens_per_rank;    // int32 [R]
    DeviceTensor num_tokens_per_expert;  // int32 [E]
    // This rank as a destination.
    DeviceTensor recv_info;         // int32, device::HtRecvInfoLayout
    DeviceTensor row_src_token;     // int32 [cap]
    DeviceTensor row_combine_slot;  // int32 [cap]
    DeviceTensor row_expert_row;    // int32 [cap, K]
    DeviceTensor row_weights;       // fp32 [cap, K]

    // Ranks on several nodes (the hierarchical path; empty on one node).
    int32_t num_nodes = 1;
    DeviceTensor token_node_slot;      // int32 [T, N]: slot of each token in the stream to each node
    DeviceTensor num_tokens_per_node;  // int32 [N]: records of each stream
    DeviceTensor forward_meta;         // int32 [N, T_max, words]: the records this rank forwarded
    DeviceTensor forward_counts;       // int32 [N]: records forwarded from each source node
};

}  // namespace switchyard
