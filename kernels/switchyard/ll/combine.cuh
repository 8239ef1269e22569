// Low-latency combine (DESIGN.md §2, expert-major layouts, weighted; flat or hierarchical): one
// kernel, send and receive halves.
//
// Flat. Send (expert rank): every valid row (expert e, row < count[e]) of y goes back to its home
// rank's combine area slot [k][t] (the dispatch noted (source, token, k) of each row). Receive
// (home rank): wait for every source's arrivals, then
//     out[t] = bf16( fma over k ascending: acc = fma(w[t][k], y(t, k), acc), acc = 0 )
// skipping empty slots, slots whose owner is masked, and repeats of an expert within a token.
//
// Hierarchical (kernel parameter kHierarchical). Send (expert rank q): per received token (the dispatch noted
// each record's rows and the weights that travelled with it), the partial
//     p_q(t) = bf16( fma over q's k ascending: acc = fma(w[t][k], y(t, k), acc), acc = 0 )
// goes back as one row, to slot [first k owned by q][t]: a token's bytes on the way home shrink
// from one row per (token, k) to one per (token, rank). Receive (home rank):
//     out[t] = bf16( sum over ranks q ascending: acc = acc + float(p_q(t)), acc = 0 ).
//
// Both: the first S blocks send (S from the work, which every block reads); each then raises this
// rank's arrival counter at every home rank (ll_arrive), rows or not. The reduction orders are
// fixed and match the CPU reference (reference::combine) bit for bit.
//
// The reduction is a kernel parameter, not a run-time flag, so that each kernel holds only its own
// code. The kernel with both was a 161 KB cubin, and growing it past that made the flat combine ~1
// us slower without touching its path (171.8 KB: 43.4 against 42.4-42.9 us; 170.0 KB: 41.8-42.3
// against 40.8-41.5). Split (flat 73 KB, hierarchical 121 KB), the flat op took 38.1-38.7 us
// against 41.0-41.5 (128 tokens, EP2, graph replay; design notes §1, §3).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_slices.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

struct LlCombineArgs {
    LlBufferArgs buffer;
    const void* y;            // bf16, the dispatch's layout: masked [L, R*T_ll, H] or contiguous [rows, H]
    int64_t y_expert_stride;  // elements (masked layout)
    int64_t y_row_stride;     // elements
    int32_t y_alignment;      // 0: y is masked; > 0: contiguous, expert starts rounded up to this
    const void* topk_idx;     // home: [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;
    const float* topk_weights;  // home: [T, K]
    int64_t weights_row_stride;
    void* out;  // home: bf16 [T, H]
    int64_t out_row_stride;
    int32_t num_tokens;  // T of this (home) rank's dispatch
    int32_t num_experts;
    int32_t local_experts;
    const int32_t* recv_count;   // [L] from the dispatch
    const int32_t* recv_source;  // [L, R*T_ll] from the dispatch
    int64_t* wait_time_stats;    // optional [R]
    // Hierarchical: partials per (token, rank), weighted with the dispatch's weights (the
    // dispatch's per-record routing, LlDispatchArgs::recv_token_rows and the rest).
    const int32_t* recv_token_rows;     // [R*T_ll, K + 1]
    const float* recv_token_weights;    // [R*T_ll, K]
    const int32_t* recv_record_starts;  // [R + 1]
};

// Mask and presence [R each], the rows' prefix over experts [L + 1], for a contiguous y each
// expert's first row of y [L + 1], and (hierarchical) the records' prefix over sources [R + 1].
SY_HOST_DEVICE int64_t ll_combine_shared_bytes(int32_t num_ranks, int32_t local_experts) {
    return 4 * (3 * int64_t(num_ranks) + 1 + 2 * (int64_t(local_experts) + 1)) + 64;
}

