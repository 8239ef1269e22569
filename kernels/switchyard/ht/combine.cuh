// High-throughput combine, direct topology. One kernel; each block's warps split into senders and
// reducers, so the home reduces tokens while the rows of later tokens are still crossing:
//
//  enter          tell every peer this rank entered the combine (its combine region is free to
//                 be written) and wait until every peer has;
//  send_rows      (sender warps) each warp takes received rows and writes them back to the
//                 token's home rank, into slot (rank ordinal | top-k index) x token of the home's
//                 combine region (rank-major rows whose home is this rank stay where they are, in
//                 y): rank-major rows as they are, expert-major rows per k (flat) or reduced over
//                 this rank's k first and rounded to bf16 once (hierarchical); after each group of
//                 send_group rows the homes' arrival counters of (the rows' token chunks, this
//                 rank) are raised: by the publisher warp for everything queued (kPublish, the
//                 default, combine_publish.cuh) or by the sender itself after its own fence;
//  reduce_home    (reducer warps, and with kPublish the senders and publisher once done) in the
//                 order the rows arrive, by chunks of kHtCombineChunkTokens home tokens (kPublish:
//                 claimed one at a time from a counter; else fixed per warp): wait until every source's rows
//                 of the chunk are in (the home knows how many from its dispatch handle), then sum each
//                 token's channels in fp32 in the fixed order (biases, then slots ascending) and
//                 round to bf16 once, and pick each k's weight from its owner's record
//                 (combined_topk_weights). With fewer chunks than reducer warps, tokens are split
//                 into one-round channel ranges over the warps (a chunk's first item waits and
//                 marks the chunk ready for the others);
//  finish         the last block advances the op sequence and tells every peer it is done.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/combine_bulk_send.cuh"
#include "switchyard/ht/combine_publish.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/transport/completion.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

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
// is one part or the split is off.
SY_HOST_DEVICE int32_t ht_reduce_tail_chunks(int32_t chunks, int32_t parts, int32_t grid_warps,
                                             bool whole_chunks, bool split) {
    if (!whole_chunks) return chunks;
    if (!split || parts <= 1) return 0;
    const int32_t per_chunk = kHtCombineChunkTokens * parts;
    const int32_t wanted = (grid_warps + per_chunk - 1) / per_chunk;
    return wanted < chunks ? wanted : chunks;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

SY_DEVICE uint8_t* combine_record(const HtCombineArgs& args, uint8_t* base, int slot, int token) {
    return base + args.common.layout.ht_combine_offset +
           (int64_t(slot) * args.common.max_tokens + token) * args.record.total_bytes;
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

// Fourteen 16-byte loads in flight per lane before their stores (7 KB per warp): a row copy is
// latency-bound otherwise. A 7168-channel bf16 row takes two rounds.
SY_DEVICE void copy_row_to(const HtCombineArgs& args, uint8_t* destination, const uint8_t* source) {
    const int64_t bytes = int64_t(args.common.hidden) * 2;
    constexpr int kUnroll = 14;
    for (int64_t base = int64_t(ptx::lane_id()) * 16; base < bytes; base += kUnroll * 512) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (base + u * 512 < bytes) v[u] = *reinterpret_cast<const uint4*>(source + base + u * 512);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (base + u * 512 < bytes) *reinterpret_cast<uint4*>(destination + base + u * 512) = v[u];
    }
}

// send_rows for one rank-major row `row` received from home rank `home`, token `token` there.
// Returns the number of records written (the home's arrival count for them).
SY_DEVICE int send_row(const HtCombineArgs& args, int64_t row, int home, int token) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    uint8_t* home_base = c.peer_bases[home];
    if (args.mode == 0) {
        uint8_t* destination = combine_record(args, home_base, args.row_combine_slot[row], token);
        copy_row_to(args, destination, args.y + row * args.y_row_stride_bytes);
        float* meta = reinterpret_cast<float*>(destination + args.record.meta_offset);
        if (int(lane) < c.topk)
            meta[lane] = args.row_weights ? args.row_weights[row * args.row_weights_stride + lane] : 0.0f;
        return 1;
    }
    if (args.mode == 1) {
        int written = 0;
        for (int k = 0; k < c.topk; ++k) {
            const int32_t expert_row = args.row_expert_row[row * c.topk + k];
            if (expert_row < 0) continue;
            uint8_t* destination = combine_record(args, home_base, k, token);
            copy_row_to(args, destination, args.y + int64_t(expert_row) * args.y_row_stride_bytes);
            float* meta = reinterpret_cast<float*>(destination + args.record.meta_offset);
            if (int(lane) < c.topk)
                meta[lane] = (int(lane) == k && args.row_weights)
                                 ? args.row_weights[int64_t(expert_row) * args.row_weights_stride]
                                 : 0.0f;
            ++written;
        }
        return written;
    }
    // Hierarchical: reduce this rank's rows of the token (k ascending) in fp32, round once.
    uint8_t* destination = combine_record(args, home_base, args.row_combine_slot[row], token);
    for (int channel = int(lane) * 8; channel < c.hidden; channel += 256) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < c.topk; ++k) {
            const int32_t expert_row = args.row_expert_row[row * c.topk + k];
            if (expert_row < 0) continue;
            float v[8];
            unpack8(*reinterpret_cast<const uint4*>(args.y + int64_t(expert_row) * args.y_row_stride_bytes +
                                                    channel * 2),
                    v);
            const float w = args.dispatch_row_weights[row * c.topk + k];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = args.weighted ? fmaf(w, v[i], acc[i]) : acc[i] + v[i];
        }
        *reinterpret_cast<uint4*>(destination + channel * 2) = pack8(acc);
    }
    float* meta = reinterpret_cast<float*>(destination + args.record.meta_offset);
    if (int(lane) < c.topk) {
        const int32_t expert_row = args.row_expert_row[row * c.topk + lane];
        meta[lane] = (expert_row >= 0 && args.row_weights)
                         ? args.row_weights[int64_t(expert_row) * args.row_weights_stride]
                         : 0.0f;
    }
    return 1;
}

