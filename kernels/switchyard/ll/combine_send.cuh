// The send half of the LL combine (ll/combine.cuh), on the expert ranks: flat, each valid row of
// y back to its home rank's slot [k][t]; hierarchical, one partial per received token, reduced
// here from this rank's rows of it. Then the arrivals that publish them.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_reduce.cuh"
#include "switchyard/ll/ll_slices.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_combine_detail {

// Where the rows of a home's token go, and how the sending blocks publish them. On one node, the
// home's combine rows [k][t] in its own set, and arrivals at every rank; across nodes
// (ll/net_combine_send.cuh) a home of another node's rows go to its forwarder on this node.
struct LlHomesOnNode {
    // The row of (home, slot k, token) to write, or null when nothing goes to that home (masked).
    SY_DEVICE uint8_t* row(const LlCombineArgs& args, int32_t set, int32_t home, int32_t k, int32_t token,
                           int64_t row_bytes, const uint32_t* shared_mask) const {
        if (shared_mask[home]) return nullptr;
        return args.buffer.set_layout.combine_row(args.buffer.set_base(args.buffer.peer_bases[home], set), k, token,
                                                  row_bytes);
    }
    SY_DEVICE void arrive(const LlCombineArgs& args, uint64_t sequence, int32_t sending_blocks,
                          const uint32_t* shared_mask) const {
        ll_arrive(args.buffer, kLlCombine, sequence, sending_blocks, shared_mask);
    }
};

// One row of y (row `row` of local expert `expert`, at element `y_offset` of y) back to its home
// rank's slot [k][t].
template <int kHidden, class Homes>
SY_DEVICE void send_row(const LlCombineArgs& args, const Homes& homes, int32_t expert, int32_t row,
                        int64_t y_offset, int slice, int32_t set, const uint32_t* shared_mask) {
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
    uint8_t* to = homes.row(args, set, source, k, token, LlSetLayout::combine_row_bytes(kHidden), shared_mask);
    if (to == nullptr) return;
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
template <int kHidden, int kTopk, int kSteps, int kBatch, bool kContiguousY, class Homes>
SY_DEVICE void send_partial(const LlCombineArgs& args, const Homes& homes, const PartialRouting& routing, int part,
                            int32_t set, const uint32_t* shared_mask, const int32_t* y_starts) {
    const LlBufferArgs& buffer = args.buffer;
    const int64_t rows_per_expert = int64_t(buffer.num_ranks) * buffer.set_layout.max_tokens;
    const bool local = routing.packed >= 0;
    const uint32_t slots = __ballot_sync(0xffffffffu, local);
    if (slots == 0) return;
    // The home's row (null: the home is masked, it reads nothing): the same in every lane.
    uint8_t* to = homes.row(args, set, routing.source, __ffs(slots) - 1, routing.token,
                            LlSetLayout::combine_row_bytes(kHidden), shared_mask);
    if (to == nullptr) return;
    const uint8_t* row =
        static_cast<const uint8_t*>(args.y) +
        (local ? y_row_offset<kContiguousY>(args, int32_t(routing.packed / rows_per_expert),
                                            int32_t(routing.packed % rows_per_expert), y_starts) *
                     2
               : 0);
    reduce_rows_to<kTopk, kSteps, kBatch>(to, row, routing.weight, local, __popc(slots & ptx::lanemask_lt()),
                                          reduce_item<kHidden, kSteps>(part));
}

// The hierarchical send of this warp: items global_warp, + stride, ... of `items` (kSteps-step
// items of every received record, in send order: peers from rank + 1 on, this rank's own last;
// record_starts [R + 1] is that order's prefix). Each item's routing is loaded one item ahead.
template <int kHidden, int kTopk, int kSteps, int kBatch, bool kContiguousY, class Homes>
SY_DEVICE void send_partials(const LlCombineArgs& args, const Homes& homes, const int32_t* record_starts,
                             int64_t first,
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
        send_partial<kHidden, kTopk, kSteps, kBatch, kContiguousY>(args, homes, routing,
                                                                   int(item % kItemsPerRecord), set, shared_mask,
                                                                   y_starts);
        routing = next;
    }
}

