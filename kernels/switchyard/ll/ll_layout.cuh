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
    int64_t total_bytes = 0;

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
};

// Layout of one LL data set, from the buffer's capacities.
struct LlSetLayout {
    int32_t num_ranks = 0;
    int32_t max_tokens = 0;         // T_ll
    int32_t max_topk = 0;           // K capacity
    int32_t max_local_experts = 0;  // L capacity
    int64_t header_bytes = 0;       // per source
    int64_t headers_offset = 0;
    int64_t max_record_bytes = 0;  // dispatch record capacity (the op's own record is <= this)
    int64_t dispatch_offset = 0;
    int64_t max_combine_row_bytes = 0;
    int64_t combine_offset = 0;
    int64_t set_bytes = 0;

    SY_HOST_DEVICE static int64_t combine_row_bytes(int64_t hidden) { return align_up(hidden * 2, 32); }

    SY_HOST_DEVICE static LlSetLayout make(int32_t num_ranks, int32_t max_tokens, int32_t max_hidden,
                                           int32_t max_topk, int32_t max_local_experts) {
        LlSetLayout layout;
        layout.num_ranks = num_ranks;
        layout.max_tokens = max_tokens;
        layout.max_topk = max_topk;
        layout.max_local_experts = max_local_experts;
        layout.header_bytes = align_up(4 * (1 + int64_t(max_local_experts)), 16);
        int64_t offset = 0;
        layout.headers_offset = offset;
        offset += align_up(layout.header_bytes * num_ranks, 128);
        layout.max_record_bytes = RecordLayout::max_dispatch_bytes(max_hidden, max_topk);
        layout.dispatch_offset = offset;
        offset += int64_t(num_ranks) * max_tokens * layout.max_record_bytes;
        offset = align_up(offset, 128);
        layout.max_combine_row_bytes = combine_row_bytes(max_hidden);
        layout.combine_offset = offset;
        offset += int64_t(max_topk) * max_tokens * layout.max_combine_row_bytes;
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
