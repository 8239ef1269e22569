// The send half of the LL dispatch (ll/dispatch.cuh): the routing masks, the records stored into
// each destination's receive area, the headers, and the arrivals that publish them.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/diagnostics.cuh"
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

// Raw id of slot `k` of token `t`.
template <typename IndexT>
SY_DEVICE int64_t load_raw(const LlDispatchArgs& args, int32_t t, int32_t k) {
    return static_cast<const IndexT*>(args.topk_idx)[int64_t(t) * args.topk_row_stride + k];
}

// An id outside [-1, E): the entry is treated as empty (-1) and block 0 reports the first such
// entry once it has arrived everywhere (report_invalid_routing), so every rank finishes the op.
constexpr int32_t kInvalidExpert = -2;
constexpr int32_t kNoInvalidEntry = 0x7fffffff;  // `first_invalid` when every id is valid

SY_DEVICE int32_t checked_expert(const LlDispatchArgs& args, int64_t raw) {
    return raw < -1 || raw >= args.num_experts ? kInvalidExpert : int32_t(raw);
}

// Expert id of slot `k` of token `t`, or -1 for an empty or invalid slot.
template <typename IndexT>
SY_DEVICE int32_t load_expert(const LlDispatchArgs& args, int32_t t, int32_t k) {
    const int32_t expert = checked_expert(args, load_raw<IndexT>(args, t, k));
    return expert == kInvalidExpert ? -1 : expert;
}

// Block 0, after its arrivals: report the first invalid entry (t * K + k) the masks found.
template <int kTopk, typename IndexT>
SY_DEVICE void report_invalid_routing(const LlDispatchArgs& args, int32_t first_invalid) {
    if (first_invalid == kNoInvalidEntry || threadIdx.x != 0) return;
    const int32_t t = first_invalid / kTopk, k = first_invalid % kTopk;
    report_error(args.buffer.diagnostics, kErrorInvalidRouting, kPhaseLlDispatch, -1,
                 uint64_t(args.num_experts), uint64_t(load_raw<IndexT>(args, t, k)), 0, entry_details(t, k));
}

// Lane k < K: the expert of slot k after dropping repeats of an earlier slot (-1 otherwise).
template <int kTopk, typename IndexT>
SY_DEVICE int32_t token_expert(const LlDispatchArgs& args, int32_t t) {
    const uint32_t lane = ptx::lane_id();
    const int32_t expert = int(lane) < kTopk ? load_expert<IndexT>(args, t, lane) : -1;
    return first_lane_with(expert) ? expert : -1;
}

// Routing masks in shared memory: bit t of mask m is set when token t goes to expert m (m < E)
// or to rank m - E (a token's repeated expert or rank sets its bit once).
struct RoutingMasks {
    uint32_t* words;  // [(E + R) * words_per_mask]
    int32_t words_per_mask;
    int32_t num_experts;

    SY_DEVICE const uint32_t* expert(int32_t e) const { return words + int64_t(e) * words_per_mask; }
    SY_DEVICE const uint32_t* rank(int32_t r) const {
        return words + int64_t(num_experts + r) * words_per_mask;
    }
    // Bits set below bit t: the token's rank among the mask's tokens.
    SY_DEVICE static int32_t below(const uint32_t* mask, int32_t t) {
        int32_t count = 0;
        for (int w = 0; w < t / 32; ++w) count += __popc(mask[w]);
        return count + __popc(mask[t / 32] & ((1u << (t % 32)) - 1u));
    }
    SY_DEVICE int32_t total(const uint32_t* mask) const {
        int32_t count = 0;
        for (int w = 0; w < words_per_mask; ++w) count += __popc(mask[w]);
        return count;
    }
};

// The block builds the masks from the whole top-k table in one parallel pass over its T * K ids.
// Split in two so the first ids' loads and the zeroing of the masks overlap the prologue:
// begin_masks before it, finish_masks after its barrier. Invalid ids count as empty; block 0 notes
// the first invalid entry in `first_invalid` (shared, preset to kNoInvalidEntry before the prologue).
constexpr int kLlPrefetchedIds = 4;  // ids per thread loaded before the prologue

// The raw ids, checked only in finish_masks: a check right after each load would make the thread
// wait for every load in turn, dependent round trips before the prologue's own loads could issue.
template <typename IndexT>
struct PrefetchedIds {
    IndexT raw[kLlPrefetchedIds];  // -1 past the table
};