// A row goes back in slices of 512-byte steps that separate warps copy in parallel (a warp per
// 14 KB row keeps too few loads in flight).
constexpr int kLlCombineStepsPerSlice = 4;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_combine_detail {

// Eight fp32 channels rounded to bf16 (round to nearest even), as one 16-byte store.
SY_DEVICE uint4 pack_bf16x8(const float (&acc)[8]) {
    uint4 packed;
    packed.x = fp8::bf16x2(acc[0], acc[1]);
    packed.y = fp8::bf16x2(acc[2], acc[3]);
    packed.z = fp8::bf16x2(acc[4], acc[5]);
    packed.w = fp8::bf16x2(acc[6], acc[7]);
    return packed;
}

// One row of y (row `row` of local expert `expert`, at element `y_offset` of y) back to its home
// rank's slot [k][t].
template <int kHidden>
SY_DEVICE void send_row(const LlCombineArgs& args, int32_t expert, int32_t row, int64_t y_offset, int slice,
                        int32_t set, const uint32_t* shared_mask) {
    const uint32_t lane = ptx::lane_id();
    const LlBufferArgs& buffer = args.buffer;
    const int64_t rows_per_expert = int64_t(buffer.num_ranks) * buffer.set_layout.max_tokens;
    constexpr int64_t kRowBytes = int64_t(kHidden) * 2;
    // The slice of y is loaded before the routing word that says where it goes (both in flight).
    const uint8_t* from = static_cast<const uint8_t*>(args.y) + y_offset * 2;
    const auto data = ll_load_slice<kLlCombineStepsPerSlice, kRowBytes>(from, slice, lane);
    const int32_t packed = args.recv_source[expert * rows_per_expert + row];
    const int32_t k = packed & 31, source_token = packed >> 5;
    const int32_t source = source_token / buffer.set_layout.max_tokens;
    const int32_t token = source_token % buffer.set_layout.max_tokens;
    if (shared_mask[source]) return;
    uint8_t* to = buffer.set_layout.combine_row(buffer.set_base(buffer.peer_bases[source], set), k, token,
                                                LlSetLayout::combine_row_bytes(kHidden));
    ll_store_slice<kLlCombineStepsPerSlice, kRowBytes>(to, slice, lane, data);
}

// Where row `expert_row` of local expert `expert` starts in y (elements): the masked layout's
// coordinates, or (contiguous y) the expert's first row as the dispatch laid them out.
template <bool kContiguousY>
SY_DEVICE int64_t y_row_offset(const LlCombineArgs& args, int32_t expert, int32_t expert_row,
                               const int32_t* y_starts) {
    return kContiguousY ? (int64_t(y_starts[expert]) + expert_row) * args.y_row_stride
                        : expert * args.y_expert_stride + expert_row * args.y_row_stride;
}

// The reductions (flat receive, hierarchical send and receive) work in items of kSteps
// 256-channel steps of one token: a lane holds eight channels of each step, and every step of
// every row of a batch is loaded before any is added. Many steps per item keep more loads in
// flight per warp; one step per item spreads a few tokens over more warps. (Hierarchical send, 128
// tokens, EP2, graph replay, 73f3668: 1 step per item 27.5 us, 2 steps 25.5, 4 steps 25.1-25.2.
// The receive of 1 token took ~1.1 us longer with 4 steps than with 1, 980b36e.)
constexpr int kLlReduceStepsPerItem = 4;  // a receive with enough tokens
// The hierarchical send: while its records' four-step items would fit the grid's warps in one
// round, one step per item (a few tokens over many warps); else items of seven steps, four rows'
// loads in flight at a time (registers), so that at hidden 7168 128 tokens' records from two ranks
// (~1,020 items) fit 1,056 warps in one round. Measured against four-step items everywhere (graph
// replay, EP2, two interleaved rounds, log ll-send-items-adaptive-ab-tenth-session.log): 128 tokens
// 22.8 / 22.8 us against 23.2 / 23.3, 1 token 13.5 / 14.0 against 14.4 / 14.1. Seven-step items for
// the few tokens as well (5ce8ade) cost 1 token ~1 us. Keeping four-step items as a third shape
// grew the kernel, then shared with the flat combine, enough to slow the flat op (see the top).
constexpr int kLlWideSendSteps = 7;
constexpr int kLlWideSendBatch = 4;
SY_HOST_DEVICE constexpr int reduce_items_per_token(int hidden, int steps = kLlReduceStepsPerItem) {
    return ((hidden + 255) / 256 + steps - 1) / steps;
}

template <int kSteps>
struct ReduceItem {
    int channel[kSteps];  // lane's first channel of each step
    bool in_range[kSteps];
};

template <int kHidden, int kSteps>
SY_DEVICE ReduceItem<kSteps> reduce_item(int part) {
    ReduceItem<kSteps> item;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        item.channel[i] = (part * kSteps + i) * 256 + int(ptx::lane_id()) * 8;
        item.in_range[i] = item.channel[i] < kHidden;
    }
    return item;
}