// After a warp's group of rows: make them visible system-wide, then raise each home's arrival
// counter of (the row's token chunk, this rank) by the records written (lane j: row j).
SY_DEVICE void signal_arrivals(const HtCommon& c, int group, int home, int token, int written) {
    // Every lane fences its own stores; the signalling lanes' fences after the warp barrier then
    // cover them all (a fence is cumulative only over writes its thread has observed).
    ptx::fence_acq_rel_sys();
    __syncwarp();
    if (int(ptx::lane_id()) < group && written > 0) {
        ptx::fence_acq_rel_sys();
        ptx::red_add_relaxed_sys(
            c.layout.workspace.ht_combine_arrival(c.peer_bases[home], token / kHtCombineChunkTokens, c.rank),
            uint64_t(written));
    }
}

// Rank-major combine does not copy a home's own rows to itself: the home reads them from y (row
// self_first_row + the token's slot at this rank), which halves the rows moved at EP2.
SY_DEVICE bool reads_own_rows(const HtCombineArgs& args) {
    return args.mode == 0;
}

// Records that source `source` writes to this home for token `token` in this op.
SY_DEVICE uint32_t records_expected(const HtCombineArgs& args, int token, int source) {
    const HtCommon& c = args.common;
    if (args.mode == 1) {
        uint32_t count = 0;
        for (int k = 0; k < c.topk; ++k) {
            const int32_t expert = args.topk_idx[int64_t(token) * c.topk + k];
            count += expert >= 0 && expert / c.local_experts == source;
        }
        return count;
    }
    const bool routed = args.token_rank_slot[int64_t(token) * c.num_ranks + source] >= 0;
    return routed && !(reads_own_rows(args) && source == c.rank) ? 1u : 0u;
}