template <int kTopk, typename IndexT>
SY_DEVICE PrefetchedIds<IndexT> begin_masks(const LlDispatchArgs& args, uint32_t* shared_words) {
    const int64_t entries = int64_t(args.num_tokens) * kTopk;
    PrefetchedIds<IndexT> ids;
#pragma unroll
    for (int j = 0; j < kLlPrefetchedIds; ++j) {
        const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
        ids.raw[j] =
            i < entries ? IndexT(load_raw<IndexT>(args, int32_t(i / kTopk), int32_t(i % kTopk))) : IndexT(-1);
    }
    const int64_t words =
        int64_t(args.num_experts + args.buffer.num_ranks) * ll_token_mask_words(args.num_tokens);
    for (int64_t i = threadIdx.x; i < words; i += blockDim.x) shared_words[i] = 0;
    return ids;
}

template <int kTopk, typename IndexT>
SY_DEVICE RoutingMasks finish_masks(const LlDispatchArgs& args, uint32_t* shared_words,
                                    const PrefetchedIds<IndexT>& ids, int32_t* first_invalid) {
    RoutingMasks masks{shared_words, ll_token_mask_words(args.num_tokens), args.num_experts};
    // (A warp-wide OR of the experts' masks for the rank masks, instead of the second atomic, was
    // slower.)
    auto mark = [&](int64_t i, int32_t expert) {
        if (expert == kInvalidExpert && blockIdx.x == 0) atomicMin(first_invalid, int32_t(i));
        if (expert < 0) return;
        const int32_t t = int32_t(i / kTopk);
        const uint32_t bit = 1u << (t % 32);
        atomicOr(shared_words + int64_t(expert) * masks.words_per_mask + t / 32, bit);
        atomicOr(shared_words +
                     int64_t(args.num_experts + expert / args.local_experts) * masks.words_per_mask + t / 32,
                 bit);
    };
#pragma unroll
    for (int j = 0; j < kLlPrefetchedIds; ++j)
        mark(threadIdx.x + int64_t(j) * blockDim.x, checked_expert(args, int64_t(ids.raw[j])));
    const int64_t entries = int64_t(args.num_tokens) * kTopk;
    for (int64_t i = threadIdx.x + int64_t(kLlPrefetchedIds) * blockDim.x; i < entries; i += blockDim.x)
        mark(i, checked_expert(args, load_raw<IndexT>(args, int32_t(i / kTopk), int32_t(i % kTopk))));
    __syncthreads();
    return masks;
}

// A slice of a token's bf16 row as one warp holds it: 8 channels per lane per 256-channel step.
using TokenSlice = LlSlice<kLlSendStepsPerSlice>;

template <int kHidden, int kTopk, int kScaleKind>
SY_DEVICE void store_payload(const TokenSlice& input, int slice, uint32_t destinations, uint8_t* record) {
    const uint32_t lane = ptx::lane_id();
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    constexpr int kChannelsPerStep = 256;  // 8 channels (16 bytes of bf16) per lane
    constexpr int kSteps = int((kHidden + kChannelsPerStep - 1) / kChannelsPerStep);
    const int first_step = slice * kLlSendStepsPerSlice;
#pragma unroll
    for (int j = 0; j < kLlSendStepsPerSlice; ++j) {
        const int step = first_step + j;
        if (step >= kSteps) break;
        const int channel = step * kChannelsPerStep + int(lane) * 8;
        const bool in_range = channel < kHidden;
        const uint4 raw = input.chunk[j];
        if constexpr (kScaleKind == kScaleNone) {
            for (uint32_t rest = destinations; rest != 0; rest &= rest - 1) {
                uint8_t* dst = reinterpret_cast<uint8_t*>(
                    __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), __ffs(rest) - 1));
                if (in_range)
                    *reinterpret_cast<uint4*>(dst + layout.payload_offset + int64_t(channel) * 2) = raw;
            }
        } else {
            // Lanes 0-15 hold block 2*step, lanes 16-31 block 2*step + 1.
            float amax = fp8::amax8(raw, fp8::kAmaxFloor);
#pragma unroll
            for (int offset = 8; offset >= 1; offset /= 2)
                amax = fp8::max_f32(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
            const int block = 2 * step + int(lane >= 16);
            uint2 quantized;
            uint32_t scale_word;
            if constexpr (kScaleKind == kScaleFloat32) {
                quantized = fp8::quantize8<false>(raw, fp8::div_rn(fp8::kE4m3Max, amax));
                scale_word = fp8::float_to_bits(fp8::div_rn(amax, fp8::kE4m3Max));
            } else {
                scale_word = fp8::ue8m0_byte(fp8::div_rn(amax, fp8::kE4m3Max));
                quantized = fp8::quantize8<true>(raw, fp8::ue8m0_scale(scale_word));
            }
            const bool writes_scale = (lane & 15u) == 0 && block * 128 < kHidden;
            for (uint32_t rest = destinations; rest != 0; rest &= rest - 1) {
                uint8_t* dst = reinterpret_cast<uint8_t*>(
                    __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), __ffs(rest) - 1));
                if (in_range) *reinterpret_cast<uint2*>(dst + layout.payload_offset + channel) = quantized;
                if (writes_scale) {
                    if constexpr (kScaleKind == kScaleFloat32)
                        reinterpret_cast<uint32_t*>(dst + layout.scale_offset)[block] = scale_word;
                    else
                        (dst + layout.scale_offset)[block] = uint8_t(scale_word);
                }
            }
        }
    }
    if constexpr (kScaleKind == kScaleUe8m0) {
        // Unused exponent bytes of the last packed word are zero (as the reference writes them).
        constexpr int kBlocks = (kHidden + 127) / 128;
        constexpr int kPadBytes = int((kHidden + 511) / 512) * 4 - kBlocks;
        if (kPadBytes > 0 && slice == 0) {
            for (uint32_t rest = destinations; rest != 0; rest &= rest - 1) {
                uint8_t* dst = reinterpret_cast<uint8_t*>(
                    __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), __ffs(rest) - 1));
                if (int(lane) < kPadBytes) (dst + layout.scale_offset)[kBlocks + lane] = 0;
            }
        }
    }
}

