// HT dispatch, the sending role (ht/dispatch.cuh composes the roles):
//
//  send_tokens   each warp claims tokens one at a time (WarpTokens); a token is staged once in
//                shared memory (bulk load, or quantized by the warp) and stored to every
//                destination rank at its final rank-major row: sum of earlier sources' rows plus
//                the token's slot (a deterministic prefix sum from the routing kernel); the lanes
//                write the per-destination metadata. Rows to peers leave through the lanes' 16-byte
//                stores, this rank's own rows through a bulk store.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

// What a dispatch kernel is specialized on (its template arguments besides the launch constants).
// The records carry fp8 and scales unless kScaleKind is kScaleNone; bf16 rows with a scale kind
// are quantized in the kernel.
template <int kHidden_, int kTopk_, int kInputPayload_, int kScaleKind_>
struct HtDispatchShape {
    static constexpr int kHidden = kHidden_;
    static constexpr int kTopk = kTopk_;
    static constexpr int kInputPayload = kInputPayload_;
    static constexpr int kScaleKind = kScaleKind_;
    static constexpr int kRecordPayload = kScaleKind == kScaleNone ? kPayloadBf16 : kPayloadFp8;
    static constexpr bool kQuantize = kInputPayload == kPayloadBf16 && kRecordPayload == kPayloadFp8;
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 8 == 0, "a lane moves 8 channels at a time");
    static_assert(kInputPayload == kRecordPayload || kQuantize,
                  "fp8 rows are passed through, never re-quantized");

    // The records as they land in the receive region; a stage holds payload and scales.
    SY_HOST_DEVICE static constexpr RecordLayout record() {
        return RecordLayout::dispatch(kHidden, kRecordPayload, kScaleKind, kTopk);
    }
};