// acc = fma(weight, row, acc) over the warp's selected rows, in `position` order (0 .. count - 1):
// lane l offers one row (`row`, `weight`) when `selected`. With weight 1 the fma is the rounded
// sum acc + row. The order is what makes the result match the reference bit for bit.
template <int kBatch, int kSteps>
SY_DEVICE void accumulate_rows(const uint8_t* row, float weight, bool selected, int position, int count,
                               const ReduceItem<kSteps>& item, float (&acc)[kSteps][8]) {
    for (int first = 0; first < count; first += kBatch) {
        uint4 chunks[kBatch][kSteps];
        float weights[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const uint32_t offering = __ballot_sync(0xffffffffu, selected && position == first + j);
            const int from_lane = offering != 0 ? __ffs(offering) - 1 : 0;
            weights[j] = __shfl_sync(0xffffffffu, weight, from_lane);
            const auto* from = reinterpret_cast<const uint8_t*>(
                __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), from_lane));
            if (offering == 0) continue;
#pragma unroll
            for (int i = 0; i < kSteps; ++i)
                if (item.in_range[i])
                    chunks[j][i] = *reinterpret_cast<const uint4*>(from + int64_t(item.channel[i]) * 2);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (first + j >= count) continue;
#pragma unroll
            for (int i = 0; i < kSteps; ++i) {
                if (!item.in_range[i]) continue;
                const uint32_t words[4] = {chunks[j][i].x, chunks[j][i].y, chunks[j][i].z, chunks[j][i].w};
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    acc[i][2 * w] = fp8::fma_rn(weights[j], fp8::bf16_low(words[w]), acc[i][2 * w]);
                    acc[i][2 * w + 1] = fp8::fma_rn(weights[j], fp8::bf16_high(words[w]), acc[i][2 * w + 1]);
                }
            }
        }
    }
}

// A reduction item: the selected rows summed as accumulate_rows says, from zero, rounded to bf16
// once and stored to the row at `to`.
template <int kTopk, int kSteps, int kMaxBatch = 8>
SY_DEVICE void reduce_rows_to(uint8_t* to, const uint8_t* row, float weight, bool selected, int position,
                              const ReduceItem<kSteps>& item) {
    float acc[kSteps][8];
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
    const int count = __popc(__ballot_sync(0xffffffffu, selected));
    accumulate_rows<(kTopk < kMaxBatch ? kTopk : kMaxBatch), kSteps>(row, weight, selected, position, count,
                                                                     item, acc);
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
        if (item.in_range[i])
            *reinterpret_cast<uint4*>(to + int64_t(item.channel[i]) * 2) = pack_bf16x8(acc[i]);
}

// Hierarchical send: a warp loads the routing of its next item (PartialRouting) before it works on
// the current one, so that dependent load is off the item's critical path.
struct PartialRouting {
    int32_t packed;  // lane k < K: the row of slot k here (ll_pack_row), or -1
    float weight;    // lane k < K: its weight
    int32_t token;   // the home token
    int32_t source;  // the home rank
};

