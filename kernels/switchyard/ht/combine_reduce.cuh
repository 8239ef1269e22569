// HT combine, the reducing role (ht/combine.cuh composes the roles):
//
//  reduce_home   in the order the rows arrive, by chunks of kHtCombineChunkTokens home tokens,
//                claimed one at a time from a counter (or, with fewer chunks than reducer warps,
//                split over the warps by a fixed stride): wait until every source's rows of the
//                chunk are in (the home knows how many from its dispatch handle), then sum each
//                token's channels in fp32 in the fixed order (biases, then slots ascending) and
//                round to bf16 once, and pick each k's weight from its owner's record
//                (combined_topk_weights). The last chunks to arrive are split into (token, channel
//                part) items over many warps (a chunk's first item waits and marks the chunk ready
//                for the others).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/transport/completion.cuh"

namespace switchyard::device {

// What a combine kernel is specialized on besides its launch constants: hidden size, top-k and
// the reduction (HtCombineMode).
template <int kHidden_, int kTopk_, int kMode_>
struct HtCombineShape {
    static constexpr int kHidden = kHidden_;
    static constexpr int kTopk = kTopk_;
    static constexpr int kMode = kMode_;
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 8 == 0, "a lane moves 8 channels at a time");
    static_assert(kMode == kHtCombineRankMajor || kMode == kHtCombineExpertFlat ||
                  kMode == kHtCombineHierarchical);
    // Rank-major combine does not copy a home's own rows to itself: the home reads them from y
    // (row self_first_row + the token's slot at this rank), which halves the rows moved at EP2.
    static constexpr bool kReadsOwnRows = kMode == kHtCombineRankMajor;
    // Combine records: bf16 payload and K weights sent back.
    SY_HOST_DEVICE static RecordLayout record() { return RecordLayout::combine(kHidden, kTopk); }
};

// The combine's reduce work items (ht_detail::reduce_items): items [0, whole) are whole chunks of
// kHtCombineChunkTokens home tokens; the items past them split the remaining `tail` chunks into
// (token, channel part), token-major, `parts` parts per token. Host and device, so the CPU tests
// check that the items cover every chunk, or every (token, part), exactly once.
struct HtReduceItem {
    int32_t chunk;  // the chunk the item belongs to
    int32_t token;  // -1: the whole chunk; else the token whose channel part `part` the item sums
    int32_t part;
};

SY_HOST_DEVICE int32_t ht_reduce_items(int32_t chunks, int32_t tail, int32_t parts) {
    return chunks - tail + tail * kHtCombineChunkTokens * parts;  // < 2^31: about T * parts
}

SY_HOST_DEVICE HtReduceItem ht_reduce_item(int32_t item, int32_t whole, int32_t parts) {
    if (item < whole) return {item, -1, 0};
    const int32_t split = item - whole;
    const int32_t token = whole * kHtCombineChunkTokens + split / parts;
    return {token / kHtCombineChunkTokens, token, split % parts};
}

// Chunks to split (the tail): enough (token, part) items for every one of `grid_warps` warps, or
// every chunk when there are fewer chunks than reducers (`whole_chunks` false). None when a token
// is one part.
SY_HOST_DEVICE int32_t ht_reduce_tail_chunks(int32_t chunks, int32_t parts, int32_t grid_warps,
                                             bool whole_chunks) {
    if (!whole_chunks) return chunks;
    if (parts <= 1) return 0;
    const int32_t per_chunk = kHtCombineChunkTokens * parts;
    const int32_t wanted = (grid_warps + per_chunk - 1) / per_chunk;
    return wanted < chunks ? wanted : chunks;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Channels of one reduce item: one round of sum_two_rows (kReduceWide 16-byte loads per lane and
// row). A token is reduced in items of this many channels by different warps, so that a few
// tokens (or the last chunk to arrive) are spread over many warps instead of one per chunk.
constexpr int kReduceWide = 7;
constexpr int kReducePartChannels = 256 * kReduceWide;

template <typename Shape>
SY_DEVICE uint8_t* combine_record(const HtCombineArgs& args, uint8_t* base, int slot, int token) {
    return base + args.common.layout.ht_combine_offset +
           (int64_t(slot) * args.common.max_tokens + token) * Shape::record().total_bytes;
}

// Eight bf16 channels (a uint4) as fp32, and back (round to nearest even; common/fp8.cuh).
SY_DEVICE void unpack8(const uint4& raw, float* v) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[2 * i] = fp8::bf16_low(words[i]);
        v[2 * i + 1] = fp8::bf16_high(words[i]);
    }
}

