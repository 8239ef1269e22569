// Where the low-latency (LL) kernels keep their signals and data (DESIGN.md §5, LL).
//
// Signals live in the control workspace (WorkspaceLayout::ll_signals): zero at creation and after
// reset(), monotone afterwards (per-source arrival counters, transport/ll_arrivals.cuh). Data lives in the
// buffer's LL region: two sets (each op kind alternates between them by its own sequence number,
// so two ops of a kind may be in flight), each holding
//
//   dispatch headers   [R sources]             {int32 num_tokens, int32 count[L]}: what source s
//                                              sent here (tokens, rows per local expert); a source
//                                              that fails the op before moving data (invalid
//                                              routing) sends num_tokens = ll_failed_header(why)
//                                              and no counts, so its peers stop and name it
//   dispatch records   [R sources][T_ll slots] one record per token that reaches this rank (a
//                                              token crosses to a rank once, not once per expert)
//   combine rows       [K][T_ll]               bf16 expert outputs of (token t, slot k) sent back
//                                              to the token's home rank (hierarchical: rank q's
//                                              partial of token t, in the slot of q's first k)
//
// Dispatch and combine have separate areas inside a set, so a combine issued while a peer may
// still be reading the dispatch of the same set (two dispatches in flight) cannot overwrite it.
//
// Across nodes (N nodes of G ranks; ll/net_layout.cuh says who writes what) the dispatch records
// are not per source rank: a rank receives over NVLink from the G ranks of its node, and over the
// network from its rail peers (one per other node), whose records its node-mates read in place.
// So a set holds G + 2 (N - 1) record areas, each [T_ll slots]: the G sources of this node (by
// local index), the records received from the rail peer of each other node, and this rank's own
// staging of the records it puts to each other node. Beside them, per other node, the node
// headers received and staged, and the combine's network headers and forward flags. One node
// (N = 1) is the layout above: R record areas, nothing else.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/record_layout.cuh"

namespace switchyard::device {

// Sequence numbers (per op kind) start at 1; op n of a kind uses set n & 1.
SY_HOST_DEVICE int32_t ll_set_of(uint64_t sequence) {
    return int32_t(sequence & 1u);
}

enum LlSignalKind : int32_t { kLlDispatch = 0, kLlCombine = 1 };

// A dispatch header's num_tokens that announces the source's failure (negative; the low bits hold
// its PeerFailure, common/diagnostics.cuh).
SY_HOST_DEVICE constexpr int32_t ll_failed_header(uint32_t failure) {
    return int32_t(0x80000000u | failure);
}
SY_HOST_DEVICE constexpr uint32_t ll_header_failure(int32_t num_tokens) {
    return uint32_t(num_tokens) & 0x7fffffffu;
}

// Layout of the LL signal area (fits WorkspaceLayout::ll_signal_bytes_for(R)).
struct LlSignalLayout {
    int32_t num_ranks = 0;
    int64_t arrivals_offset = 0;  // [2 kinds][2 sets][R] uint64: source s's arrivals (ll_arrive)
    int64_t decided_offset = 0;   // [2 kinds][2 sets] uint64: masking mode, arrivals of op `seq` decided
    int64_t mask_offset = 0;      // [R] uint32: 1 = rank masked (unresponsive), skipped by later ops
    // Across nodes (transport/ll_net_signals.cuh), masking mode: the decisions of the combine's
    // stages [2 sets][kLlNetStages] uint64 (op `seq` decided), and the same-node sources present
    // in the combine of each set [2 sets][R] uint32, decided by its send half for its receive half.
    int64_t net_decided_offset = 0;
    int64_t net_present_offset = 0;
    int64_t total_bytes = 0;

    static constexpr int32_t kNetStages = 4;

