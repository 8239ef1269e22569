// The receive half of the LL dispatch (ll/dispatch.cuh): once every source has arrived, where
// each source's rows of each local expert go, and the copies of the arrived records into those
// rows (with zero_padding, also the zeroing of the segments' padding rows).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/dispatch_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_slices.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_dispatch_detail {

// Where the receive half finds what a source sent: its header words (0: tokens, 1 + e: rows of
// local expert e), its i-th record, and the local expert a record's metadata names. On one node
// all of it is in this rank's own set; across nodes (ll/net_dispatch_receive.cuh) a source of
// another node's records are read where they landed, at its gateway.
struct LlOwnSet {
    uint8_t* set_base;  // this rank's set of the op
    SY_DEVICE int32_t header_word(const LlDispatchArgs& args, int32_t source, int32_t word) const {
        return args.buffer.set_layout.header(set_base, source)[word];
    }
    SY_DEVICE const uint8_t* record(const LlDispatchArgs& args, int32_t source, int32_t i,
                                    int64_t record_bytes) const {
        return args.buffer.set_layout.record(set_base, source, i, record_bytes);
    }
    SY_DEVICE int32_t local_expert(int32_t named, int32_t) const { return named; }
};

// One arrived record (source s, slot i): copy it into the rows of the local experts it names.
// `row_offsets` [R * L]: source s's first row within local expert e; `expert_starts` [L]: expert
// e's first row in the output (e * R * T_ll in the masked layout).
template <int kHidden, int kTopk, int kScaleKind, bool kContiguous, class Sources>
SY_DEVICE void receive_record(const LlDispatchArgs& args, const Sources& sources, int32_t source, int32_t slot,
                              int slice, const int32_t* row_offsets, const int32_t* expert_starts) {
    const uint32_t lane = ptx::lane_id();
    const LlBufferArgs& buffer = args.buffer;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int64_t rows_per_expert = int64_t(buffer.num_ranks) * buffer.set_layout.max_tokens;
    const uint8_t* record = sources.record(args, source, slot, layout.total_bytes);
    constexpr int64_t kPayloadBytes = ll_payload_bytes(kHidden, kScaleKind);
    // The slice's payload is loaded before the metadata that says where it goes: both loads are
    // then in flight together.
    const auto data =
        ll_load_slice<kLlRecvStepsPerSlice, kPayloadBytes>(record + layout.payload_offset, slice, lane);
    const int32_t* meta = reinterpret_cast<const int32_t*>(record + layout.meta_offset);
    const int32_t token = meta[0];
    int32_t local = -1;
    int64_t row = 0;
    if (int(lane) < kTopk) {
        local = sources.local_expert(meta[2 + lane], source);
        if (local >= 0) row = row_offsets[source * args.local_experts + local] + meta[2 + 2 * kTopk + lane];
        if (slice == 0) {
            // The combine's routing: per row (flat combine) and per record (hierarchical).
            if (local >= 0)
                args.recv_source[local * rows_per_expert + row] =
                    ll_pack_source(source, token, int32_t(lane), buffer.set_layout.max_tokens);
            const int64_t entry = int64_t(source) * buffer.set_layout.max_tokens + slot;
            args.recv_token_rows[entry * (kTopk + 1) + 1 + lane] =
                local >= 0 ? ll_pack_row(local, int32_t(row), rows_per_expert) : -1;
            args.recv_token_weights[entry * kTopk + lane] =
                local >= 0 ? fp8::bits_to_float(uint32_t(meta[2 + kTopk + lane])) : 0.0f;
            if (lane == 0) args.recv_token_rows[entry * (kTopk + 1)] = token;
        }
    }
    const uint32_t experts = __ballot_sync(0xffffffffu, local >= 0);
    // Output row of each expert this token lands in, held by lane k.
    const int64_t flat_row = local >= 0 ? expert_starts[local] + row : 0;
    uint8_t* recv_x = static_cast<uint8_t*>(args.recv_x);
    for (uint32_t rest = experts; rest != 0; rest &= rest - 1) {
        const int64_t target = __shfl_sync(0xffffffffu, flat_row, __ffs(rest) - 1);
        ll_store_slice<kLlRecvStepsPerSlice, kPayloadBytes>(recv_x + target * kPayloadBytes, slice, lane,
                                                            data);
    }
    __syncwarp();
    if (slice != 0) return;
    if constexpr (kScaleKind != kScaleNone) {
        constexpr int kWords = ll_scale_words(kHidden, kScaleKind);
        const uint32_t* scales = reinterpret_cast<const uint32_t*>(record + layout.scale_offset);
        // Column-major scales: word w of a row sits `word_stride` after word w - 1; masked: per
        // expert [words][R*T_ll], contiguous: [words][recv_rows].
        const int64_t word_stride = kContiguous ? args.recv_rows : rows_per_expert;
        const int64_t scale_row = kContiguous ? flat_row : int64_t(local) * kWords * rows_per_expert + row;
        for (int word = int(lane); word - int(lane) < kWords; word += 32) {
            const bool active = word < kWords;
            const uint32_t value = active ? scales[word] : 0u;
            for (uint32_t rest = experts; rest != 0; rest &= rest - 1) {
                const int64_t base = __shfl_sync(0xffffffffu, scale_row, __ffs(rest) - 1);
                if (active) args.recv_scales[base + word * word_stride] = value;
            }
        }
    }
}