SY_DEVICE uint4 pack8(const float* v) {
    return make_uint4(fp8::bf16x2(v[0], v[1]), fp8::bf16x2(v[2], v[3]), fp8::bf16x2(v[4], v[5]),
                      fp8::bf16x2(v[6], v[7]));
}

// Records that source `source` writes to this home for token `token` in this op.
template <typename Shape>
SY_DEVICE uint32_t records_expected(const HtCombineArgs& args, int token, int source) {
    const HtCommon& c = args.common;
    if constexpr (Shape::kMode == kHtCombineExpertFlat) {
        uint32_t count = 0;
        for (int k = 0; k < Shape::kTopk; ++k) {
            const int32_t expert = args.topk_idx[int64_t(token) * Shape::kTopk + k];
            count += expert >= 0 && expert / c.local_experts == source;
        }
        return count;
    }
    const bool routed = args.token_rank_slot[int64_t(token) * c.num_ranks + source] >= 0;
    return routed && !(Shape::kReadsOwnRows && source == c.rank) ? 1u : 0u;
}

// Waits (one warp) until every source's records of home chunk `chunk` have arrived, and adds
// them to the home's consumed tally. False when a wait failed (the error is recorded).
template <typename Shape>
SY_DEVICE bool wait_for_chunk(const HtCombineArgs& args, int chunk) {
    const HtCommon& c = args.common;
    const int first = chunk * kHtCombineChunkTokens;
    const int last = min(first + kHtCombineChunkTokens, c.num_tokens);
    bool ok = true;
    for (int source = int(ptx::lane_id()); source < c.num_ranks; source += 32) {
        if (ht_peer_masked(c, source)) continue;  // its records are absent
        uint32_t expected = 0;
#pragma unroll
        for (int i = 0; i < kHtCombineChunkTokens; ++i)  // independent loads, one latency
            expected += first + i < last ? records_expected<Shape>(args, first + i, source) : 0u;
        if (expected == 0) continue;
        uint64_t* consumed = c.layout.workspace.ht_combine_consumed(c.local_base, chunk, source);
        const uint64_t target = *consumed + expected;
        // Lock-step: more than this op's records would mean the sequences diverged.
        if (wait_for_sequence(c.layout.workspace.ht_combine_arrival(c.local_base, chunk, source), target,
                              c.diagnostics, kPhaseHtCombine, source, peer_details(c, source)))
            *consumed = target;
        else
            ok = false;
    }
    __syncwarp();  // the acquiring lanes' view of the records now orders the whole warp's reads
    return __all_sync(0xffffffffu, ok);
}