// Waits (one warp) until every source's records of home chunk `chunk` have arrived, and adds
// them to the home's consumed tally. False when a wait failed (the error is recorded).
SY_DEVICE bool wait_for_chunk(const HtCombineArgs& args, int chunk) {
    const HtCommon& c = args.common;
    const int first = chunk * kHtCombineChunkTokens;
    const int last = min(first + kHtCombineChunkTokens, c.num_tokens);
    bool ok = true;
    for (int source = int(ptx::lane_id()); source < c.num_ranks; source += 32) {
        uint32_t expected = 0;
#pragma unroll
        for (int i = 0; i < kHtCombineChunkTokens; ++i)  // independent loads, one latency
            expected += first + i < last ? records_expected(args, first + i, source) : 0u;
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
// per channel the order stays bias0, bias1, slots ascending.
template <typename SlotPayload>
SY_DEVICE void sum_slots(const HtCombineArgs& args, int token, int num_slots, SlotPayload slot_payload,
                         int begin, int end) {
    const HtCommon& c = args.common;
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
                present[j] = slot + j < num_slots &&
                             (args.mode != 1 || args.topk_idx[int64_t(token) * c.topk + slot + j] >= 0);
                w[j] = present[j] && args.mode == 1 && args.weighted
                           ? args.home_weights[int64_t(token) * args.home_weights_stride + slot + j]
                           : 1.0f;
                if (present[j]) load(slot_payload(slot + j), raw[j]);
            }
#pragma unroll
            for (int j = 0; j < 2; ++j)
                if (present[j]) accumulate(raw[j], args.mode == 1 && args.weighted, w[j]);
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

// Channels of one reduce item: one round of sum_two_rows (kReduceWide 16-byte loads per lane and
// row). A token is reduced in items of this many channels by different warps, so that a few
// tokens (or the last chunk to arrive) are spread over many warps instead of one per chunk.
constexpr int kReduceWide = 7;
constexpr int kReducePartChannels = 256 * kReduceWide;

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

// reduce_home for channels [begin, end) of one home token (`first`: the token's first item);
// `self_first_row` is the first rank-major row from this rank; `first_group_slot` is lane q's
// token_rank_slot of rank q, loaded by the caller before its wait (see the kernel).
SY_DEVICE void reduce_token(const HtCombineArgs& args, int token, int begin, int end, bool first,
                            int32_t self_first_row, int32_t first_group_slot) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    int num_slots = 0;
    int self_slot = -1;     // reads_own_rows: the slot that is this rank's own row
    int64_t self_row = -1;  // and that row of y
    if (args.mode == 1) {
        num_slots = c.topk;
    } else {
        // Lane q of each 32-rank group loads the token's slot at rank q (one load latency).
        for (int group = 0; group < c.num_ranks; group += 32) {
            const int q = group + int(lane);
            const int32_t slot = group == 0        ? first_group_slot
                                 : q < c.num_ranks ? args.token_rank_slot[int64_t(token) * c.num_ranks + q]
                                                   : -1;
            const uint32_t routed = __ballot_sync(0xffffffffu, slot >= 0);
            const int own = c.rank - group;
            if (own >= 0 && own < 32 && ((routed >> own) & 1u) && reads_own_rows(args)) {
                self_slot = num_slots + __popc(routed & ((1u << own) - 1u));
                self_row = int64_t(self_first_row) + __shfl_sync(0xffffffffu, slot, own);
            }
            num_slots += __popc(routed);
        }
    }
    auto slot_payload = [&](int slot) -> const uint8_t* {
        return slot == self_slot ? args.y + self_row * args.y_row_stride_bytes
                                 : combine_record(args, c.local_base, slot, token);
    };
    if (args.mode != 1 && !args.bias0 && !args.bias1 && num_slots <= 2)
        sum_two_rows(args, token, num_slots > 0 ? slot_payload(0) : nullptr,
                     num_slots > 1 ? slot_payload(1) : nullptr, begin, end);
    else
        sum_slots(args, token, num_slots, slot_payload, begin, end);
    if (first && args.combined_weights && int(lane) < c.topk) {
        const int32_t expert = args.topk_idx[int64_t(token) * c.topk + lane];
        float weight = 0.0f;
        if (expert >= 0) {
            int slot = int(lane);
            if (args.mode != 1) {
                const int owner = expert / c.local_experts;
                slot = 0;
                for (int q = 0; q < owner; ++q)
                    slot += args.token_rank_slot[int64_t(token) * c.num_ranks + q] >= 0;
            }
            if (slot == self_slot)
                weight =
                    args.row_weights ? args.row_weights[self_row * args.row_weights_stride + lane] : 0.0f;
            else
                weight = reinterpret_cast<const float*>(combine_record(args, c.local_base, slot, token) +
                                                        args.record.meta_offset)[lane];
        }
        args.combined_weights[int64_t(token) * c.topk + lane] = weight;
    }
}

// Lane 0 of a warp that has nothing left to reduce: the first and the last such warp are marked.
SY_DEVICE void trace_reduced(const OpTrace& trace) {
    trace_mark(trace, kHtCombineReduced);
    trace_mark(trace, kHtCombineFirstReduced, true);
}

// Reduces whole chunk `chunk` after waiting for its rows; false when the wait failed.
SY_DEVICE bool reduce_chunk(const HtCombineArgs& args, int chunk, int32_t self_first_row) {
    const HtCommon& c = args.common;
    if (!wait_for_chunk(args, chunk)) return false;
    const int last = min((chunk + 1) * kHtCombineChunkTokens, c.num_tokens);
    for (int token = chunk * kHtCombineChunkTokens; token < last; ++token) {
        const int32_t first_group_slot =
            args.mode != 1 && int(ptx::lane_id()) < c.num_ranks
                ? args.token_rank_slot[int64_t(token) * c.num_ranks + ptx::lane_id()]
                : -1;
        reduce_token(args, token, 0, c.hidden, true, self_first_row, first_group_slot);
    }
    return true;
}

// One reduce item of a token split into channel parts (kReducePartChannels each): the token's
// `part`. The warp with a chunk's first item (its first token's part 0) waits for the chunk's rows
// and marks the chunk ready (this op's sequence, in this rank's workspace); the chunk's other items
// wait for that mark. The token's slots do not depend on the wait: loaded first, the latencies
// overlap (and so does the op's sequence, loaded here rather than held in registers across the
// reduce loop, which sits at the kernel's register cap). False when a wait failed.
SY_DEVICE bool reduce_token_part(const HtCombineArgs& args, int token, int part, int32_t self_first_row) {
    const HtCommon& c = args.common;
    const uint64_t sequence = c.layout.workspace.counters(c.local_base)[kCounterHt] + 1;
    const int chunk = token / kHtCombineChunkTokens;
    const int32_t first_group_slot = args.mode != 1 && int(ptx::lane_id()) < c.num_ranks
                                         ? args.token_rank_slot[int64_t(token) * c.num_ranks + ptx::lane_id()]
                                         : -1;
    uint64_t* ready = c.layout.workspace.ht_combine_ready(c.local_base, chunk);
    if (token % kHtCombineChunkTokens == 0 && part == 0) {
        if (!wait_for_chunk(args, chunk)) return false;
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
    reduce_token(args, token, begin, min(begin + kReducePartChannels, c.hidden), part == 0, self_first_row,
                 first_group_slot);
    return true;
}

// The reduce's items, in arrival order: the first `chunks - tail_chunks` are whole chunks
// (reduce_chunk), then each of the last `tail_chunks` chunks is split into (token, channel part)
// items (reduce_token_part), token-major, `parts` per token. A warp takes items one at a time from a counter
// of this rank's workspace (`claimed`: the publisher kernel, where sender warps join once their rows are out;
// the last block resets the counter, finish_and_signal), or items first, first + stride, ... Which warp sums
// a token, or a part of it, does not change its sum.
//  - With many tokens the last chunks are split (tail_chunks: enough items for every warp of the
//    grid), so the chunks that arrive last are summed by many warps at once: reduced whole, the
//    reduce ended ~12-14 us after the last rows at 24 SMs, one warp's reduce of a chunk.
//  - With fewer chunks than reducers every chunk is split (tail_chunks = chunks).
// Splitting every chunk at 4,096 tokens was slower (an acquire and a slot lookup before every part:
// 397 against 254 us), as was claiming the last chunks token by token while the reducers were
// behind the senders (251.6 against 246 us at 16 SMs, f7f2bd2). Claiming tokens one at a time (the
// claimant of a chunk's first token marking it ready for the others) took 296 against 246 us at
// 16 SMs (665f974).
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
            if (!reduce_chunk(args, work.chunk, self_first_row)) return;
            continue;
        }
        if (work.token >= args.common.num_tokens) continue;  // past the end of a partial last chunk
        if (!reduce_token_part(args, work.token, work.part, self_first_row)) return;
    }
}

}  // namespace ht_detail