// Items of the padding: a payload item per (padding row, receive slice), as the records' items;
// then, with scales, a scale item per 32 padding rows, a lane per row: the scales are
// column-major, so a warp's stores to one column land on consecutive rows.
template <int kHidden, int kScaleKind>
SY_DEVICE int32_t padding_items(int32_t padding_rows) {
    const int32_t scale_items = kScaleKind == kScaleNone ? 0 : (padding_rows + 31) / 32;
    return padding_rows * ll_recv_slices(kHidden, kScaleKind) + scale_items;
}

template <int kHidden, int kScaleKind>
SY_DEVICE void zero_padding_item(const LlDispatchArgs& args, int32_t item, const int32_t* padding_starts,
                                 const int32_t* expert_starts) {
    const uint32_t lane = ptx::lane_id();
    const int32_t L = args.local_experts, padding_rows = padding_starts[L];
    constexpr int64_t kPayloadBytes = ll_payload_bytes(kHidden, kScaleKind);
    constexpr int kSlices = ll_recv_slices(kHidden, kScaleKind);
    if (item < padding_rows * kSlices) {
        const int64_t row = ll_padding_row(padding_starts, expert_starts, L, item / kSlices);
        ll_store_slice<kLlRecvStepsPerSlice, kPayloadBytes>(
            static_cast<uint8_t*>(args.recv_x) + row * kPayloadBytes, item % kSlices, lane,
            LlSlice<kLlRecvStepsPerSlice>{});
        return;
    }
    if constexpr (kScaleKind != kScaleNone) {
        const int32_t p = (item - padding_rows * kSlices) * 32 + int32_t(lane);
        if (p >= padding_rows) return;
        const int64_t row = ll_padding_row(padding_starts, expert_starts, L, p);
        constexpr int kWords = ll_scale_words(kHidden, kScaleKind);
#pragma unroll 4
        for (int word = 0; word < kWords; ++word) args.recv_scales[row + word * args.recv_rows] = 0u;
    }
}

// Every thread e <= L, from the headers of the present sources (sources ascending, so rows are
// ordered by source then token, bit-reproducibly): where source s's rows of local expert e start
// among that expert's rows (the row offsets, after those of sources < s), the expert's rows (into
// expert_starts, until place_experts) and, for e == L, each source's records (record_starts).
// Block 0 also writes the counts out. The headers of up to 8 sources are loaded before they are
// summed (independent loads). A source whose header announces its failure (ll_layout.cuh) is
// reported (kErrorPeerFailed) and noted in `failed_source`.
template <class Sources>
SY_DEVICE void count_rows(const LlDispatchArgs& args, const LlDispatchShared& shared, const Sources& sources,
                          int32_t* failed_source) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, L = args.local_experts;
    constexpr int kBatch = 8;
    for (int e = threadIdx.x; e <= L; e += blockDim.x) {
        // e < L: rows of local expert e; e == L: records (tokens) per source, into record_starts.
        int32_t running = 0;
        for (int first = 0; first < R; first += kBatch) {
            int32_t counts[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) {
                const int s = first + j;
                counts[j] = s < R && shared.present[s] ? sources.header_word(args, s, e < L ? 1 + e : 0) : 0;
            }
#pragma unroll
            for (int j = 0; j < kBatch; ++j) {
                if (first + j >= R) break;
                if (e == L && counts[j] < 0) {  // (this rank's own failure is block 0's to report)
                    *failed_source = first + j;
                    if (first + j != buffer.rank)
                        report_error(buffer.diagnostics, kErrorPeerFailed, kPhaseLlDispatch, first + j, 0,
                                     ll_header_failure(counts[j]), 0);
                }
                if (e < L)
                    shared.scratch[(first + j) * L + e] = running;
                else
                    shared.record_starts[first + j] = running;
                running += counts[j];
            }
        }
        if (e == L) {
            shared.record_starts[R] = running;
        } else {
            shared.expert_starts[e] = running;  // the expert's rows, until place_experts
            if (blockIdx.x == 0) {
                args.recv_count[e] = running;
                if (args.cumulative_local_expert_recv_stats)
                    args.cumulative_local_expert_recv_stats[e] += running;
            }
        }
    }
}