// The general sum of one home token (any biases and slots, weights for flat expert-major):
// four 8-channel chunks per lane at a time, so each slot's four loads are in flight together;
// per channel the order stays bias0, bias1, slots ascending. A slot whose payload is null (its
// rank is masked) adds nothing.
template <typename Shape, typename SlotPayload>
SY_DEVICE void sum_slots(const HtCombineArgs& args, int token, int num_slots, SlotPayload slot_payload,
                         int begin, int end) {
    constexpr bool kFlat = Shape::kMode == kHtCombineExpertFlat;
    const uint32_t lane = ptx::lane_id();
    constexpr int kChunks = 4;
    for (int group = begin + int(lane) * 8; group < end; group += 256 * kChunks) {
        float acc[kChunks][8];
#pragma unroll
        for (int u = 0; u < kChunks; ++u)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[u][i] = 0.0f;
        auto load = [&](const uint8_t* row_bytes, uint4* raw) {
#pragma unroll
            for (int u = 0; u < kChunks; ++u) {
                const int channel = group + u * 256;
                raw[u] = channel < end ? *reinterpret_cast<const uint4*>(row_bytes + int64_t(channel) * 2)
                                       : make_uint4(0, 0, 0, 0);
            }
        };
        auto accumulate = [&](const uint4* raw, bool use_weight, float w) {
#pragma unroll
            for (int u = 0; u < kChunks; ++u) {
                float v[8];
                unpack8(raw[u], v);
#pragma unroll
                for (int i = 0; i < 8; ++i)
                    acc[u][i] = use_weight ? fmaf(w, v[i], acc[u][i]) : acc[u][i] + v[i];
            }
        };
        uint4 raw[2][kChunks];
        if (args.bias0) {
            load(reinterpret_cast<const uint8_t*>(args.bias0 + int64_t(token) * args.bias0_stride), raw[0]);
            accumulate(raw[0], false, 1.0f);
        }
        if (args.bias1) {
            load(reinterpret_cast<const uint8_t*>(args.bias1 + int64_t(token) * args.bias1_stride), raw[0]);
            accumulate(raw[0], false, 1.0f);
        }
        // Slots two at a time: both slots' loads are issued before either is summed (the order
        // of the sums, and so the result, stays slot ascending).
        for (int slot = 0; slot < num_slots; slot += 2) {
            bool present[2];
            float w[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const uint8_t* payload =
                    slot + j < num_slots &&
                            (!kFlat || args.topk_idx[int64_t(token) * Shape::kTopk + slot + j] >= 0)
                        ? slot_payload(slot + j)
                        : nullptr;
                present[j] = payload != nullptr;
                w[j] = present[j] && kFlat && args.weighted
                           ? args.home_weights[int64_t(token) * args.home_weights_stride + slot + j]
                           : 1.0f;
                if (present[j]) load(payload, raw[j]);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j)
                if (present[j]) accumulate(raw[j], kFlat && args.weighted, w[j]);
        }
#pragma unroll
        for (int u = 0; u < kChunks; ++u) {
            const int channel = group + u * 256;
            if (channel < end)
                *reinterpret_cast<uint4*>(args.out + int64_t(token) * args.out_stride + channel) =
                    pack8(acc[u]);
        }
    }
}

// The common case of rank-major combine at small EP: at most two rows and no bias, unweighted.
// With no accumulator carried across slots, seven 16-byte loads per row and lane are in flight
// at once (7 KB per row and warp). Sums as the general path does: (0 + a) + b in fp32.
SY_DEVICE void sum_two_rows(const HtCombineArgs& args, int token, const uint8_t* a, const uint8_t* b,
                            int begin, int end) {
    constexpr int kWide = kReduceWide;
    for (int group = begin + int(ptx::lane_id()) * 8; group < end; group += 256 * kWide) {
        uint4 ra[kWide], rb[kWide];
#pragma unroll
        for (int u = 0; u < kWide; ++u) {
            const int channel = group + u * 256;
            const bool inside = channel < end;
            ra[u] = inside && a ? *reinterpret_cast<const uint4*>(a + int64_t(channel) * 2)
                                : make_uint4(0, 0, 0, 0);
            rb[u] = inside && b ? *reinterpret_cast<const uint4*>(b + int64_t(channel) * 2)
                                : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kWide; ++u) {
            const int channel = group + u * 256;
            if (channel >= end) continue;
            float va[8], vb[8], sum[8];
            unpack8(ra[u], va);
            unpack8(rb[u], vb);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                sum[i] = 0.0f;
                if (a) sum[i] += va[i];
                if (b) sum[i] += vb[i];
            }
            *reinterpret_cast<uint4*>(args.out + int64_t(token) * args.out_stride + channel) = pack8(sum);
        }
    }
}