// Send item `item` (a slice of a token) of x, as one warp holds it.
template <int kHidden>
SY_DEVICE TokenSlice load_send_item(const LlDispatchArgs& args, int64_t item) {
    constexpr int kSlices = ll_send_slices(kHidden);
    const int32_t t = int32_t(item / kSlices);
    return ll_load_slice<kLlSendStepsPerSlice, int64_t(kHidden) * 2>(
        static_cast<const uint8_t*>(args.x) + int64_t(t) * args.x_row_stride * 2, int(item % kSlices),
        ptx::lane_id());
}

// One token's slice `input`: routing, slots, record metadata and payload to every destination
// rank. The caller loaded the slice ahead (load_send_item), so its loads are in flight while the
// routing is worked out.
template <int kHidden, int kTopk, int kScaleKind, typename IndexT>
SY_DEVICE void send_token(const LlDispatchArgs& args, int32_t t, int slice, const TokenSlice& input,
                          uint64_t sequence, const uint32_t* shared_mask, const RoutingMasks& masks) {
    const uint32_t lane = ptx::lane_id();
    const LlBufferArgs& buffer = args.buffer;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int32_t expert = token_expert<kTopk, IndexT>(args, t);
    const int32_t rank = expert >= 0 ? expert / args.local_experts : -1;
    const int32_t position = expert >= 0 ? RoutingMasks::below(masks.expert(expert), t) : 0;
    const int32_t slot = rank >= 0 ? RoutingMasks::below(masks.rank(rank), t) : 0;

    // The lowest slot naming a rank leads it: it holds the token's record address there.
    const bool sends = first_lane_with(rank) && shared_mask[rank] == 0;
    const uint32_t destinations = __ballot_sync(0xffffffffu, sends);
    // The token's weight of slot k (lane k) travels in the metadata (first slice only).
    const float weight = slice == 0 && args.topk_weights != nullptr && expert >= 0
                             ? args.topk_weights[int64_t(t) * args.weights_row_stride + lane]
                             : 0.0f;
    uint8_t* record = nullptr;
    if (sends)
        record = buffer.set_layout.record(buffer.set_base(buffer.peer_bases[rank], ll_set_of(sequence)),
                                          buffer.rank, slot, layout.total_bytes);

    // Metadata (the token's first slice only): lane k writes slot k's local expert id and
    // position as the destination sees them.
    for (uint32_t rest = slice == 0 ? destinations : 0u; rest != 0; rest &= rest - 1) {
        const int source_lane = __ffs(rest) - 1;
        const int32_t destination = __shfl_sync(0xffffffffu, rank, source_lane);
        int32_t* meta = reinterpret_cast<int32_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), source_lane) +
            layout.meta_offset);
        const bool mine = rank == destination && expert >= 0;
        if (lane == 0) {
            meta[0] = t;
            meta[1] = -1;
        }
        if (int(lane) < kTopk) {
            meta[2 + lane] = mine ? expert - destination * args.local_experts : -1;
            meta[2 + kTopk + lane] = mine ? int32_t(fp8::float_to_bits(weight)) : 0;
            meta[2 + 2 * kTopk + lane] = mine ? position : -1;
        }
    }
    store_payload<kHidden, kTopk, kScaleKind>(input, slice, destinations, record);
}

