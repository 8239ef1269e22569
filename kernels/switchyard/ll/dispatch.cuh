// Low-latency dispatch (DESIGN.md §2 masked layout, §5 LL): one kernel, send and receive halves.
//
// Send (the first S blocks, a work item per warp at a time): every sending block first loads the
// whole top-k table once and builds, in shared memory, one bit mask of tokens per expert and per
// rank (a repeated expert within a token sets its bit once). A token's slot at a rank (its rank
// among this rank's tokens to that destination) and its position in an expert's rows (its rank
// among this rank's tokens to that expert) are then the popcounts of the mask bits below it. A
// warp quantizes its slice of the token once (or passes bf16 through) and stores it straight into
// each destination's receive area [source][slot]: a token crosses to a rank once. Block 0 writes,
// per destination, a header {tokens, rows per local expert} from the masks. Each sending block
// then raises this rank's arrival counter at every destination (ll_arrive), which publishes its
// records and headers.
//
// Receive (every block): wait for every source's arrivals; from the headers compute where each
// source's rows of each local expert start (sources ascending, so rows are ordered by source then
// token, bit-reproducibly); then warps copy each arrived record into the rows of the experts it
// names, scales column-major, and note (source, token, k) of every row for the combine. With
// zero_padding (contiguous layout), the same warps also zero the padding rows of every expert's
// aligned segment, from the offsets every block computes: no extra synchronization.
//
// Invalid expert ids (outside [-1, E)) are treated as -1 and reported as invalid routing by block 0
// after its arrivals, and a repeated expert within one token counts once, so every rank still
// finishes the op (the reporting rank's own receive half then stops: its buffer is poisoned).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_slices.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

enum LlPhases : int32_t { kLlSendHalf = 1, kLlRecvHalf = 2, kLlBothHalves = 3 };

struct LlDispatchArgs {
    LlBufferArgs buffer;
    const void* x;            // bf16 [T, H]
    int64_t x_row_stride;     // elements
    const void* topk_idx;     // [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;  // elements
    int32_t num_tokens;       // T of this rank
    int32_t num_experts;      // E
    int32_t local_experts;    // L = E / R
    void* recv_x;             // masked: [L, R*T_ll, H]; contiguous: [recv_rows, H] (fp8 or bf16)
    uint32_t* recv_scales;    // masked: [L, words, R*T_ll]; contiguous: [words, recv_rows] (column-major)
    int32_t* recv_count;      // [L]
    int32_t* recv_expert_offsets;  // [L + 1]: first row of each expert, then the end
    int32_t expert_alignment;      // contiguous layout: expert starts are multiples; 0 = masked
    int64_t recv_rows;             // contiguous layout: rows of recv_x (its capacity)
    int32_t zero_padding;          // contiguous layout: zero the segments' padding rows and their scales
    int32_t* recv_source;          // [L, R*T_ll]: ll_pack_source(s, t, k) of each valid row
    const float* topk_weights;     // optional [T, K] fp32: travel with the tokens (hierarchical combine)
    int64_t weights_row_stride;    // elements
    // Per received record (source s, slot i), for a hierarchical combine: the token's rows here
    // [R*T_ll, K + 1] {home token, then ll_pack_row of slot k or -1}, its weights [R*T_ll, K] (0
    // without topk_weights), and the records per source as a prefix [R + 1].
    int32_t* recv_token_rows;
    float* recv_token_weights;
    int32_t* recv_record_starts;
    int32_t* cumulative_local_expert_recv_stats;  // optional [L]
    int64_t* wait_time_stats;                     // optional [R]
};

// Words of one routing bit mask (a bit per token of the op).
SY_HOST_DEVICE int32_t ll_token_mask_words(int32_t num_tokens) {
    return num_tokens > 0 ? (num_tokens + 31) / 32 : 1;
}