// The weight combined_topk_weights[token][k] returns for lane k: the one the owner of expert k
// sent back in its record (or, for this rank's own row, the caller's row weight).
template <typename Shape>
SY_DEVICE void pick_combined_weight(const HtCombineArgs& args, int token, int self_slot, int64_t self_row) {
    const HtCommon& c = args.common;
    const int lane = int(ptx::lane_id());
    const int32_t expert = args.topk_idx[int64_t(token) * Shape::kTopk + lane];
    float weight = 0.0f;
    if (expert >= 0 && !ht_peer_masked(c, expert / c.local_experts)) {
        int slot = lane;
        if constexpr (Shape::kMode != kHtCombineExpertFlat) {
            const int owner = expert / c.local_experts;
            slot = 0;
            for (int q = 0; q < owner; ++q)
                slot += args.token_rank_slot[int64_t(token) * c.num_ranks + q] >= 0;
        }
        if (slot == self_slot)
            weight = args.row_weights ? args.row_weights[self_row * args.row_weights_stride + lane] : 0.0f;
        else
            weight = reinterpret_cast<const float*>(combine_record<Shape>(args, c.local_base, slot, token) +
                                                    Shape::record().meta_offset)[lane];
    }
    args.combined_weights[int64_t(token) * Shape::kTopk + lane] = weight;
}

// reduce_home for channels [begin, end) of one home token (`first`: the token's first item);
// `self_first_row` is the first rank-major row from this rank; `first_group_slot` is lane q's
// token_rank_slot of rank q, loaded by the caller before its wait.
template <typename Shape>
SY_DEVICE void reduce_token(const HtCombineArgs& args, int token, int begin, int end, bool first,
                            int32_t self_first_row, int32_t first_group_slot) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    int num_slots = 0;
    int self_slot = -1;     // kReadsOwnRows: the slot that is this rank's own row
    int64_t self_row = -1;  // and that row of y
    uint32_t absent = 0;    // slots whose rank is masked: they add nothing (ht/masking.cuh)
    if constexpr (Shape::kMode == kHtCombineExpertFlat) {
        num_slots = Shape::kTopk;
        if (c.mask_unresponsive) {
            const int32_t expert =
                int(lane) < Shape::kTopk ? args.topk_idx[int64_t(token) * Shape::kTopk + lane] : -1;
            absent = __ballot_sync(0xffffffffu, expert >= 0 && ht_peer_masked(c, expert / c.local_experts));
        }
    } else {
        // Lane q of each 32-rank group loads the token's slot at rank q (one load latency).
        for (int group = 0; group < c.num_ranks; group += 32) {
            const int q = group + int(lane);
            const int32_t slot = group == 0        ? first_group_slot
                                 : q < c.num_ranks ? args.token_rank_slot[int64_t(token) * c.num_ranks + q]
                                                   : -1;
            const uint32_t routed = __ballot_sync(0xffffffffu, slot >= 0);
            const int own = c.rank - group;
            if (own >= 0 && own < 32 && ((routed >> own) & 1u) && Shape::kReadsOwnRows) {
                self_slot = num_slots + __popc(routed & ((1u << own) - 1u));
                self_row = int64_t(self_first_row) + __shfl_sync(0xffffffffu, slot, own);
            }
            if (c.mask_unresponsive) {
                // A masked rank's slot keeps its place among the token's slots (the senders
                // numbered them at dispatch) and stays empty.
                const uint32_t gone = __ballot_sync(0xffffffffu, slot >= 0 && ht_peer_masked(c, q));
                for (uint32_t rest = gone; rest != 0; rest &= rest - 1)
                    absent |= 1u << (num_slots + __popc(routed & ((1u << (__ffs(rest) - 1)) - 1u)));
            }
            num_slots += __popc(routed);
        }
    }
    auto slot_payload = [&](int slot) -> const uint8_t* {
        if ((absent >> slot) & 1u) return nullptr;
        return slot == self_slot ? args.y + self_row * args.y_row_stride_bytes
                                 : combine_record<Shape>(args, c.local_base, slot, token);
    };
    if (Shape::kMode != kHtCombineExpertFlat && !args.bias0 && !args.bias1 && num_slots <= 2)
        sum_two_rows(args, token, num_slots > 0 ? slot_payload(0) : nullptr,
                     num_slots > 1 ? slot_payload(1) : nullptr, begin, end);
    else
        sum_slots<Shape>(args, token, num_slots, slot_payload, begin, end);
    if (first && args.combined_weights && int(lane) < Shape::kTopk)
        pick_combined_weight<Shape>(args, token, self_slot, self_row);
}