// Block 0, after its sends: per unmasked destination q, the header {tokens to q, rows of each of
// q's local experts}, counted from the masks; with an invalid id (`first_invalid`), the failure
// header instead (ll_layout.cuh), so every destination stops and names this rank. Its arrival
// publishes them with its records.
SY_DEVICE void write_headers(const LlDispatchArgs& args, uint64_t sequence, const uint32_t* shared_mask,
                             const RoutingMasks& masks, int32_t first_invalid) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, L = args.local_experts;
    const int32_t set = ll_set_of(sequence);
    const bool failed = first_invalid != kNoInvalidEntry;
    for (int i = threadIdx.x; i < R * (L + 1); i += blockDim.x) {
        const int32_t q = i / (L + 1), e = i % (L + 1);
        if (shared_mask[q]) continue;
        int32_t* header = buffer.set_layout.header(buffer.set_base(buffer.peer_bases[q], set), buffer.rank);
        if (failed)
            header[e] = e == 0 ? ll_failed_header(kPeerFailureInvalidRouting) : 0;
        else
            header[e] = masks.total(e == 0 ? masks.rank(q) : masks.expert(q * L + e - 1));
    }
}

// What a sending block loads before the prologue, whose own loads then hide these: the first ids
// of the routing masks and the warp's first slice of x (items go to warps in order, so a warp's
// first item is known before the prologue).
template <typename IndexT>
struct SendPrefetch {
    PrefetchedIds<IndexT> ids;
    TokenSlice input;
};

template <int kNumWarps, int kHidden, int kTopk, typename IndexT>
SY_DEVICE SendPrefetch<IndexT> prefetch_send(const LlDispatchArgs& args, const LlDispatchShared& shared,
                                             int32_t* first_invalid) {
    if (threadIdx.x == 0) *first_invalid = kNoInvalidEntry;  // the prologue's barrier publishes it
    SendPrefetch<IndexT> prefetch{};
    prefetch.ids = begin_masks<kTopk, IndexT>(args, reinterpret_cast<uint32_t*>(shared.scratch));
    const int global_warp = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    if (global_warp < int64_t(args.num_tokens) * ll_send_slices(kHidden))
        prefetch.input = load_send_item<kHidden>(args, global_warp);
    return prefetch;
}

// The send half of one sending block, after the prologue: the routing masks, then this block's
// warps' items (a token's slice each, the next item's slice loaded one item ahead), block 0's
// headers after its records (their stores overlap the records' still in flight), and the block's
// arrivals at every destination. Block 0 reports an invalid id only after them: the report
// poisons this rank's buffer, and its peers must still get this op.
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, typename IndexT>
SY_DEVICE void send_tokens(const LlDispatchArgs& args, const LlDispatchShared& shared,
                           const SendPrefetch<IndexT>& prefetch, uint64_t sequence, int32_t sending_blocks,
                           int32_t* first_invalid) {
    const LlBufferArgs& buffer = args.buffer;
    const RoutingMasks masks = finish_masks<kTopk, IndexT>(args, reinterpret_cast<uint32_t*>(shared.scratch),
                                                           prefetch.ids, first_invalid);
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlDispatchRouted);
    constexpr int kSlices = ll_send_slices(kHidden);
    const int64_t items = int64_t(args.num_tokens) * kSlices;
    const int64_t stride = int64_t(sending_blocks) * kNumWarps;
    TokenSlice input = prefetch.input;
    for (int64_t item = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32); item < items; item += stride) {
        TokenSlice next{};
        if (item + stride < items) next = load_send_item<kHidden>(args, item + stride);
        send_token<kHidden, kTopk, kScaleKind, IndexT>(args, int32_t(item / kSlices), int32_t(item % kSlices),
                                                       input, sequence, shared.mask, masks);
        input = next;
    }
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlDispatchSent);
    if (blockIdx.x == 0) write_headers(args, sequence, shared.mask, masks, *first_invalid);
    ll_arrive(buffer, kLlDispatch, sequence, sending_blocks, shared.mask);
    if (int(threadIdx.x) < buffer.num_ranks) trace_mark(buffer.trace, kLlDispatchArrived);
    if (blockIdx.x == 0) report_invalid_routing<kTopk, IndexT>(args, *first_invalid);
}

}  // namespace ll_dispatch_detail

#endif

}  // namespace switchyard::device