// Flat send: items first, + stride, ... of `items` (a slice of a valid row each, rows enumerated
// over the experts by row_starts) back to their home ranks.
template <int kHidden, bool kContiguousY, class Homes>
SY_DEVICE void send_rows(const LlCombineArgs& args, const Homes& homes, const LlCombineShared& shared,
                         int64_t first, int64_t items, int64_t stride, int32_t set) {
    constexpr int kSlices = ll_combine_slices(kHidden);
    for (int64_t item = first; item < items; item += stride) {
        const int32_t row = int32_t(item / kSlices);
        // The expert whose rows hold `row`: the last e with row_starts[e] <= row.
        const int32_t expert = last_start_at_or_below(shared.row_starts, args.local_experts, row);
        const int32_t expert_row = row - shared.row_starts[expert];
        send_row<kHidden>(args, homes, expert, expert_row,
                          y_row_offset<kContiguousY>(args, expert, expert_row, shared.y_starts),
                          int(item % kSlices), set, shared.mask);
    }
}

// The send half needs the valid rows' prefix over experts unless it is hierarchical into a masked
// y (which finds rows by their masked coordinates).
SY_HOST_DEVICE constexpr bool needs_row_starts(bool hierarchical, bool contiguous_y) {
    return !hierarchical || contiguous_y;
}

// What the send half loads before the prologue, so that their round trips overlap its own (every
// block: which blocks send follows from them): thread e < L the dispatch's rows of local expert
// e, and (hierarchical) warp 1's lane o < R the record prefix around the o-th source in send order
// (order_records), unused until after the prologue, so the thread does not wait for them there.
struct SendPrefetch {
    int32_t count;
    int32_t records[2];
};

template <bool kHierarchical, bool kContiguousY>
SY_DEVICE SendPrefetch prefetch_send(const LlCombineArgs& args) {
    const int32_t R = args.buffer.num_ranks;
    const bool loads_count =
        needs_row_starts(kHierarchical, kContiguousY) && int(threadIdx.x) < args.local_experts;
    const bool loads_records = kHierarchical && threadIdx.x / 32 == 1 && int(ptx::lane_id()) < R;
    const int first_source = (args.buffer.rank + 1 + int(ptx::lane_id())) % R;
    return {loads_count ? args.recv_count[threadIdx.x] : 0,
            {loads_records ? args.recv_record_starts[first_source] : 0,
             loads_records ? args.recv_record_starts[first_source + 1] : 0}};
}