// Dynamic shared memory of the dispatch kernel: mask, presence and item starts, then a scratch
// area that holds the routing masks [(E + R) masks] while sending and, after, the receive row
// offsets [R * L = E] followed by the experts' first rows [L + 1] and the padding rows before
// each expert [L + 1] (zero_padding).
SY_HOST_DEVICE int64_t ll_dispatch_shared_bytes(int32_t num_ranks, int32_t num_experts, int32_t num_tokens) {
    const int64_t masks = (int64_t(num_experts) + num_ranks) * ll_token_mask_words(num_tokens);
    const int64_t receive = int64_t(num_experts) + 2 * (int64_t(num_experts) / num_ranks + 1);
    return 4 * (3 * int64_t(num_ranks) + 1 + max64(masks, receive)) + 64;
}

// Rows of an expert-major contiguous output on a buffer of T_ll tokens per rank: every source's
// tokens can land on up to min(K, L) local experts, and each expert's start is rounded up to
// `alignment` rows.
SY_HOST_DEVICE int64_t ll_contiguous_rows(int32_t num_ranks, int32_t max_tokens, int32_t topk,
                                          int32_t local_experts, int32_t alignment) {
    const int64_t per_token = topk < local_experts ? topk : local_experts;
    return int64_t(num_ranks) * max_tokens * per_token + int64_t(local_experts) * (alignment - 1);
}

// A token is sent, and a record received, in slices that separate warps move in parallel: one
// warp walking a whole 7168-channel row keeps too few loads in flight (ncu, EP1 on H200: the
// kernel took ~70 us for 128 tokens with a warp per token). Send slices are 256-channel steps,
// receive slices 512-byte steps.
constexpr int kLlSendStepsPerSlice = 4;
constexpr int kLlRecvStepsPerSlice = 4;
SY_HOST_DEVICE constexpr int ll_send_slices(int hidden) {
    return ((hidden + 255) / 256 + kLlSendStepsPerSlice - 1) / kLlSendStepsPerSlice;
}
// Bytes of a received row's payload (fp8, or bf16 without scales), its receive slices and its
// scale words (fp32, or UE8M0 bytes packed four per word).
SY_HOST_DEVICE constexpr int64_t ll_payload_bytes(int hidden, int scale_kind) {
    return scale_kind == kScaleNone ? int64_t(hidden) * 2 : hidden;
}
SY_HOST_DEVICE constexpr int ll_recv_slices(int hidden, int scale_kind) {
    return int(((ll_payload_bytes(hidden, scale_kind) + 511) / 512 + kLlRecvStepsPerSlice - 1) /
               kLlRecvStepsPerSlice);
}
SY_HOST_DEVICE constexpr int ll_scale_words(int hidden, int scale_kind) {
    return scale_kind == kScaleNone      ? 0
           : scale_kind == kScaleFloat32 ? (hidden + 127) / 128
                                         : (hidden + 511) / 512;
}

// Padding rows (zero_padding, contiguous layout): the rows of each expert's aligned segment past
// its count, numbered over all experts in order. `padding_starts` [L + 1]: the padding rows of the
// experts before e, then of all. The output row of padding row p: expert e's padding rows end its
// segment, at expert_starts[e + 1].
SY_HOST_DEVICE int64_t ll_padding_row(const int32_t* padding_starts, const int32_t* expert_starts, int32_t L,
                                      int32_t p) {
    const int32_t expert = last_start_at_or_below(padding_starts, L, p);  // the expert whose padding holds p
    return int64_t(expert_starts[expert + 1]) - (padding_starts[expert + 1] - p);
}

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
constexpr int kLlPrefetchedIds = 4;  // ids per thread loaded before the prologue (T * K <= 1,024 here)