// Which phase of a stage barrier a staged token waits for. A sender warp stages its tokens through
// two shared-memory stages in turn, and each use of a stage completes one phase of its barrier, so
// the warp's token of index i (0, 1, 2, ... in the order it stages them) uses stage i & 1 and waits
// for that barrier's phase i / 2, of parity (i / 2) & 1. A type of its own, made only from the
// index, so no caller can pass a parity of its own keeping: one that does not advance with the uses
// waits for the wrong phase on every other use of a stage, reads the stage before its load lands,
// and lets the next load arrive on a phase whose one arrival was already counted, after which the
// barrier never completes a phase again.
struct StageUse {
    int32_t stage;
    uint32_t parity;
    SY_HOST_DEVICE static StageUse of_token(int32_t index) {
        return StageUse{index & 1, uint32_t(index >> 1) & 1u};
    }
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Starts the bulk load of token `token`'s payload into `stage` (lane 0).
template <typename Shape>
SY_DEVICE void issue_load(const HtDispatchArgs& args, int token, uint8_t* stage, uint64_t* barrier) {
    const RecordLayout r = Shape::record();
    ptx::mbarrier_arrive_expect_tx(barrier, uint32_t(r.payload_bytes));
    ptx::bulk_load(stage, args.x + int64_t(token) * args.x_row_stride_bytes, uint32_t(r.payload_bytes),
                   barrier);
}

// Quantizes bf16 token `token` into `stage` (payload then scales, record layout) with the FP8
// quantizer every kernel shares (common/fp8.cuh, DESIGN.md §2): 8 channels per lane per step, 16
// lanes per 128-channel block, 2 blocks per warp step.
template <typename Shape>
SY_DEVICE void quantize_token(const HtDispatchArgs& args, int token, uint8_t* stage) {
    constexpr bool kUe8m0 = Shape::kScaleKind == kScaleUe8m0;
    const uint32_t lane = ptx::lane_id();
    const uint8_t* row = args.x + int64_t(token) * args.x_row_stride_bytes;
    uint32_t* scales = reinterpret_cast<uint32_t*>(stage + Shape::record().scale_offset);
    for (int base = 0; base < Shape::kHidden; base += 256) {
        const int channel = base + int(lane) * 8;
        const bool inside = channel < Shape::kHidden;
        const uint4 raw =
            inside ? *reinterpret_cast<const uint4*>(row + channel * 2) : make_uint4(0, 0, 0, 0);
        // Lanes 0-15 hold one block, lanes 16-31 the next; a lane past the row counts as the floor.
        float amax = fp8::amax8(raw, fp8::kAmaxFloor);
#pragma unroll
        for (int mask = 8; mask >= 1; mask >>= 1)
            amax = fp8::max_f32(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
        uint2 quantized;
        uint32_t stored;  // fp32 bits of the scale, or the UE8M0 exponent byte
        if constexpr (kUe8m0) {
            stored = fp8::ue8m0_byte(fp8::div_rn(amax, fp8::kE4m3Max));
            quantized = fp8::quantize8<true>(raw, fp8::ue8m0_scale(stored));
        } else {
            quantized = fp8::quantize8<false>(raw, fp8::div_rn(fp8::kE4m3Max, amax));
            stored = fp8::float_to_bits(fp8::div_rn(amax, fp8::kE4m3Max));
        }
        if (inside) {
            *reinterpret_cast<uint2*>(stage + channel) = quantized;
            if ((lane & 15u) == 0) {
                const int block = channel / 128;
                if constexpr (kUe8m0)  // bytes of one word come from four blocks: stored as bytes
                    reinterpret_cast<uint8_t*>(scales)[block] = uint8_t(stored);
                else
                    scales[block] = stored;
            }
        }
    }
    // Zero the unused bytes of the last UE8M0 word so records are deterministic.
    if (kUe8m0 && lane == 0) {
        const int blocks = int(ceil_div(Shape::kHidden, 128));
        for (int b = blocks; b < int(ceil_div(Shape::kHidden, 512)) * 4; ++b)
            reinterpret_cast<uint8_t*>(scales)[b] = 0;
    }
    ptx::fence_proxy_async_shared();
    __syncwarp();
}

// Loads (or quantizes) token `token` into `stage` (payload then scales, record layout). With
// `prefetched`, the bulk load was already issued (issue_load, stage_ahead) and is only waited for
// here, or the token was already quantized (stage_ahead); `use` says which phase of the stage
// barrier that load completes. False when that phase never completed (reported:
// wait_stage_barrier); the warp then sends nothing more.
template <typename Shape>
SY_DEVICE bool stage_token(const HtDispatchArgs& args, int token, uint8_t* stage, uint64_t* barrier,
                           StageUse use, bool prefetched) {
    if constexpr (Shape::kQuantize) {
        if (!prefetched) quantize_token<Shape>(args, token, stage);  // else stage_ahead did
        return true;
    }
    const uint32_t lane = ptx::lane_id();
    const RecordLayout r = Shape::record();
    if (!prefetched && lane == 0) issue_load<Shape>(args, token, stage, barrier);
    if constexpr (Shape::kInputPayload == kPayloadFp8) {
        uint32_t* scales = reinterpret_cast<uint32_t*>(stage + r.scale_offset);
        const int words = int(r.scale_bytes / 4);
        for (int w = lane; w < words; w += 32)
            scales[w] =
                args.x_scales[int64_t(token) * args.scale_row_stride + int64_t(w) * args.scale_col_stride];
        ptx::fence_proxy_async_shared();
    }
    // Every lane waits; the answer is the warp's (a lane that saw the phase complete just after
    // another gave up still stops with it).
    return __all_sync(0xffffffffu, wait_stage_barrier(barrier, use.parity, args.common.diagnostics));
}

// A warp's first token staged ahead, while the grid still waits for the routing kernel (the
// caller's tokens were ready before the routing began: HtDispatchArgs::after_routing): its bulk load
// issued, or the token quantized, into the stage of its first use. stage_token(..., prefetched)
// completes it once the routing's results are in: the payload's load is then off the path to the
// first rows (~2 us, a round trip to the token and the barrier's wait).
template <typename Shape>
SY_DEVICE void stage_ahead(const HtDispatchArgs& args, int token, uint8_t* stage, uint64_t* barrier) {
    if constexpr (Shape::kQuantize) {
        quantize_token<Shape>(args, token, stage);
    } else {
        if (ptx::lane_id() == 0) issue_load<Shape>(args, token, stage, barrier);
        __syncwarp();
    }
}

// A token staged ahead that the warp will not send (its op failed first): the bulk load into the
// block's shared memory completes before the block may exit (bounded: wait_stage_barrier).
template <typename Shape>
SY_DEVICE void drop_staged(const HtDispatchArgs& args, uint64_t* barrier, StageUse use) {
    if constexpr (!Shape::kQuantize)
        if (ptx::lane_id() == 0) wait_stage_barrier(barrier, use.parity, args.common.diagnostics);
    __syncwarp();
}

// A token's routing as send_token needs it: lanes < K hold its expert, its position among the
// expert's rows and its weight; lane q < 32 holds its slot at rank q (-1: not sent there). The
// main loop loads the next token's route while this token is sent (with its payload's bulk load):
// loaded at the start of send_token, these loads put one memory latency per token on every warp's
// path.
struct TokenRoute {
    int32_t expert = -1, position = -1;
    float weight = 0.0f;
    int32_t first_group_slot = -1;
};

template <typename Shape>
SY_DEVICE TokenRoute load_route(const HtDispatchArgs& args, int token) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    TokenRoute route;
    if (int(lane) < Shape::kTopk) {
        route.expert = args.topk_idx[int64_t(token) * Shape::kTopk + lane];
        route.position = args.token_expert_pos[int64_t(token) * Shape::kTopk + lane];
        if (args.topk_weights)
            route.weight = args.topk_weights[int64_t(token) * args.weights_row_stride + lane];
    }
    if (int(lane) < c.num_ranks)
        route.first_group_slot = args.token_rank_slot[int64_t(token) * c.num_ranks + lane];
    return route;
}

// Copies a staged token (payload and scales: the record up to its metadata) from `stage` to
// `record` with the lanes' 16-byte stores, a lane's pieces 512 bytes apart. Each lane loads a batch
// of its pieces from shared memory before it stores any: the stores are generic (any rank's
// memory), so the compiler cannot move a shared-memory load above an earlier store, and a loop of
// load-then-store pairs waits one shared-memory latency per 16 bytes. Up to 8 loads per batch, in
// equal batches (7 x 4 for a 7168-channel bf16 row).
template <typename Shape>
SY_DEVICE void copy_staged(uint8_t* record, const uint8_t* stage) {
    constexpr int kPieces = int(Shape::record().meta_offset / 16);
    constexpr int kPerLane = int(ceil_div(kPieces, 32));
    constexpr int kBatch = int(ceil_div(kPerLane, ceil_div(kPerLane, 8)));
    constexpr bool kWhole = kPieces % (32 * kBatch) == 0;  // every lane's every batch is full
    static_assert(Shape::record().meta_offset % 16 == 0, "records are copied in 16-byte pieces");
    const int lane = int(ptx::lane_id());
#pragma unroll 1
    for (int first = 0; first < kPerLane; first += kBatch) {
        uint4 piece[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
            const int at = (first + i) * 32 + lane;
            if (kWhole || at < kPieces) piece[i] = reinterpret_cast<const uint4*>(stage)[at];
        }
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
            const int at = (first + i) * 32 + lane;
            if (kWhole || at < kPieces) reinterpret_cast<uint4*>(record)[at] = piece[i];
        }
    }
}