    SY_HOST_DEVICE static LlSignalLayout make(int32_t num_ranks) {
        LlSignalLayout layout;
        layout.num_ranks = num_ranks;
        int64_t offset = 0;
        layout.arrivals_offset = offset;
        offset += align_up(4 * int64_t(num_ranks) * 8, 128);
        layout.decided_offset = offset;
        offset += 128;
        layout.mask_offset = offset;
        offset += align_up(int64_t(num_ranks) * 4, 128);
        layout.net_decided_offset = offset;
        offset += align_up(2 * kNetStages * 8, 128);
        layout.net_present_offset = offset;
        offset += align_up(2 * int64_t(num_ranks) * 4, 128);
        layout.total_bytes = offset;
        return layout;
    }
    SY_HOST_DEVICE uint64_t* arrivals(uint8_t* signals, int32_t kind, int32_t set) const {
        return reinterpret_cast<uint64_t*>(signals + arrivals_offset) + (int64_t(kind) * 2 + set) * num_ranks;
    }
    SY_HOST_DEVICE uint64_t* decided(uint8_t* signals, int32_t kind, int32_t set) const {
        return reinterpret_cast<uint64_t*>(signals + decided_offset) + kind * 2 + set;
    }
    SY_HOST_DEVICE uint32_t* mask(uint8_t* signals) const {
        return reinterpret_cast<uint32_t*>(signals + mask_offset);
    }
    SY_HOST_DEVICE uint64_t* net_decided(uint8_t* signals, int32_t set, int32_t stage) const {
        return reinterpret_cast<uint64_t*>(signals + net_decided_offset) + set * kNetStages + stage;
    }
    SY_HOST_DEVICE uint32_t* net_present(uint8_t* signals, int32_t set) const {
        return reinterpret_cast<uint32_t*>(signals + net_present_offset) + int64_t(set) * num_ranks;
    }
};

// Layout of one LL data set, from the buffer's capacities.
struct LlSetLayout {
    int32_t num_ranks = 0;
    int32_t max_tokens = 0;         // T_ll
    int32_t max_topk = 0;           // K capacity
    int32_t max_local_experts = 0;  // L capacity
    int32_t num_nodes = 1;          // N
    int32_t ranks_per_node = 0;     // G = R / N
    int32_t record_areas = 0;       // R on one node, G + 2 (N - 1) across nodes
    int64_t header_bytes = 0;       // per source
    int64_t headers_offset = 0;
    int64_t max_record_bytes = 0;  // dispatch record capacity (the op's own record is <= this)
    int64_t dispatch_offset = 0;
    int64_t max_combine_row_bytes = 0;
    int64_t combine_offset = 0;
    // Across nodes only (ll/net_layout.cuh): node headers [2 (N - 1)] (received from each other
    // node's rail peer, then staged for each), combine network headers [2 (N - 1)] likewise, and
    // the forward flags [G] (uint64, one per node-mate).
    int64_t node_header_bytes = 0;
    int64_t node_headers_offset = 0;
    int64_t combine_headers_offset = 0;
    int64_t forward_flags_offset = 0;
    int64_t set_bytes = 0;

    static constexpr int64_t kCombineHeaderBytes = 64;

    SY_HOST_DEVICE static int64_t combine_row_bytes(int64_t hidden) { return align_up(hidden * 2, 32); }

    // Int32 words of a node header: the records, then per local rank of the node {present, tokens,
    // rows per local expert [L], node slot of each of its tokens [T_ll]} (ll/net_layout.cuh).
    SY_HOST_DEVICE static int64_t node_header_words(int32_t ranks_per_node, int32_t max_local_experts,
                                                    int32_t max_tokens) {
        return 1 + int64_t(ranks_per_node) * (2 + int64_t(max_local_experts) + max_tokens);
    }