// The raw ids, checked only in finish_masks: a check right after each load (as the first version
// did) made the thread wait for every load in turn, four dependent round trips before the
// prologue's own loads could issue (seen in the SASS).
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
    // slower: 1.67 vs 1.2-1.4 us for 128 tokens, SWITCHYARD_LL_TRACE.)
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
// q's local experts}, counted from the masks. Its arrival publishes them with its records.
SY_DEVICE void write_headers(const LlDispatchArgs& args, uint64_t sequence, const uint32_t* shared_mask,
                             const RoutingMasks& masks) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, L = args.local_experts;
    const int32_t set = ll_set_of(sequence);
    for (int i = threadIdx.x; i < R * (L + 1); i += blockDim.x) {
        const int32_t q = i / (L + 1), e = i % (L + 1);
        if (shared_mask[q]) continue;
        int32_t* header = buffer.set_layout.header(buffer.set_base(buffer.peer_bases[q], set), buffer.rank);
        header[e] = masks.total(e == 0 ? masks.rank(q) : masks.expert(q * L + e - 1));
    }
}

// One arrived record (source s, slot i): copy it into the rows of the local experts it names.
// `row_offsets` [R * L]: source s's first row within local expert e; `expert_starts` [L]: expert
// e's first row in the output (e * R * T_ll in the masked layout).
template <int kHidden, int kTopk, int kScaleKind, bool kContiguous>
SY_DEVICE void receive_record(const LlDispatchArgs& args, uint8_t* set_base, int32_t source, int32_t slot,
                              int slice, const int32_t* row_offsets, const int32_t* expert_starts) {
    const uint32_t lane = ptx::lane_id();
    const LlBufferArgs& buffer = args.buffer;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int64_t rows_per_expert = int64_t(buffer.num_ranks) * buffer.set_layout.max_tokens;
    const uint8_t* record = buffer.set_layout.record(set_base, source, slot, layout.total_bytes);
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
        local = meta[2 + lane];
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

}  // namespace ll_dispatch_detail