// Sends one staged token to every destination rank it goes to, with its route (load_route; the
// slots of ranks past the first 32 are loaded here, all of a group's together).
template <typename Shape>
SY_DEVICE void send_token(const HtDispatchArgs& args, int token, const TokenRoute& route,
                          const uint8_t* stage, const int32_t* dest_offset) {
    constexpr int kTopk = Shape::kTopk;
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    const RecordLayout r = Shape::record();
    const int32_t expert = route.expert, position = route.position;
    const float weight = route.weight;
    int ordinal = 0;  // this destination's position among the token's destinations (combine slot)
    for (int group = 0; group < c.num_ranks; group += 32) {
        const int my_rank = group + int(lane);
        const int32_t my_slot = group == 0 ? route.first_group_slot
                                : my_rank < c.num_ranks
                                    ? args.token_rank_slot[int64_t(token) * c.num_ranks + my_rank]
                                    : -1;
        for (uint32_t rest = __ballot_sync(0xffffffffu, my_slot >= 0); rest != 0; rest &= rest - 1) {
            const int source_lane = __ffs(rest) - 1;
            const int q = group + source_lane;
            const int32_t slot = __shfl_sync(0xffffffffu, my_slot, source_lane);
            if (dest_offset[q] < 0) {  // a masked destination: the row is dropped, its slot kept
                ++ordinal;
                continue;
            }
            const int64_t row = int64_t(dest_offset[q]) + slot;
            uint8_t* record = c.peer_bases[q] + c.layout.ht_dispatch_offset + row * r.total_bytes;
            int32_t* meta = reinterpret_cast<int32_t*>(record + r.meta_offset);
            if (int(lane) < kTopk) {
                const bool owned = expert >= q * c.local_experts && expert < (q + 1) * c.local_experts;
                meta[2 + lane] = owned ? expert - q * c.local_experts : -1;
                meta[2 + kTopk + lane] = __float_as_int(owned ? weight : 0.0f);
                meta[2 + 2 * kTopk + lane] = owned ? position : -1;
            }
            // Rows to peers leave through the lanes' plain stores: bulk (TMA) stores to a peer's
            // memory read stale rows on the other GPU after the completion flag in a soak on two
            // GPUs. This rank's own rows stay on this GPU, where nothing reads them before the
            // kernel ends: a bulk store then costs the lanes no stores.
            const bool bulk = q == c.rank;
            if (lane == 0) {
                meta[0] = token;
                meta[1] = ordinal;
                if (bulk) ptx::bulk_store(record, stage, uint32_t(r.meta_offset));
            }
            if (!bulk) copy_staged<Shape>(record, stage);
            ++ordinal;
        }
    }
    if (lane == 0) ptx::bulk_commit();
    __syncwarp();
}