// Warp 0, after count_rows: each expert's first output row, e * R * T_ll (masked), or the
// exclusive prefix of the rows rounded up to the alignment (contiguous), and with zero_padding
// the prefix of each segment's padding rows. Block 0 writes the experts' and the records' starts out.
template <bool kContiguous>
SY_DEVICE void place_experts(const LlDispatchArgs& args, const LlDispatchShared& shared) {
    if (threadIdx.x >= 32) return;
    const int32_t R = args.buffer.num_ranks, L = args.local_experts;
    int32_t* expert_starts = shared.expert_starts;  // the counts until the scans below
    const uint32_t lane = ptx::lane_id();
    if constexpr (kContiguous) {
        const int64_t alignment = args.expert_alignment;
        if (args.zero_padding) {
            const int64_t padding = warp_exclusive_scan(
                L,
                [&](int32_t e) { return align_up(int64_t(expert_starts[e]), alignment) - expert_starts[e]; },
                [&](int32_t e, int64_t prefix) { shared.padding_starts[e] = int32_t(prefix); });
            if (lane == 0) shared.padding_starts[L] = int32_t(padding);
        }
        const int64_t rows = warp_exclusive_scan(
            L, [&](int32_t e) { return align_up(int64_t(expert_starts[e]), alignment); },
            [&](int32_t e, int64_t prefix) { expert_starts[e] = int32_t(prefix); });
        if (lane == 0) expert_starts[L] = int32_t(rows);
    } else {
        const int64_t rows_per_expert = int64_t(R) * args.buffer.set_layout.max_tokens;
        for (int e = int(lane); e <= L; e += 32) expert_starts[e] = int32_t(e * rows_per_expert);
    }
    __syncwarp();
    if (blockIdx.x == 0 && args.recv_expert_offsets)
        for (int e = int(lane); e <= L; e += 32) args.recv_expert_offsets[e] = expert_starts[e];
    if (blockIdx.x == 0)
        for (int s = int(lane); s <= R; s += 32) args.recv_record_starts[s] = shared.record_starts[s];
}

// One sequence of work items over the grid's warps: the padding's (zero_padding only) and then
// the records' slices. Padding items are stores only, which leave the warp at once, so the loads
// of the record items that follow overlap them.
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, bool kContiguous, class Sources>
SY_DEVICE void receive_records(const LlDispatchArgs& args, const LlDispatchShared& shared,
                               const Sources& sources) {
    constexpr int kRecvSlices = ll_recv_slices(kHidden, kScaleKind);
    const int num_warps = int(gridDim.x) * kNumWarps;
    int32_t padding = 0;
    if constexpr (kContiguous)
        if (args.zero_padding)
            padding = padding_items<kHidden, kScaleKind>(shared.padding_starts[args.local_experts]);
    const int32_t items = padding + shared.record_starts[args.buffer.num_ranks] * kRecvSlices;
    int32_t item = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    if constexpr (kContiguous)
        for (; item < padding; item += num_warps)
            zero_padding_item<kHidden, kScaleKind>(args, item, shared.padding_starts, shared.expert_starts);
    for (; item < items; item += num_warps) {
        const int32_t record_item = item - padding;
        const int32_t record = record_item / kRecvSlices;
        int32_t source = 0;
        while (shared.record_starts[source + 1] <= record) ++source;
        receive_record<kHidden, kTopk, kScaleKind, kContiguous>(
            args, sources, source, record - shared.record_starts[source], record_item % kRecvSlices,
            shared.scratch, shared.expert_starts);
    }
}

// The receive half of every block: waits for every source's arrivals, places the rows, and copies
// the records into them. Returns early (every thread of the block) when the op failed, here or at
// a source that announced it.
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, bool kContiguous>
SY_DEVICE void receive_tokens(const LlDispatchArgs& args, const LlDispatchShared& shared, uint64_t sequence) {
    const LlBufferArgs& buffer = args.buffer;
    __shared__ int32_t failed_source;  // count_rows: a source that announced its failure, or -1
    if (threadIdx.x == 0) failed_source = -1;  // (published by the wait's block barriers)
    if (!ll_wait_sources(buffer, kLlDispatch, sequence, shared.mask, shared.present, args.wait_time_stats))
        return;
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlDispatchWaited);
    const LlOwnSet sources{buffer.set_base(buffer.local_base, ll_set_of(sequence))};
    count_rows(args, shared, sources, &failed_source);
    __syncthreads();
    if (failed_source >= 0) return;
    place_experts<kContiguous>(args, shared);
    __syncthreads();
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlDispatchPlanned);
    receive_records<kNumWarps, kHidden, kTopk, kScaleKind, kContiguous>(args, shared, sources);
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlDispatchReceived);
}

}  // namespace ll_dispatch_detail

#endif

}  // namespace switchyard::device