// kPublish: one warp per block publishes the register senders' rows (combine_publish.cuh); a
// separate instantiation, so the default kernel's registers stay as they were (the kernel sits at
// the 128-register cap of 512 threads).
template <bool kPublish>
__global__ void __launch_bounds__(512, 1) ht_combine_kernel(const __grid_constant__ HtCombineArgs args) {
    const HtCommon& c = args.common;
    uint64_t* counters = c.layout.workspace.counters(c.local_base);
    const uint64_t sequence = counters[kCounterHt] + 1;
    if (threadIdx.x == 0) trace_mark(args.trace, kHtCombineStart, true);
    if (blockIdx.x == 0 && threadIdx.x == 0) mark_kernel_start(counters, kHtStartSlots, sequence);
    const int num_warps = blockDim.x / 32;
    const int warp = threadIdx.x / 32;
    // Warps [0, send_warps) send, then (with a publisher) warp send_warps publishes their rows'
    // arrivals, and the others reduce (with bulk sending, one warp sends).
    const bool bulk = args.bulk_stages > 0 && args.mode == 0;
    const int publishers = kPublish && !bulk ? 1 : 0;
    const int send_warps =
        bulk ? 1 : min(max(args.send_warps, 1), min(num_warps - 1 - publishers, kHtPublishMaxSenders));
    const int reduce_warps = num_warps - send_warps - publishers;
    __shared__ int ok;
    __shared__ ht_detail::PublishQueues publish_queues;
    if (publishers) publish_queues.init(send_warps);

    // enter: rows may go to a home once its combine region is free, i.e. once it has entered this
    // op. Right after a dispatch that is already known: every peer's counts for that dispatch
    // arrived here, so every peer had finished its earlier ops, the last combine that read its
    // region included (ops on one buffer run in lock step). Otherwise the ranks announce entry.
    if (threadIdx.x == 0) ok = 1;
    const bool after_dispatch = args.entry_handshake == 0 && counters[kCounterHtLastDispatch] + 1 == sequence;
    if (!after_dispatch) {
        // After a failed op the buffer is poisoned: announce nothing, so peers report the stall.
        if (blockIdx.x == 0 && !is_poisoned(c.diagnostics))
            for (int peer = threadIdx.x; peer < c.num_ranks; peer += blockDim.x)
                ptx::st_release_sys(c.layout.workspace.ht_combine_entry(c.peer_bases[peer]) + c.rank,
                                    sequence);
        __syncthreads();
        for (int peer = threadIdx.x; peer < c.num_ranks; peer += blockDim.x)
            if (!wait_for_sequence(c.layout.workspace.ht_combine_entry(c.local_base) + peer, sequence,
                                   c.diagnostics, kPhaseHtCombine, peer, ht_detail::peer_details(c, peer)))
                ok = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) trace_mark(args.trace, kHtCombineEntered);

    // The per-source row offsets are read once per block, into shared memory.
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    __shared__ int32_t row_offsets[kHtMaxRanks + 1];
    for (int s = threadIdx.x; s <= c.num_ranks; s += blockDim.x)
        row_offsets[s] = args.recv_info[info.row_offsets() + s];
    __syncthreads();
    if (ok && bulk && warp == 0) {
        extern __shared__ __align__(128) uint8_t bulk_stages[];
        __shared__ __align__(8) uint64_t bulk_loaded[kHtBulkMaxStages];
        __shared__ int32_t bulk_row_home[ht_detail::kBulkInfoRing], bulk_row_token[ht_detail::kBulkInfoRing];
        __shared__ float bulk_weights[2 * 32 * 32];
        ht_detail::send_rows_bulk(args, row_offsets, bulk_stages, bulk_loaded, bulk_row_home, bulk_row_token,
                                  bulk_weights, min(int(args.bulk_stages), int(kHtBulkMaxStages)));
    } else if (ok && warp < send_warps) {
        // send_rows: rows leave in item order (home-token order) whoever sends them, so the homes'
        // chunks complete one after another.
        const int64_t sender = int64_t(blockIdx.x) * send_warps + warp;
        const int64_t senders = int64_t(gridDim.x) * send_warps;
        const int32_t rows = row_offsets[c.num_ranks];
        // Rows whose home is this rank stay in y when the home reads them there.
        const bool skip_own = ht_detail::reads_own_rows(args);
        const int64_t own_first = row_offsets[c.rank], own_last = row_offsets[c.rank + 1];
        const int64_t sent_rows = rows - (skip_own ? own_last - own_first : 0);
        // Groups of send_group rows: lane j finds row j's home and token (so their loads overlap),
        // the warp sends the rows, then queues them for the publisher
        // (kPublish) or fences and signals them itself; that fence waits for all the warp's stores
        // to peers, so it is paid once per group.
        const int group = min(max(args.send_group, 1), 32);
        // Claimed (claim_sends, the default): the warp takes the next `group` consecutive items
        // from a counter, the claim for its next group issued before it sends this one, so warps
        // that run faster send more (a fixed split left the grid waiting for its slowest SMs:
        // 247 against 210.5 us at 24 SMs). Else lane j takes item sender + j * senders per round.
        const bool claimed = args.claim_sends != 0;
        ClaimAhead claims{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextSendItem),
                          (unsigned long long)group};
        if (claimed) claims.issue();
        uint32_t queued = 0;  // rows queued for the publisher (publish_queues)
        for (int64_t round = 0;; ++round) {
            int64_t base = sender + round * senders * group, stride = senders;
            if (claimed) {
                base = claims.take(sent_rows);
                stride = 1;
            }
            if (base >= sent_rows) break;
            const int64_t my_item = base + int64_t(ptx::lane_id()) * stride;
            int64_t my_row = -1;
            int my_home = 0, my_token = 0;
            if (int(ptx::lane_id()) < group && my_item < sent_rows) {
                my_row = skip_own && my_item >= own_first ? my_item + (own_last - own_first) : my_item;
                while (my_home + 1 < c.num_ranks && row_offsets[my_home + 1] <= my_row) ++my_home;
                my_token = args.row_src_token[my_row];
            }
            int my_written = 0;
            for (int j = 0; j < group; ++j) {
                const int64_t row = __shfl_sync(0xffffffffu, my_row, j);
                if (row < 0) break;
                const int written = ht_detail::send_row(args, row, __shfl_sync(0xffffffffu, my_home, j),
                                                        __shfl_sync(0xffffffffu, my_token, j));
                if (int(ptx::lane_id()) == j) my_written = written;
            }
            if (publishers)
                ht_detail::queue_rows(publish_queues, warp, queued, group, my_home, my_token, my_written);
            else
                ht_detail::signal_arrivals(c, group, my_home, my_token, my_written);
        }
        if (publishers) ht_detail::finish_queueing(publish_queues);
        if (ptx::lane_id() == 0) trace_mark(args.trace, kHtCombineSent);
    } else if (ok && warp < send_warps + publishers) {
        ht_detail::publish_rows(c, publish_queues, send_warps);
        if (ptx::lane_id() == 0) trace_mark(args.trace, kHtCombinePublished);
    }
    // The reduce (reduce_items): the reducer warps and, in the publisher kernel with many tokens,
    // the senders and the publisher once their rows are out. Its unit: whole chunks of home tokens
    // when there are enough to keep every reducer busy (or a token is one sum round), the last
    // chunks split into parts when they are claimed; else (few tokens) every chunk split.
    const int blocks = int(ptx::grid_blocks());
    const int reducers = blocks * reduce_warps;
    // (32-bit arithmetic: at the kernel's register cap, 64-bit divisions here made it spill.)
    const int chunks = (c.num_tokens + kHtCombineChunkTokens - 1) / kHtCombineChunkTokens;
    const int max_parts = (c.hidden + ht_detail::kReducePartChannels - 1) / ht_detail::kReducePartChannels;
    const bool whole_chunks = chunks >= reducers || max_parts == 1;
    const bool claimed = kPublish && whole_chunks;
    const bool joins = claimed && !bulk && warp < send_warps + publishers;
    if (ok && (warp >= send_warps + publishers || joins)) {
        const int tail_chunks = ht_reduce_tail_chunks(chunks, max_parts, blocks * num_warps, whole_chunks,
                                                      claimed && args.split_tail);
        const int reducer = int(blockIdx.x) * reduce_warps + (warp - send_warps - publishers);
        ht_detail::reduce_items(args, counters, chunks, tail_chunks, max_parts, claimed, reducer, reducers,
                                row_offsets[c.rank]);
        if (ptx::lane_id() == 0) ht_detail::trace_reduced(args.trace);
    }

    // finish (no system fences: the arrival counters carry the rows' completion, finish_locally)
    trace_finish(args.trace, kHtCombineEnd, kHtCombineMarks, kHtCombineFirstMarks);
    ht_detail::finish_locally(c, counters, c.layout.workspace.ht_combine_done_offset, sequence);
}

#endif

}  // namespace switchyard::device
