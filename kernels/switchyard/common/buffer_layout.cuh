// The regions of one rank's symmetric buffer, in order: control workspace, high-throughput (HT)
// receive regions, low-latency (LL) regions. Sizes follow from the buffer's capacities only, so
// every rank computes the same layout; these are the published sizing formulas.
//
//   workspace:            signals and counters, a few KB, plus for HT 2 * ceil(T_max / 4) * R * 8
//                         bytes of combine arrival counters (common/workspace_layout.cuh)
//   HT dispatch receive:  R * T_max * max_dispatch_record           (worst case: every token of
//                         every source reaches this rank once)
//   HT combine receive:   K * T_max * combine_record                 (one slot per top-k entry, so
//                         the home rank can reduce in a fixed order; none across nodes)
//   across nodes:         the hierarchical HT regions (hier/hier_layout.cuh): about
//                         3 N T_max forward records + (C + 2) N T_max combine records
//   LL (two sets, so two ops can be in flight; ll/ll_layout.cuh):
//                         2 * (R * header + R * T_ll * max_dispatch_record + K * T_ll * combine_row)
//                         a token crosses to a rank once and is spread to its experts on arrival;
//                         dispatch and combine areas are separate so a combine cannot overwrite a
//                         dispatch that a slower peer is still reading (two ops in flight).
//                         e.g. 128 tokens, hidden 7168, 256 experts, EP8, K=8: 56.3 MiB.
//                         Across N nodes of G ranks the R record areas become G + 2 (N - 1)
//                         (ll/ll_layout.cuh), and one forward area serves both sets:
//                         (N - 1) * K * T_ll * combine_row (ll/net_layout.cuh). EP8 as 2 x 4:
//                         63.6 MiB; 4 x 2: 98.7 MiB (the flat combine's rows through each
//                         forwarder grow with the other nodes).
//   LL zero-copy combine send area (BufferConfig::ll_zero_copy_combine): L * R * T_ll * H * 2
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ll/ll_layout.cuh"

namespace switchyard::device {

struct BufferCapacity {
    int32_t num_ranks;
    int32_t max_experts;
    int32_t max_tokens_per_rank;  // HT T_max
    int32_t max_hidden;
    int32_t max_topk;
    int32_t ll_max_tokens_per_rank;  // LL T_max
    bool high_throughput;
    bool low_latency;
    bool ll_zero_copy_combine;  // reserve the LL zero-copy combine send area
    // Ranks on several nodes (equal blocks of consecutive ranks): the hierarchical HT regions
    // (hier/hier_layout.cuh) instead of the direct combine region, and the LL forward area.
    // 0 or 1: one node.
    int32_t num_nodes;
};

struct BufferLayout {
    static constexpr int64_t kRegionAlignment = 4096;

    WorkspaceLayout workspace;
    int64_t ht_dispatch_offset = 0, ht_dispatch_bytes = 0;
    int64_t ht_combine_offset = 0, ht_combine_bytes = 0;
    int64_t ll_offset = 0, ll_set_bytes = 0;                  // two sets of ll_set_bytes each
    LlSetLayout ll_set{};                                     // inside each LL set
    int64_t ll_forward_offset = 0, ll_forward_bytes = 0;      // across nodes: the combine's forward area
    int64_t ll_zero_copy_offset = 0, ll_zero_copy_bytes = 0;  // bf16 [L, R*T_ll, H_max] or none
    HierLayout hier{};                                        // several nodes: the hierarchical HT regions
    int64_t total_bytes = 0;

    SY_HOST_DEVICE static BufferLayout make(const BufferCapacity& capacity) {
        BufferLayout layout;
        const bool hierarchical = capacity.high_throughput && capacity.num_nodes > 1;
        const int32_t max_local_experts = int32_t(ceil_div(capacity.max_experts, capacity.num_ranks));
        layout.workspace = WorkspaceLayout::make(
            capacity.num_ranks, max_local_experts, capacity.high_throughput ? capacity.max_tokens_per_rank : 0,
            hierarchical ? capacity.num_nodes : 1, hierarchical ? hier_num_batches(capacity.num_nodes) : 0);
        int64_t offset = align_up(layout.workspace.total_bytes, kRegionAlignment);
        const int64_t dispatch_record =
            RecordLayout::max_dispatch_bytes(capacity.max_hidden, capacity.max_topk);
        const int64_t combine_record =
            RecordLayout::combine(capacity.max_hidden, capacity.max_topk).total_bytes;
        if (capacity.high_throughput) {
            layout.ht_dispatch_offset = offset;
            layout.ht_dispatch_bytes =
                int64_t(capacity.num_ranks) * capacity.max_tokens_per_rank * dispatch_record;
            offset = align_up(offset + layout.ht_dispatch_bytes, kRegionAlignment);
            // Across nodes the combine goes through the hierarchical regions instead.
            layout.ht_combine_offset = offset;
            layout.ht_combine_bytes =
                hierarchical ? 0 : int64_t(capacity.max_topk) * capacity.max_tokens_per_rank * combine_record;
            offset = align_up(offset + layout.ht_combine_bytes, kRegionAlignment);
        }
        if (hierarchical) {
            layout.hier = HierLayout::make(capacity.num_nodes, capacity.num_ranks / capacity.num_nodes,
                                           capacity.max_tokens_per_rank, capacity.max_hidden, capacity.max_topk,
                                           max_local_experts, offset, kRegionAlignment);
            offset = layout.hier.counts_send_offset + layout.hier.total_bytes;
        }
        if (capacity.low_latency) {
            const int32_t local_experts = int32_t(ceil_div(capacity.max_experts, capacity.num_ranks));
            layout.ll_set = LlSetLayout::make(capacity.num_ranks, capacity.ll_max_tokens_per_rank,
                                              capacity.max_hidden, capacity.max_topk, local_experts,
                                              capacity.num_nodes);
            layout.ll_offset = offset;
            layout.ll_set_bytes = align_up(layout.ll_set.set_bytes, kRegionAlignment);
            offset += 2 * layout.ll_set_bytes;
            if (layout.ll_set.num_nodes > 1) {
                // [N - 1 other nodes][K][T_ll] combine rows (ll/net_layout.cuh, LlForwardArea).
                layout.ll_forward_offset = offset;
                layout.ll_forward_bytes = int64_t(layout.ll_set.num_nodes - 1) * capacity.max_topk *
                                          capacity.ll_max_tokens_per_rank * layout.ll_set.max_combine_row_bytes;
                offset = align_up(offset + layout.ll_forward_bytes, kRegionAlignment);
            }
            if (capacity.ll_zero_copy_combine) {
                layout.ll_zero_copy_offset = offset;
                layout.ll_zero_copy_bytes = int64_t(local_experts) * capacity.num_ranks *
                                            capacity.ll_max_tokens_per_rank * capacity.max_hidden * 2;
                offset = align_up(offset + layout.ll_zero_copy_bytes, kRegionAlignment);
            }
        }
        layout.total_bytes = align_up(offset, 2 << 20);
        return layout;
    }
};

}  // namespace switchyard::device