    SY_HOST_DEVICE static LlSetLayout make(int32_t num_ranks, int32_t max_tokens, int32_t max_hidden,
                                           int32_t max_topk, int32_t max_local_experts, int32_t num_nodes = 1) {
        LlSetLayout layout;
        layout.num_ranks = num_ranks;
        layout.max_tokens = max_tokens;
        layout.max_topk = max_topk;
        layout.max_local_experts = max_local_experts;
        layout.num_nodes = num_nodes > 1 ? num_nodes : 1;
        layout.ranks_per_node = num_ranks / layout.num_nodes;
        const int32_t others = layout.num_nodes - 1;
        layout.record_areas = others == 0 ? num_ranks : layout.ranks_per_node + 2 * others;
        layout.header_bytes = align_up(4 * (1 + int64_t(max_local_experts)), 16);
        int64_t offset = 0;
        layout.headers_offset = offset;
        offset += align_up(layout.header_bytes * num_ranks, 128);
        layout.max_record_bytes = RecordLayout::max_dispatch_bytes(max_hidden, max_topk);
        layout.dispatch_offset = offset;
        offset += int64_t(layout.record_areas) * max_tokens * layout.max_record_bytes;
        offset = align_up(offset, 128);
        layout.max_combine_row_bytes = combine_row_bytes(max_hidden);
        layout.combine_offset = offset;
        offset += int64_t(max_topk) * max_tokens * layout.max_combine_row_bytes;
        offset = align_up(offset, 128);
        if (others > 0) {
            layout.node_header_bytes =
                align_up(4 * node_header_words(layout.ranks_per_node, max_local_experts, max_tokens), 128);
            layout.node_headers_offset = offset;
            offset += 2 * int64_t(others) * layout.node_header_bytes;
            layout.combine_headers_offset = offset;
            offset += 2 * int64_t(others) * kCombineHeaderBytes;
            layout.forward_flags_offset = offset;
            offset += align_up(8 * int64_t(layout.ranks_per_node), 128);
        }
        layout.set_bytes = align_up(offset, 128);
        return layout;
    }

    SY_HOST_DEVICE int32_t* header(uint8_t* set_base, int32_t source) const {
        return reinterpret_cast<int32_t*>(set_base + headers_offset + header_bytes * source);
    }
    SY_HOST_DEVICE uint8_t* record(uint8_t* set_base, int32_t source, int32_t slot,
                                   int64_t record_bytes) const {
        return set_base + dispatch_offset + (int64_t(source) * max_tokens + slot) * record_bytes;
    }
    SY_HOST_DEVICE uint8_t* combine_row(uint8_t* set_base, int32_t k, int32_t token,
                                        int64_t row_bytes) const {
        return set_base + combine_offset + (int64_t(k) * max_tokens + token) * row_bytes;
    }
    // Across nodes: node header `area` (received from other node o: o; staged for it: N - 1 + o),
    // combine network header `area` (likewise), the forward flag of node-mate g.
    SY_HOST_DEVICE int32_t* node_header(uint8_t* set_base, int32_t area) const {
        return reinterpret_cast<int32_t*>(set_base + node_headers_offset + node_header_bytes * area);
    }
    SY_HOST_DEVICE uint64_t* combine_header(uint8_t* set_base, int32_t area) const {
        return reinterpret_cast<uint64_t*>(set_base + combine_headers_offset + kCombineHeaderBytes * area);
    }
    SY_HOST_DEVICE uint64_t* forward_flag(uint8_t* set_base, int32_t local_index) const {
        return reinterpret_cast<uint64_t*>(set_base + forward_flags_offset) + local_index;
    }
};

// The LL dispatch record of one op: RecordLayout::dispatch (payload | scales | metadata). Metadata
// words: [0] source token, [1] unused (-1), [2 + k] local expert id of slot k at the receiving rank
// or -1, [2 + K + k] the bits of slot k's top-k weight there (0 without weights), [2 + 2K + k] the
// token's position among the source's rows of that expert (its rank among the source's tokens
// routed to that expert).
SY_HOST_DEVICE RecordLayout ll_dispatch_record(int64_t hidden, int32_t scale_kind, int32_t topk) {
    return RecordLayout::dispatch(hidden, scale_kind == kScaleNone ? kPayloadBf16 : kPayloadFp8, scale_kind,
                                  topk);
}

// Combine routing stored per received row by the dispatch: (source * T_ll + token) * 32 + k.
SY_HOST_DEVICE int32_t ll_pack_source(int32_t source, int32_t token, int32_t k, int32_t max_tokens) {
    return (source * max_tokens + token) * 32 + k;
}

// A received row as the hierarchical combine finds it: local expert e's row r of the masked
// coordinates (rows_per_expert = R * T_ll), e * rows_per_expert + r.
SY_HOST_DEVICE int32_t ll_pack_row(int32_t local, int32_t row, int64_t rows_per_expert) {
    return int32_t(local * rows_per_expert + row);
}

}  // namespace switchyard::device