// kContiguous: the expert-major contiguous layout (expert_alignment > 0, optional zero padding), else
// the masked one. A kernel parameter, not a run-time test, so that the masked kernel does not carry
// the contiguous layout's scans and padding code: 85 KB of cubin instead of 110 at hidden 7168, and
// ~1.1 us less per 128-token op; ncu put it in instruction fetch ("no instruction" stalls 0.55
// against 1.14-1.32 per issued instruction with cold caches; design notes §1, §3).
template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, typename IndexT, int kPhases,
          bool kContiguous>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_dispatch_kernel(const __grid_constant__ LlDispatchArgs args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 16 == 0, "rows are moved in 16-byte units");
    constexpr bool kSend = (kPhases & kLlSendHalf) != 0, kRecv = (kPhases & kLlRecvHalf) != 0;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t shared_sequences[2];
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, L = args.local_experts;
    uint32_t* shared_mask = reinterpret_cast<uint32_t*>(shared_words);      // [R]
    uint32_t* shared_present = shared_mask + R;                             // [R]
    int32_t* item_starts = reinterpret_cast<int32_t*>(shared_present + R);  // [R + 1]
    int32_t* scratch = item_starts + R + 1;    // routing masks, then row offsets (ll_dispatch_shared_bytes)
    int32_t* expert_starts = scratch + R * L;  // [L + 1], receive half (after the row offsets)
    int32_t* padding_starts = expert_starts + L + 1;  // [L + 1], receive half with zero_padding
    const int warp = int(threadIdx.x / 32);
    const int global_warp = int(blockIdx.x) * kNumWarps + warp, num_warps = int(gridDim.x) * kNumWarps;

    ll_trace(buffer, 0);
    constexpr int kSlices = ll_send_slices(kHidden);
    const int64_t send_items = int64_t(args.num_tokens) * kSlices;
    const int32_t sending_blocks =
        kSend ? ll_sending_blocks(send_items, kNumWarps, buffer.send_items_per_warp) : 0;
    const bool sends = int32_t(blockIdx.x) < sending_blocks;
    __shared__ int32_t first_invalid;
    if (threadIdx.x == 0)
        first_invalid = ll_dispatch_detail::kNoInvalidEntry;  // the prologue's barrier publishes it
    ll_dispatch_detail::PrefetchedIds<IndexT> ids{};
    if (sends)
        ids = ll_dispatch_detail::begin_masks<kTopk, IndexT>(args, reinterpret_cast<uint32_t*>(scratch));
    // A warp's first send item is known now (items go to warps in order), so its slice of x is
    // loaded before the prologue and the masks, which then hide that load's latency.
    ll_dispatch_detail::TokenSlice input{};
    if (sends && global_warp < send_items)
        input = ll_dispatch_detail::load_send_item<kHidden>(args, global_warp);
    if (!ll_prologue<kLlDispatch, kSend, kRecv>(buffer, shared_sequences, shared_mask)) {
        ll_block_done<kLlDispatch, kSend, kRecv>(buffer, shared_sequences);
        return;
    }
    ll_trace(buffer, 1);

    if constexpr (kSend) {
        const uint64_t sequence = shared_sequences[0];
        if (sends) {
            const ll_dispatch_detail::RoutingMasks masks = ll_dispatch_detail::finish_masks<kTopk, IndexT>(
                args, reinterpret_cast<uint32_t*>(scratch), ids, &first_invalid);
            ll_trace(buffer, 2);
            const int64_t stride = int64_t(sending_blocks) * kNumWarps;
            for (int64_t item = global_warp; item < send_items; item += stride) {
                ll_dispatch_detail::TokenSlice next{};  // the next item's slice, loaded one item ahead
                if (item + stride < send_items)
                    next = ll_dispatch_detail::load_send_item<kHidden>(args, item + stride);
                ll_dispatch_detail::send_token<kHidden, kTopk, kScaleKind, IndexT>(
                    args, int32_t(item / kSlices), int32_t(item % kSlices), input, sequence, shared_mask,
                    masks);
                input = next;
            }
            ll_trace(buffer, 3);
            // Headers after the records: their stores overlap the records' still in flight.
            if (blockIdx.x == 0) ll_dispatch_detail::write_headers(args, sequence, shared_mask, masks);
            ll_trace(buffer, 4);
            ll_arrive(buffer, kLlDispatch, sequence, sending_blocks, shared_mask);
            // Only now: a report poisons this rank's buffer, and its peers must still get this op.
            if (blockIdx.x == 0)
                ll_dispatch_detail::report_invalid_routing<kTopk, IndexT>(args, first_invalid);
            ll_trace(buffer, 5);
        }
        __syncthreads();  // the receive half reuses the masks' shared memory
    }
    // Here the block waits anyway: for its peers' arrivals, or (send half only) for its end.
    ll_block_done<kLlDispatch, kSend, kRecv>(buffer, shared_sequences);

    if constexpr (kRecv) {
        const uint64_t sequence = shared_sequences[1];
        if (!ll_wait_sources(buffer, kLlDispatch, sequence, shared_mask, shared_present,
                             args.wait_time_stats))
            return;
        ll_trace(buffer, 6);
        uint8_t* set_base = buffer.set_base(buffer.local_base, ll_set_of(sequence));
        // Row offsets: source s's rows of local expert e start after those of sources < s. The
        // headers of up to 8 sources are loaded before they are summed (independent loads).
        constexpr int kBatch = 8;
        for (int e = threadIdx.x; e <= L; e += blockDim.x) {
            // e < L: rows of local expert e; e == L: records (tokens) per source, into item_starts.
            int32_t running = 0;
            for (int first = 0; first < R; first += kBatch) {
                int32_t counts[kBatch];
#pragma unroll
                for (int j = 0; j < kBatch; ++j) {
                    const int s = first + j;
                    counts[j] = s < R && shared_present[s]
                                    ? buffer.set_layout.header(set_base, s)[e < L ? 1 + e : 0]
                                    : 0;
                }
#pragma unroll
                for (int j = 0; j < kBatch; ++j) {
                    if (first + j >= R) break;
                    if (e < L)
                        scratch[(first + j) * L + e] = running;
                    else
                        item_starts[first + j] = running;
                    running += counts[j];
                }
            }
            if (e == L) {
                item_starts[R] = running;
            } else {
                expert_starts[e] = running;  // the expert's rows, until the scan below
                if (blockIdx.x == 0) {
                    args.recv_count[e] = running;
                    if (args.cumulative_local_expert_recv_stats)
                        args.cumulative_local_expert_recv_stats[e] += running;
                }
            }
        }
        __syncthreads();
        if (warp == 0) {
            // Each expert's first output row: e * R * T_ll (masked), or the exclusive prefix of the
            // rows rounded up to the alignment (contiguous), and with zero_padding the prefix of
            // each segment's padding rows. expert_starts holds the counts until then.
            const uint32_t lane = ptx::lane_id();
            if constexpr (kContiguous) {
                const int64_t alignment = args.expert_alignment;
                if (args.zero_padding) {
                    const int64_t padding = warp_exclusive_scan(
                        L,
                        [&](int32_t e) {
                            return align_up(int64_t(expert_starts[e]), alignment) - expert_starts[e];
                        },
                        [&](int32_t e, int64_t prefix) { padding_starts[e] = int32_t(prefix); });
                    if (lane == 0) padding_starts[L] = int32_t(padding);
                }
                const int64_t rows = warp_exclusive_scan(
                    L, [&](int32_t e) { return align_up(int64_t(expert_starts[e]), alignment); },
                    [&](int32_t e, int64_t prefix) { expert_starts[e] = int32_t(prefix); });
                if (lane == 0) expert_starts[L] = int32_t(rows);
            } else {
                const int64_t rows_per_expert = int64_t(R) * buffer.set_layout.max_tokens;
                for (int e = int(lane); e <= L; e += 32) expert_starts[e] = int32_t(e * rows_per_expert);
            }
            __syncwarp();
            if (blockIdx.x == 0 && args.recv_expert_offsets)
                for (int e = int(lane); e <= L; e += 32) args.recv_expert_offsets[e] = expert_starts[e];
            if (blockIdx.x == 0)
                for (int s = int(lane); s <= R; s += 32) args.recv_record_starts[s] = item_starts[s];
        }
        __syncthreads();
        ll_trace(buffer, 7);
        constexpr int kRecvSlices = ll_recv_slices(kHidden, kScaleKind);
        // One sequence of work items over the grid's warps: the padding's (zero_padding only) and
        // then the records' slices. Padding items are stores only, which leave the warp at once, so
        // the loads of the record items that follow overlap them.
        int32_t padding_items = 0;
        if constexpr (kContiguous)
            if (args.zero_padding)
                padding_items = ll_dispatch_detail::padding_items<kHidden, kScaleKind>(padding_starts[L]);
        const int32_t items = padding_items + item_starts[R] * kRecvSlices;
        int32_t item = global_warp;
        if constexpr (kContiguous)
            for (; item < padding_items; item += num_warps)
                ll_dispatch_detail::zero_padding_item<kHidden, kScaleKind>(args, item, padding_starts,
                                                                           expert_starts);
        for (; item < items; item += num_warps) {
            const int32_t record_item = item - padding_items;
            const int32_t record = record_item / kRecvSlices;
            int32_t source = 0;
            while (item_starts[source + 1] <= record) ++source;
            ll_dispatch_detail::receive_record<kHidden, kTopk, kScaleKind, kContiguous>(
                args, set_base, source, record - item_starts[source], record_item % kRecvSlices, scratch,
                expert_starts);
        }
        ll_trace(buffer, 8);
    }
    ll_trace(buffer, kLlTraceSlots - 1);
}

#endif

}  // namespace switchyard::device