// Warp 1 (hierarchical): the received records in the order they are sent back, peers from rank +
// 1 on, this rank's own last, so the link starts early (own partials are local stores). Order o
// holds source (rank + 1 + o) % R; record_starts [R + 1] is its prefix.
SY_DEVICE void order_records(const LlCombineArgs& args, const LlCombineShared& shared,
                             const SendPrefetch& prefetch) {
    const int32_t R = args.buffer.num_ranks;
    const uint32_t lane = ptx::lane_id();
    int64_t running = 0;
    for (int base = 0; base < R; base += 32) {
        const int o = base + int(lane);
        const int source = (args.buffer.rank + 1 + o) % R;
        const int64_t count = o >= R ? 0
                              : base == 0
                                  ? prefetch.records[1] - prefetch.records[0]
                                  : args.recv_record_starts[source + 1] - args.recv_record_starts[source];
        const int64_t inclusive = warp_inclusive_sum(count);
        if (o < R) shared.record_starts[o] = int32_t(running + inclusive - count);
        running += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    if (lane == 0) shared.record_starts[R] = int32_t(running);
}

// Warp 0: exclusive prefixes of the per-expert counts (the valid rows, enumerated; in place) and,
// for a contiguous y, of the counts rounded up to the alignment (where each expert's rows start in
// y, as the dispatch laid them out); 32 experts per step (warp scans).
template <bool kContiguousY>
SY_DEVICE void scan_row_starts(const LlCombineArgs& args, const LlCombineShared& shared) {
    const int32_t L = args.local_experts;
    const uint32_t lane = ptx::lane_id();
    int64_t running = 0, y_running = 0;
    for (int base = 0; base < L; base += 32) {
        const int e = base + int(lane);
        const int64_t count = e < L ? shared.row_starts[e] : 0;
        const int64_t inclusive = warp_inclusive_sum(count);
        if (e < L) shared.row_starts[e] = int32_t(running + inclusive - count);
        running += __shfl_sync(0xffffffffu, inclusive, 31);
        if constexpr (kContiguousY) {
            const int64_t y_rows = align_up(count, int64_t(args.y_alignment));
            const int64_t y_inclusive = warp_inclusive_sum(y_rows);
            if (e < L) shared.y_starts[e] = int32_t(y_running + y_inclusive - y_rows);
            y_running += __shfl_sync(0xffffffffu, y_inclusive, 31);
        }
    }
    if (lane == 0) shared.row_starts[L] = int32_t(running);
}

// Every block, after the prologue: the prefixes the send half's items are numbered by. The
// per-expert counts come into shared memory with one load per thread.
template <bool kHierarchical, bool kContiguousY>
SY_DEVICE void plan_sends(const LlCombineArgs& args, const LlCombineShared& shared,
                          const SendPrefetch& prefetch) {
    constexpr bool kRowStarts = needs_row_starts(kHierarchical, kContiguousY);
    const int32_t L = args.local_experts;
    const int warp = int(threadIdx.x / 32);
    if (kRowStarts) {
        if (int(threadIdx.x) < L) shared.row_starts[threadIdx.x] = prefetch.count;
        for (int e = threadIdx.x + blockDim.x; e < L; e += blockDim.x)
            shared.row_starts[e] = args.recv_count[e];
    }
    if (kHierarchical && warp == 1) order_records(args, shared, prefetch);
    __syncthreads();
    if (kRowStarts && warp == 0) scan_row_starts<kContiguousY>(args, shared);
    __syncthreads();
}

// The send half of every block: plans the items (flat, a row's slice per item; hierarchical,
// steps of a received token's partial per item: seven steps when four-step items would take the
// grid more than one round, else one), then the first S blocks send them, S from the work, and
// each raises this rank's arrival counter at every home rank, rows or not.
template <int kNumWarps, int kSendItemsPerWarp, int kHidden, int kTopk, bool kHierarchical, bool kContiguousY,
          class Homes = LlHomesOnNode>
SY_DEVICE void send_expert_outputs(const LlCombineArgs& args, const LlCombineShared& shared,
                                   const SendPrefetch& prefetch, uint64_t sequence, const Homes& homes = {}) {
    const LlBufferArgs& buffer = args.buffer;
    plan_sends<kHierarchical, kContiguousY>(args, shared, prefetch);
    if (threadIdx.x == 0) trace_mark(buffer.trace, kLlCombinePlanned);
    const int32_t set = ll_set_of(sequence);
    constexpr int kPartialItems = reduce_items_per_token(kHidden);
    constexpr int kWidePartialItems = reduce_items_per_token(kHidden, kLlWideSendSteps);
    constexpr int kNarrowPartialItems = reduce_items_per_token(kHidden, 1);
    const int32_t records = kHierarchical ? shared.record_starts[buffer.num_ranks] : 0;
    const bool wide_partials =
        kHierarchical && int64_t(records) * kPartialItems > int64_t(gridDim.x) * kNumWarps;
    const int64_t items = !kHierarchical
                              ? int64_t(shared.row_starts[args.local_experts]) * ll_combine_slices(kHidden)
                          : wide_partials ? int64_t(records) * kWidePartialItems
                                          : int64_t(records) * kNarrowPartialItems;
    const int32_t sending_blocks = ll_sending_blocks(items, kNumWarps, kSendItemsPerWarp);
    if (int32_t(blockIdx.x) >= sending_blocks) return;
    const int64_t stride = int64_t(sending_blocks) * kNumWarps;
    const int64_t first = int(blockIdx.x) * kNumWarps + int(threadIdx.x / 32);
    if constexpr (kHierarchical) {
        if (wide_partials)
            send_partials<kHidden, kTopk, kLlWideSendSteps, kLlWideSendBatch, kContiguousY>(
                args, homes, shared.record_starts, first, items, stride, set, shared.mask, shared.y_starts);
        else
            send_partials<kHidden, kTopk, 1, 8, kContiguousY>(args, homes, shared.record_starts, first, items,
                                                              stride, set, shared.mask, shared.y_starts);
    } else {
        send_rows<kHidden, kContiguousY>(args, homes, shared, first, items, stride, set);
    }
    if (ptx::lane_id() == 0) trace_mark(buffer.trace, kLlCombineSent);
    homes.arrive(args, sequence, sending_blocks, shared.mask);
    if (int(threadIdx.x) < buffer.num_ranks) trace_mark(buffer.trace, kLlCombineArrived);
}

}  // namespace ll_combine_detail

#endif

}  // namespace switchyard::device