template <int kTopk>
SY_DEVICE PartialRouting load_partial_routing(const LlCombineArgs& args, int32_t source, int32_t slot) {
    const uint32_t lane = ptx::lane_id();
    const int64_t entry = int64_t(source) * args.buffer.set_layout.max_tokens + slot;
    const int32_t* rows = args.recv_token_rows + entry * (kTopk + 1);
    PartialRouting routing;
    routing.packed = int(lane) < kTopk ? rows[1 + lane] : -1;
    routing.weight = int(lane) < kTopk ? args.recv_token_weights[entry * kTopk + lane] : 0.0f;
    routing.token = rows[0];
    routing.source = source;
    return routing;
}

// Item `part` of a received token's partial: this rank's rows of the token, weighted and summed
// over k ascending in fp32, rounded to bf16 once, stored in the home's slot [first k owned here][t].
template <int kHidden, int kTopk, int kSteps, int kBatch, bool kContiguousY>
SY_DEVICE void send_partial(const LlCombineArgs& args, const PartialRouting& routing, int part, int32_t set,
                            const uint32_t* shared_mask, const int32_t* y_starts) {
    const LlBufferArgs& buffer = args.buffer;
    const int64_t rows_per_expert = int64_t(buffer.num_ranks) * buffer.set_layout.max_tokens;
    if (shared_mask[routing.source]) return;  // the home is masked: it reads nothing
    const bool local = routing.packed >= 0;
    const uint32_t slots = __ballot_sync(0xffffffffu, local);
    if (slots == 0) return;
    const uint8_t* row =
        static_cast<const uint8_t*>(args.y) +
        (local ? y_row_offset<kContiguousY>(args, int32_t(routing.packed / rows_per_expert),
                                            int32_t(routing.packed % rows_per_expert), y_starts) *
                     2
               : 0);
    uint8_t* to = buffer.set_layout.combine_row(buffer.set_base(buffer.peer_bases[routing.source], set),
                                                __ffs(slots) - 1, routing.token,
                                                LlSetLayout::combine_row_bytes(kHidden));
    reduce_rows_to<kTopk, kSteps, kBatch>(to, row, routing.weight, local, __popc(slots & ptx::lanemask_lt()),
                                          reduce_item<kHidden, kSteps>(part));
}

// The hierarchical send of this warp: items global_warp, + stride, ... of `items` (kSteps-step
// items of every received record, in send order: peers from rank + 1 on, this rank's own last;
// record_starts [R + 1] is that order's prefix). Each item's routing is loaded one item ahead.
template <int kHidden, int kTopk, int kSteps, int kBatch, bool kContiguousY>
SY_DEVICE void send_partials(const LlCombineArgs& args, const int32_t* record_starts, int64_t first,
                             int64_t items, int64_t stride, int32_t set, const uint32_t* shared_mask,
                             const int32_t* y_starts) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks;
    constexpr int kItemsPerRecord = reduce_items_per_token(kHidden, kSteps);
    auto routing_of = [&](int64_t item) {
        const int32_t record = int32_t(item / kItemsPerRecord);
        const int32_t order = last_start_at_or_below(record_starts, R, record);
        return load_partial_routing<kTopk>(args, (buffer.rank + 1 + order) % R,
                                           record - record_starts[order]);
    };
    PartialRouting routing{};
    if (first < items) routing = routing_of(first);
    for (int64_t item = first; item < items; item += stride) {
        PartialRouting next{};
        if (item + stride < items) next = routing_of(item + stride);
        send_partial<kHidden, kTopk, kSteps, kBatch, kContiguousY>(args, routing, int(item % kItemsPerRecord),
                                                                   set, shared_mask, y_starts);
        routing = next;
    }
}