// The tokens one warp sends, in order: warp w starts with tokens [w * chunk, (w + 1) * chunk) and
// then takes chunks of `chunk` tokens from a counter of this rank's workspace, so warps that run
// faster send more (a static split of the tokens over the warps left the grid waiting for its
// slowest warps). Each claim is issued one chunk ahead, so its latency hides behind the chunk
// before it. Which warp sends a token does not change where its rows land. Warp-collective.
struct WarpTokens {
    int32_t num_tokens, total_warps, chunk;
    ClaimAhead claims;  // tokens claimed past the first chunks, `chunk` per claim
    int32_t end = 0;    // end of the current range

    SY_DEVICE int begin(int global_warp) {
        const int first = int(min64(int64_t(global_warp) * chunk, num_tokens));
        end = int(min64(int64_t(first) + chunk, num_tokens));
        if (first < end) claims.issue();
        return first < end ? first : -1;
    }
    // The token after `token`, or -1 when the warp is done.
    SY_DEVICE int after(int token) {
        if (token + 1 < end) return token + 1;
        const int64_t claimed_before = int64_t(total_warps) * chunk;  // the first chunks, not claimed
        const int64_t first = claimed_before + claims.take(num_tokens - claimed_before);
        if (first >= num_tokens) return -1;
        end = int(min64(first + chunk, num_tokens));
        return int(first);
    }
};

// A warp's tokens (WarpTokens) and the first of them, which the kernel stages ahead before it
// waits for the routing kernel where it may (HtDispatchArgs::after_routing).
struct WarpStart {
    WarpTokens tokens;
    int token = -1;       // the warp's first token; -1: it has none
    bool staged = false;  // staged ahead into stage 0 (stage_ahead)
};

template <typename Shape, int kWarps, int kClaimTokens>
SY_DEVICE WarpStart start_tokens(const HtDispatchArgs& args, uint64_t* counters, uint8_t* stages,
                                 uint64_t* barriers, bool stage) {
    const int global_warp = int(blockIdx.x) * kWarps + int(threadIdx.x / 32);
    WarpStart start{
        WarpTokens{args.common.num_tokens, int(gridDim.x) * kWarps, kClaimTokens,
                   ClaimAhead{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextItem),
                              (unsigned long long)kClaimTokens}}};
    start.token = start.tokens.begin(global_warp);
    if (stage && start.token >= 0) {
        stage_ahead<Shape>(args, start.token, stages, &barriers[0]);
        start.staged = true;
    }
    return start;
}

// send_tokens (every warp of a block of kWarps): the warp walks its tokens (`start`, kClaimTokens
// per claim) through its two shared-memory stages (`stages`, `barriers`). Without quantization the
// next token's bulk load is issued before this token is sent, so its latency hides behind the sends.
template <typename Shape>
SY_DEVICE void send_tokens(const HtDispatchArgs& args, WarpStart start, const int32_t* dest_offset,
                           uint8_t* stages, uint64_t* barriers) {
    constexpr bool kPrefetch = !Shape::kQuantize;
    const int64_t stage_bytes = Shape::record().meta_offset;  // payload and scales of one record
    const uint32_t lane = ptx::lane_id();
    WarpTokens& tokens = start.tokens;
    int token = start.token;
    TokenRoute route{};
    if (token >= 0) route = load_route<Shape>(args, token);
    for (int index = 0; token >= 0; ++index) {
        // Each use of a stage completes one phase of its barrier, and the stages alternate. (Phases
        // kept in an array indexed by the stage lived in local memory: a load and a store per token.)
        const StageUse use = StageUse::of_token(index);
        const int stage = use.stage;
        if (!kPrefetch || index == 0) {
            // The stores issued from this stage two tokens ago must have read it.
            if (lane == 0) ptx::bulk_wait_read<1>();
            __syncwarp();
        }
        if (!stage_token<Shape>(args, token, stages + int64_t(stage) * stage_bytes, &barriers[stage], use,
                                index == 0 ? start.staged : kPrefetch))
            break;  // reported; the op fails and signals nothing
        const int next = tokens.after(token);
        if (kPrefetch && next >= 0) {
            const int next_stage = stage ^ 1;
            // The next stage was last read by the stores of the previous token: let them finish reading.
            if (lane == 0) {
                ptx::bulk_wait_read<0>();
                issue_load<Shape>(args, next, stages + int64_t(next_stage) * stage_bytes,
                                  &barriers[next_stage]);
            }
            __syncwarp();
        }
        const TokenRoute next_route = next >= 0 ? load_route<Shape>(args, next) : TokenRoute{};
        send_token<Shape>(args, token, route, stages + int64_t(stage) * stage_bytes, dest_offset);
        token = next;
        route = next_route;
    }
    if (lane == 0) {
        ptx::bulk_wait<0>();
        trace_mark(args.trace, kHtDispatchSent);
        trace_mark(args.trace, kHtDispatchFirstSent, true);
    }
    __syncwarp();
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
