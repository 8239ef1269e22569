// The routing of one low-latency dispatch, as the LL combine needs it: the op's shape, the
// per-expert row counts and, for every received row, its (source rank, token, top-k slot).
// Lives in device memory owned by the handle (stream-ordered allocations on the comm stream).
#pragma once

#include <cstdint>

#include "switchyard/device_tensor.hpp"
#include "switchyard/ops.hpp"

namespace switchyard {

class LowLatencyHandle {
  public:
    int32_t num_tokens = 0;     // T of this rank's dispatch
    int32_t hidden = 0;         // H
    int32_t topk = 0;           // K
    int32_t num_experts = 0;    // E
    int32_t num_ranks = 0;      // R
    int32_t local_experts = 0;  // L = E / R
    int32_t max_tokens = 0;     // T_ll of the buffer
    bool index_is_int64 = false;
    bool use_fp8 = true;
    ScaleFormat scale_format = ScaleFormat::kNone;
    RecvLayout layout = RecvLayout::kExpertMasked;  // of recv_x (and so of the combine's y)
    int32_t expert_alignment = 1;                   // kExpertContiguous
    int64_t contiguous_rows = 0;                    // kExpertContiguous: rows of recv_x
    DeviceTensor recv_count;                        // int32 [L]
    DeviceTensor recv_source;  // int32 [L, R*T_ll]: (source * T_ll + token) * 32 + k per valid row
    // Per received record (source, slot), for a hierarchical combine: int32 [R*T_ll, K + 1] {home
    // token, the row of each slot k here (ll_pack_row) or -1}, fp32 [R*T_ll, K] the weights that
    // travelled with it, and int32 [R + 1] the records per source as a prefix.
    DeviceTensor recv_token_rows;
    DeviceTensor recv_token_weights;
    DeviceTensor recv_record_starts;
    bool has_weights = false;  // the dispatch was given topk_weights
    // Owns the memory of the dispatch result's column-major recv_scales view ([L, words, R*T_ll]
    // or [words, rows] contiguous): that view stays valid while this handle lives.
    DeviceTensor recv_scales_storage;
    // Across nodes (num_nodes > 1): what this rank, as the forwarder of each other node's rail peer,
    // received from it (kernels/switchyard/ll/net_layout.cuh): int32 [N - 1, T_ll, K + 1] {home
    // token, then per k the local index of the slot's owner on this node or -1}, int32 [N - 1].
    int32_t num_nodes = 1;
    DeviceTensor forward_rows;
    DeviceTensor forward_counts;

    int64_t rows_per_expert() const { return int64_t(num_ranks) * max_tokens; }
};

}  // namespace switchyard