// The home's routing of one token as a warp holds it, loaded before it is used: lane k < K holds
// slot k's raw expert id and (flat combine) its weight. Each receiving warp loads its first
// token's slots before it waits for the arrivals, so after them only the rows' loads remain.
template <typename IndexT>
struct HomeSlots {
    IndexT raw;    // -1 past K
    float weight;  // 0 past K, and in the hierarchical combine (its partials are weighted)
};

template <int kTopk, typename IndexT, bool kWeights>
SY_DEVICE HomeSlots<IndexT> load_home_slots(const LlCombineArgs& args, int32_t t) {
    const int k = int(ptx::lane_id());
    HomeSlots<IndexT> slots{IndexT(-1), 0.0f};
    if (k < kTopk) {
        slots.raw = static_cast<const IndexT*>(args.topk_idx)[int64_t(t) * args.topk_row_stride + k];
        if (kWeights) slots.weight = args.topk_weights[int64_t(t) * args.weights_row_stride + k];
    }
    return slots;
}

// Lane k < K: the expert of the token's slot k, or -1 for an empty or invalid slot and for a
// repeat of an earlier slot's expert (the dispatch sent the token to it once).
template <typename IndexT>
SY_DEVICE int32_t home_slot_expert(const LlCombineArgs& args, const HomeSlots<IndexT>& slots) {
    const int64_t raw = int64_t(slots.raw);
    const int32_t expert = raw < 0 || raw >= args.num_experts ? -1 : int32_t(raw);
    return first_lane_with(expert) ? expert : -1;
}

// Flat receive, item `part` of token t: fma over k ascending of w[t][k] * y(t, k), skipping
// empty slots, repeats and slots whose owner is masked.
template <int kHidden, int kTopk, int kSteps, typename IndexT>
SY_DEVICE void reduce_token(const LlCombineArgs& args, uint8_t* set_base, int32_t t, int part,
                            const HomeSlots<IndexT>& home, const uint32_t* shared_present) {
    const uint32_t lane = ptx::lane_id();
    const int32_t expert = home_slot_expert(args, home);
    const bool valid = expert >= 0 && shared_present[expert / args.local_experts] != 0;
    const float weight = valid ? home.weight : 0.0f;
    const uint32_t slots = __ballot_sync(0xffffffffu, valid);
    const uint8_t* row = valid ? args.buffer.set_layout.combine_row(set_base, int32_t(lane), t,
                                                                    LlSetLayout::combine_row_bytes(kHidden))
                               : nullptr;
    reduce_rows_to<kTopk>(static_cast<uint8_t*>(args.out) + int64_t(t) * args.out_row_stride * 2, row, weight,
                          valid, __popc(slots & ptx::lanemask_lt()), reduce_item<kHidden, kSteps>(part));
}

// Hierarchical receive, item `part` of token t: the sum of the ranks' partials in ascending rank
// order. Each present rank that owns one of the token's experts sent one partial, in the slot of
// its first k.
template <int kHidden, int kTopk, int kSteps, typename IndexT>
SY_DEVICE void reduce_partials(const LlCombineArgs& args, uint8_t* set_base, int32_t t, int part,
                               const HomeSlots<IndexT>& home, const uint32_t* shared_present) {
    const uint32_t lane = ptx::lane_id();
    const int32_t expert = home_slot_expert(args, home);
    const int32_t owner =
        expert >= 0 && shared_present[expert / args.local_experts] != 0 ? expert / args.local_experts : -1;
    // The lowest k of each owner holds its partial; `position` orders those slots by rank.
    const bool holds = first_lane_with(owner);
    const uint32_t holders = __ballot_sync(0xffffffffu, holds);
    int position = 0;
    for (uint32_t rest = holders; rest != 0; rest &= rest - 1) {
        const int32_t other = __shfl_sync(0xffffffffu, owner, __ffs(rest) - 1);
        if (holds && other < owner) ++position;
    }
    const uint8_t* row = holds ? args.buffer.set_layout.combine_row(set_base, int32_t(lane), t,
                                                                    LlSetLayout::combine_row_bytes(kHidden))
                               : nullptr;
    reduce_rows_to<kTopk>(static_cast<uint8_t*>(args.out) + int64_t(t) * args.out_row_stride * 2, row, 1.0f,
                          holds, position, reduce_item<kHidden, kSteps>(part));
}

}  // namespace ll_combine_detail