// Lane q's token_rank_slot of rank q for `token` (-1 past the ranks, and for flat expert-major,
// whose slots are the top-k entries): loaded before a wait so that the latencies overlap.
template <typename Shape>
SY_DEVICE int32_t first_group_slot(const HtCombineArgs& args, int token) {
    const HtCommon& c = args.common;
    return Shape::kMode != kHtCombineExpertFlat && int(ptx::lane_id()) < c.num_ranks
               ? args.token_rank_slot[int64_t(token) * c.num_ranks + ptx::lane_id()]
               : -1;
}

// Lane 0 of a warp that has nothing left to reduce: the first and the last such warp are marked.
SY_DEVICE void trace_reduced(const OpTrace& trace) {
    trace_mark(trace, kHtCombineReduced);
    trace_mark(trace, kHtCombineFirstReduced, true);
}

// Reduces whole chunk `chunk` after waiting for its rows; false when the wait failed.
template <typename Shape>
SY_DEVICE bool reduce_chunk(const HtCombineArgs& args, int chunk, int32_t self_first_row) {
    const HtCommon& c = args.common;
    if (!wait_for_chunk<Shape>(args, chunk)) return false;
    const int last = min((chunk + 1) * kHtCombineChunkTokens, c.num_tokens);
    for (int token = chunk * kHtCombineChunkTokens; token < last; ++token)
        reduce_token<Shape>(args, token, 0, Shape::kHidden, true, self_first_row,
                            first_group_slot<Shape>(args, token));
    return true;
}

// One reduce item of a token split into channel parts (kReducePartChannels each): the token's
// `part`. The warp with a chunk's first item (its first token's part 0) waits for the chunk's rows
// and marks the chunk ready (this op's sequence, in this rank's workspace); the chunk's other items
// wait for that mark. The token's slots do not depend on the wait: loaded first, the latencies
// overlap (and so does the op's sequence, loaded here rather than held in registers across the
// reduce loop, which sits at the kernel's register cap). False when a wait failed.
template <typename Shape>
SY_DEVICE bool reduce_token_part(const HtCombineArgs& args, int token, int part, int32_t self_first_row) {
    const HtCommon& c = args.common;
    const uint64_t sequence = c.layout.workspace.counters(c.local_base)[kCounterHt] + 1;
    const int chunk = token / kHtCombineChunkTokens;
    const int32_t slot = first_group_slot<Shape>(args, token);
    uint64_t* ready = c.layout.workspace.ht_combine_ready(c.local_base, chunk);
    if (token % kHtCombineChunkTokens == 0 && part == 0) {
        if (!wait_for_chunk<Shape>(args, chunk)) return false;
        if (ptx::lane_id() == 0) ptx::st_release_sys(ready, sequence);
    } else {
        bool arrived = true;
        if (ptx::lane_id() == 0)
            arrived = wait_for_sequence(ready, sequence, c.diagnostics, kPhaseHtCombine, c.rank);
        // The acquiring lane's view now orders the whole warp's reads (warp barrier).
        __syncwarp();
        if (!__shfl_sync(0xffffffffu, arrived, 0)) return false;
    }
    const int begin = part * kReducePartChannels;
    reduce_token<Shape>(args, token, begin, min(begin + kReducePartChannels, Shape::kHidden), part == 0,
                        self_first_row, slot);
    return true;
}