// kContiguousY: y in the expert-major contiguous layout (the dispatch's), else masked; a kernel
// parameter for the same reason as the reduction.
template <int kNumWarps, int kHidden, int kTopk, typename IndexT, int kPhases, bool kHierarchical,
          bool kContiguousY>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_combine_kernel(const __grid_constant__ LlCombineArgs args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 8 == 0, "rows are moved in 16-byte units");
    static_assert(kNumWarps >= 2, "warps 0 and 1 scan the row and record counts side by side");
    constexpr bool kSend = (kPhases & 1) != 0, kRecv = (kPhases & 2) != 0;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t shared_sequences[2];
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, L = args.local_experts;
    uint32_t* shared_mask = reinterpret_cast<uint32_t*>(shared_words);     // [R]
    uint32_t* shared_present = shared_mask + R;                            // [R]
    int32_t* row_starts = reinterpret_cast<int32_t*>(shared_present + R);  // [L + 1]
    int32_t* y_starts = row_starts + L + 1;                                // [L + 1], contiguous y
    int32_t* record_starts = y_starts + L + 1;  // [R + 1], hierarchical: records in send order
    const int warp = int(threadIdx.x / 32);
    const int global_warp = int(blockIdx.x) * kNumWarps + warp, num_warps = int(gridDim.x) * kNumWarps;

    ll_trace(buffer, 0);
    // The send half's first loads (the dispatch's per-expert counts, one per thread, and for the
    // hierarchical send the records per source) do not depend on the prologue: they are issued
    // before it, so their round trip overlaps its own.
    constexpr bool needs_row_starts = kSend && (!kHierarchical || kContiguousY);
    const int32_t first_count = needs_row_starts && int(threadIdx.x) < L ? args.recv_count[threadIdx.x] : 0;
    // Warp 1, lane o < R: the record prefix around the o-th source in send order (see below); the
    // two words stay unused until after the prologue, so the thread does not wait for them here.
    const bool loads_records = kSend && kHierarchical && warp == 1 && int(ptx::lane_id()) < R;
    const int first_source = (buffer.rank + 1 + int(ptx::lane_id())) % R;
    const int32_t first_records[2] = {loads_records ? args.recv_record_starts[first_source] : 0,
                                      loads_records ? args.recv_record_starts[first_source + 1] : 0};
    if (!ll_prologue<kLlCombine, kSend, kRecv>(buffer, shared_sequences, shared_mask)) {
        ll_block_done<kLlCombine, kSend, kRecv>(buffer, shared_sequences);
        return;
    }
    ll_trace(buffer, 1);

    if constexpr (kSend) {
        const uint64_t sequence = shared_sequences[0];
        const int32_t set = ll_set_of(sequence);
        // The per-expert counts come into shared memory with one load per thread (this phase took
        // ~2.3 us with warp 0 loading them 32 at a time between its scans, 1.9 after;
        // SWITCHYARD_LL_TRACE, 0bccbfe and 980b36e).
        // A hierarchical send into a masked y needs neither prefix (it finds rows by their
        // masked coordinates): it skips them.
        if (needs_row_starts) {
            if (int(threadIdx.x) < L) row_starts[threadIdx.x] = first_count;
            for (int e = threadIdx.x + blockDim.x; e < L; e += blockDim.x) row_starts[e] = args.recv_count[e];
        }
        if (kHierarchical && warp == 1) {
            // The received records in the order they are sent back: peers from rank + 1 on, this
            // rank's own last, so the link starts early (own partials are local stores). Order o
            // holds source (rank + 1 + o) % R; record_starts [R + 1] is its prefix.
            const uint32_t lane = ptx::lane_id();
            int64_t running = 0;
            for (int base = 0; base < R; base += 32) {
                const int o = base + int(lane);
                const int source = (buffer.rank + 1 + o) % R;
                const int64_t count =
                    o >= R      ? 0
                    : base == 0 ? first_records[1] - first_records[0]
                                : args.recv_record_starts[source + 1] - args.recv_record_starts[source];
                const int64_t inclusive = warp_inclusive_sum(count);
                if (o < R) record_starts[o] = int32_t(running + inclusive - count);
                running += __shfl_sync(0xffffffffu, inclusive, 31);
            }
            if (lane == 0) record_starts[R] = int32_t(running);
        }
        __syncthreads();
        if (warp == 0 && needs_row_starts) {
            // Exclusive prefixes of the per-expert counts (the valid rows, enumerated; in place) and,
            // for a contiguous y, of the counts rounded up to the alignment (where each expert's rows
            // start in y, as the dispatch laid them out); 32 experts per step (warp scans).
            const uint32_t lane = ptx::lane_id();
            int64_t running = 0, y_running = 0;
            for (int base = 0; base < L; base += 32) {
                const int e = base + int(lane);
                const int64_t count = e < L ? row_starts[e] : 0;
                const int64_t inclusive = warp_inclusive_sum(count);
                if (e < L) row_starts[e] = int32_t(running + inclusive - count);
                running += __shfl_sync(0xffffffffu, inclusive, 31);
                if constexpr (kContiguousY) {
                    const int64_t y_rows = align_up(count, int64_t(args.y_alignment));
                    const int64_t y_inclusive = warp_inclusive_sum(y_rows);
                    if (e < L) y_starts[e] = int32_t(y_running + y_inclusive - y_rows);
                    y_running += __shfl_sync(0xffffffffu, y_inclusive, 31);
                }
            }
            if (lane == 0) row_starts[L] = int32_t(running);
        }
        __syncthreads();
        constexpr int kSlices =
            int(((int64_t(kHidden) * 2 + 511) / 512 + kLlCombineStepsPerSlice - 1) / kLlCombineStepsPerSlice);
        constexpr int kPartialItems = ll_combine_detail::reduce_items_per_token(kHidden);
        constexpr int kWidePartialItems =
            ll_combine_detail::reduce_items_per_token(kHidden, ll_combine_detail::kLlWideSendSteps);
        constexpr int kNarrowPartialItems = ll_combine_detail::reduce_items_per_token(kHidden, 1);
        ll_trace(buffer, 2);
        // Flat: a row's slice per item; hierarchical: steps of a received token's partial per item,
        // seven steps when four-step items would take the grid more than one round, else one.
        const bool wide_partials =
            kHierarchical && int64_t(record_starts[R]) * kPartialItems > int64_t(gridDim.x) * kNumWarps;
        const int64_t items = !kHierarchical  ? int64_t(row_starts[L]) * kSlices
                              : wide_partials ? int64_t(record_starts[R]) * kWidePartialItems
                                              : int64_t(record_starts[R]) * kNarrowPartialItems;
        const int32_t sending_blocks = ll_sending_blocks(items, kNumWarps, buffer.send_items_per_warp);
        const int64_t stride = int64_t(sending_blocks) * kNumWarps;
        if (int32_t(blockIdx.x) < sending_blocks) {
            if constexpr (kHierarchical) {
                if (wide_partials)
                    ll_combine_detail::send_partials<kHidden, kTopk, ll_combine_detail::kLlWideSendSteps,
                                                     ll_combine_detail::kLlWideSendBatch, kContiguousY>(
                        args, record_starts, global_warp, items, stride, set, shared_mask, y_starts);
                else
                    ll_combine_detail::send_partials<kHidden, kTopk, 1, 8, kContiguousY>(
                        args, record_starts, global_warp, items, stride, set, shared_mask, y_starts);
            } else {
                for (int64_t item = global_warp; item < items; item += stride) {
                    const int32_t row = int32_t(item / kSlices);
                    // The expert whose rows hold `row`: the last e with row_starts[e] <= row.
                    const int32_t expert = last_start_at_or_below(row_starts, L, row);
                    const int32_t expert_row = row - row_starts[expert];
                    ll_combine_detail::send_row<kHidden>(
                        args, expert, expert_row,
                        ll_combine_detail::y_row_offset<kContiguousY>(args, expert, expert_row, y_starts),
                        int(item % kSlices), set, shared_mask);
                }
            }
            ll_trace(buffer, 3);
            ll_arrive(buffer, kLlCombine, sequence, sending_blocks, shared_mask);
            ll_trace(buffer, 4);
        }
        __syncthreads();
    }
    // Here the block waits anyway: for its peers' arrivals, or (send half only) for its end.
    ll_block_done<kLlCombine, kSend, kRecv>(buffer, shared_sequences);

    if constexpr (kRecv) {
        const uint64_t sequence = shared_sequences[1];
        // Four steps per item when they keep at least a quarter of the grid's warps busy, else
        // one (a few tokens). Measured (EP2, hidden 7168, 1,056 warps): 128 tokens' 896 four-step
        // items 10.3 us for the hierarchical receive half against 13.3 with one step; 1 token's
        // 7 four-step items 10.4-10.6 us against 9.3 with 28 one-step items (980b36e, 0ea26ed).
        // Consecutive items stay on one block: spreading them over blocks was slower (892ebe8).
        constexpr int kItemsPerToken = ll_combine_detail::reduce_items_per_token(kHidden);
        constexpr int kStepsPerToken = ll_combine_detail::reduce_items_per_token(kHidden, 1);
        const bool long_items = int64_t(args.num_tokens) * kItemsPerToken * 4 >= num_warps;
        const int32_t per_token = long_items ? kItemsPerToken : kStepsPerToken;
        const int32_t items = args.num_tokens * per_token;
        // The warp's first token's routing, loaded while the block waits (HomeSlots).
        auto home_of = [&](int32_t item) {
            return ll_combine_detail::load_home_slots<kTopk, IndexT, !kHierarchical>(args, item / per_token);
        };
        ll_combine_detail::HomeSlots<IndexT> home{IndexT(-1), 0.0f};
        if (global_warp < items) home = home_of(global_warp);
        if (!ll_wait_sources(buffer, kLlCombine, sequence, shared_mask, shared_present, args.wait_time_stats))
            return;
        ll_trace(buffer, 5);
        uint8_t* set_base = buffer.set_base(buffer.local_base, ll_set_of(sequence));
        for (int32_t item = global_warp; item < items; item += num_warps) {
            const int32_t t = item / per_token, part = item % per_token;
            if (item != global_warp) home = home_of(item);
            if constexpr (kHierarchical) {
                if (long_items)
                    ll_combine_detail::reduce_partials<kHidden, kTopk,
                                                       ll_combine_detail::kLlReduceStepsPerItem, IndexT>(
                        args, set_base, t, part, home, shared_present);
                else
                    ll_combine_detail::reduce_partials<kHidden, kTopk, 1, IndexT>(args, set_base, t, part,
                                                                                  home, shared_present);
            } else if (long_items)
                ll_combine_detail::reduce_token<kHidden, kTopk, ll_combine_detail::kLlReduceStepsPerItem,
                                                IndexT>(args, set_base, t, part, home, shared_present);
            else
                ll_combine_detail::reduce_token<kHidden, kTopk, 1, IndexT>(args, set_base, t, part, home,
                                                                           shared_present);
        }
        ll_trace(buffer, 6);
    }
    ll_trace(buffer, kLlTraceSlots - 1);
}

#endif

}  // namespace switchyard::device