// The reduce's items, in arrival order: the first `chunks - tail_chunks` are whole chunks
// (reduce_chunk), then each of the last `tail_chunks` chunks is split into (token, channel part)
// items (reduce_token_part), token-major, `parts` per token. A warp takes items one at a time from
// a counter of this rank's workspace (`claimed`; sender and publisher warps join once their rows
// are out; the last block resets the counter, finish_locally), or items first, first + stride, ...
// Which warp sums a token, or a part of it, does not change its sum.
//  - With many tokens the last chunks are split (tail_chunks: enough items for every warp of the
//    grid), so the chunks that arrive last are summed by many warps at once instead of by the one
//    warp that took the chunk.
//  - With fewer chunks than reducers every chunk is split (tail_chunks = chunks).
// Splitting every chunk of a large op was slower (an acquire and a slot lookup before every part),
// as were claiming the last chunks token by token, and claiming every token one at a time.
template <typename Shape>
SY_DEVICE void reduce_items(const HtCombineArgs& args, uint64_t* counters, int chunks, int tail_chunks,
                            int parts, bool claimed, int first, int stride, int32_t self_first_row) {
    auto* next_item = reinterpret_cast<unsigned long long*>(counters + kCounterHtNextItem);
    const int whole = chunks - tail_chunks;
    const int items = ht_reduce_items(chunks, tail_chunks, parts);
    for (int next = first;; next += stride) {
        int item = next;
        if (claimed) {
            unsigned long long taken = 0;
            if (ptx::lane_id() == 0) taken = atomicAdd(next_item, 1ull);
            item = int(min(__shfl_sync(0xffffffffu, taken, 0), (unsigned long long)items));
        }
        if (item >= items) return;
        const HtReduceItem work = ht_reduce_item(item, whole, parts);
        if (work.token < 0) {
            if (!reduce_chunk<Shape>(args, work.chunk, self_first_row)) return;
            continue;
        }
        if (work.token >= args.common.num_tokens) continue;  // past the end of a partial last chunk
        if (!reduce_token_part<Shape>(args, work.token, work.part, self_first_row)) return;
    }
}

// reduce_home, for every warp of a kWarps block whose role takes part: the reducer warps and,
// when the chunks are claimed (enough of them for every reducer, or a token is one part), the
// kSendWarps senders and the publisher once their rows are out.
template <typename Shape, int kWarps, int kSendWarps>
SY_DEVICE void reduce_home(const HtCombineArgs& args, uint64_t* counters, int32_t self_first_row) {
    constexpr int kOtherWarps = kSendWarps + 1;  // senders and the publisher
    constexpr int kReduceWarps = kWarps - kOtherWarps;
    constexpr int kParts = (Shape::kHidden + kReducePartChannels - 1) / kReducePartChannels;
    const int warp = int(threadIdx.x / 32);
    const int blocks = int(ptx::grid_blocks());
    const int reducers = blocks * kReduceWarps;
    // (32-bit arithmetic: at the kernel's register cap, 64-bit divisions here made it spill.)
    const int chunks = (args.common.num_tokens + kHtCombineChunkTokens - 1) / kHtCombineChunkTokens;
    const bool claimed = chunks >= reducers || kParts == 1;
    if (warp < kOtherWarps && !claimed) return;
    const int tail_chunks = ht_reduce_tail_chunks(chunks, kParts, blocks * kWarps, claimed);
    const int reducer = int(blockIdx.x) * kReduceWarps + (warp - kOtherWarps);
    reduce_items<Shape>(args, counters, chunks, tail_chunks, kParts, claimed, reducer, reducers,
                        self_first_row);
    if (ptx::lane_id() == 0) trace_reduced(args.trace);
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
