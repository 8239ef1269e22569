// Dispatch routing from topk_idx: per-rank and per-expert token counts, the token-in-rank mask,
// each token's slot in each destination rank and each (token, k)'s position among this rank's
// rows for that expert; across nodes (kNodes) also each token's slot in the stream of tokens this
// rank sends to each node, and the tokens per node.
//
// Slots are deterministic prefix sums in token order, so layouts are reproducible bit for bit.
// One kernel over chunks of tokens (one thread per (token, k) entry of a chunk), a block per chunk.
// A block takes its chunk as a ticket from a counter when it starts, so chunks go in the order the
// blocks became resident, and per chunk:
//   count      ranks each entry within its warp (a match mask) and counts per warp, expert and
//              rank; an exclusive prefix over the warps gives each entry's rank inside the chunk
//              and the chunk's totals; ids outside [-1, E) are reported as invalid routing;
//   publish    writes the chunk's totals to a [chunks][E + R] scratch, each total in a 64-bit word
//              tagged with this op's epoch (and a bit for a chunk with invalid ids): a reader that
//              sees the tag has the total, so no fence or flag orders them (a flag raised after
//              the totals would put fences, a block barrier and a round trip on every chunk's path);
//   look back  loads every earlier chunk's totals, waiting on each word until it carries this
//              op's tag, and sums them: the chunk's starting offsets; then writes slots and positions.
// Every earlier chunk was taken by a block already running, which publishes before it waits for
// chunks earlier still, so the earliest unpublished chunk can always publish: the grid needs no
// block resident beyond its own, and it may be larger than the rank's share of a GPU that ranks
// share (blocks past what fits start as others end, waiting for nothing outside the grid). Taking
// chunks by blockIdx instead would rely on blocks starting in index order.
// The block of the last chunk writes the totals and advances the epoch once every block has
// published (so every block has read the old epoch); for an HT dispatch it also sends the op's
// counts notify to every peer right then (transport/counts_exchange.cuh), instead of the dispatch
// kernel after this grid ends: when a chunk had invalid ids or the buffer is poisoned, a notify
// that announces the failure instead of counts, so every peer stops at once.
// Up to kLayoutHistogramColumns columns (experts + ranks, + nodes) the per-warp counts live in shared
// memory (kHistogram); beyond, warps take turns in entry order. The choice is fixed per op shape: a
// template argument (src/launch/routing_launch.cpp). kNodes adds one column per node: a token counts
// once per destination node (its first entry there leads), as it does once per destination rank.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/transport/counts_exchange.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"

namespace switchyard::device {

struct RoutingArgs {
    const void* topk_idx;     // [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;  // in elements
    int32_t num_tokens;
    int32_t topk;  // <= 32
    int32_t num_experts;
    int32_t num_ranks;
    int32_t* num_tokens_per_rank;    // [R]
    int32_t* num_tokens_per_expert;  // [E] (entries of one token to the same expert count twice)
    uint8_t* token_in_rank;          // [T, R] 0/1, may be null
    int32_t* token_rank_slot;        // [T, R] slot in the destination's rows from this rank, -1 if none
    int32_t* token_expert_pos;       // [T, K] position among this rank's (t, k) rows of that expert, -1
    int32_t* topk_copy;         // [T, K] int32 copy of topk_idx (ids out of range become -1), may be null
    const float* topk_weights;  // [T, K] with row stride weights_row_stride, copied when non-null
    int64_t weights_row_stride;
    float* weights_copy;     // [T, K] contiguous
    uint64_t* chunk_totals;  // scratch [num_chunks][E + R] tagged words (layout_total_word)
    uint64_t* epoch_word;    // this buffer's layout ops so far (zeroed at creation and by reset)
    uint32_t* chunk_tickets;  // the next chunk to take; 0 between ops (RoutingScratch::tickets)
    int32_t num_chunks;
    int32_t tokens_per_chunk;  // layout_tokens_per_chunk(topk)
    Diagnostics diagnostics;
    OpTrace trace;          // the HT dispatch's timeline (common/op_trace.cuh); null slots when off
    HtNotifyTarget notify;  // an HT dispatch's counts notify (peer_bases null: none)
    // kNodes (ranks on several nodes): nodes of ranks_per_node consecutive ranks each.
    int32_t num_nodes;
    int32_t ranks_per_node;
    int32_t* token_node_slot;      // [T, N] slot in the stream of tokens to that node, -1 if none
    int32_t* num_tokens_per_node;  // [N]
    // When the kernel chained after this one (the dispatch) may be scheduled: 1, as this grid starts
    // (its blocks then wait beside the routing's); 0, once every block has published its chunk, so
    // that the dependent's blocks do not hold SMs that a co-located rank's routing waits for.
    int32_t dependents_early;
};

constexpr int kLayoutThreads = 1024;

// A buffer's scratch for the routing kernel, sized at creation for its largest op: the chunks'
// tagged totals, then the epoch word, then the chunk ticket counter (zero between ops: the block
// that takes the last ticket sets it back). Zeroed at creation and by reset() (a routing kernel cut
// short may have left totals tagged with an epoch the epoch word never reached).
struct RoutingScratch {
    uint64_t* words = nullptr;  // [total_words] tagged totals, then the epoch word and the tickets
    int64_t total_words = 0;    // max_chunks * (max_experts + R)
    int32_t max_chunks = 0;
    SY_HOST_DEVICE uint64_t* epoch() const { return words + total_words; }
    SY_HOST_DEVICE uint32_t* tickets() const { return reinterpret_cast<uint32_t*>(words + total_words + 1); }
    SY_HOST_DEVICE size_t bytes() const { return sizeof(uint64_t) * (size_t(total_words) + 2); }
};

// A chunk's total in the scratch: the op's epoch (low 32 bits) in the high half, then a bit for a
// chunk that had invalid expert ids, then the count (at most kLayoutThreads).
constexpr uint64_t kLayoutInvalidBit = 1ull << 31;
SY_HOST_DEVICE uint64_t layout_total_word(uint64_t epoch, int32_t total, bool invalid) {
    return (epoch << 32) | (invalid ? kLayoutInvalidBit : 0ull) | uint64_t(uint32_t(total));
}
SY_HOST_DEVICE bool layout_word_of_epoch(uint64_t word, uint64_t epoch) {
    return uint32_t(word >> 32) == uint32_t(epoch);
}
SY_HOST_DEVICE int32_t layout_word_total(uint64_t word) {
    return int32_t(word & 0x7fffffffu);
}

// Tokens per block: one thread per (token, k) entry.
SY_HOST_DEVICE int32_t layout_tokens_per_chunk(int32_t topk) {
    return kLayoutThreads / (topk > 0 ? topk : 1);
}
SY_HOST_DEVICE int32_t layout_num_chunks(int32_t num_tokens, int32_t topk) {
    const int32_t per_chunk = layout_tokens_per_chunk(topk);
    return num_tokens > 0 ? (num_tokens + per_chunk - 1) / per_chunk : 1;
}
// Columns (experts + ranks) up to which the per-warp counts ([32][columns] ints) are used.
constexpr int32_t kLayoutHistogramColumns = 640;
constexpr int32_t kLayoutWarps = kLayoutThreads / 32;

// Dynamic shared memory: the chunk's totals and starting offsets per column, per entry its expert
// id, whether it leads its token's entries for that rank, a partial-sum area, and (histogram)
// the per-warp counts.
// `num_ranks` counts the node columns too where there are any (routing_columns).
SY_HOST_DEVICE int64_t layout_shared_bytes(int32_t num_experts, int32_t num_ranks, bool histogram) {
    const int64_t columns = align_up(int64_t(num_experts + num_ranks), 4);
    return 2 * columns * 4 + int64_t(kLayoutThreads) * (4 + 4 + 4) +
           (histogram ? int64_t(kLayoutWarps) * columns * 4 : 0);
}
SY_HOST_DEVICE bool layout_uses_histogram(int32_t num_experts, int32_t num_ranks) {
    return num_experts + num_ranks <= kLayoutHistogramColumns;
}
// Columns past the experts: the ranks, and the nodes when the ranks span several.
SY_HOST_DEVICE int32_t routing_rank_columns(int32_t num_ranks, int32_t num_nodes) {
    return num_ranks + (num_nodes > 1 ? num_nodes : 0);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace routing_detail {

// Chunk `chunk` and the entry this thread owns (in_chunk == false past the chunk's end).
struct LayoutEntry {
    int first_token, num_entries, token, k;
    bool in_chunk;
};

SY_DEVICE LayoutEntry entry_of(const RoutingArgs& args, int chunk) {
    LayoutEntry entry;
    entry.first_token = chunk * args.tokens_per_chunk;
    const int tokens = max(0, min(args.tokens_per_chunk, args.num_tokens - entry.first_token));
    entry.num_entries = tokens * args.topk;
    entry.token = entry.first_token + int(threadIdx.x) / args.topk;
    entry.k = int(threadIdx.x) % args.topk;
    entry.in_chunk = int(threadIdx.x) < entry.num_entries;
    return entry;
}

// Loads this thread's expert id (-1 if none or invalid) into ids[threadIdx.x], reports invalid
// ids, copies the id (and weight) out, and marks whether it leads the token's entries for its
// destination rank. Returns, in every thread, whether any id of the chunk was invalid.
template <typename IndexT, bool kNodes>
SY_DEVICE bool stage_entry(const RoutingArgs& args, const LayoutEntry& entry, int32_t* ids, int32_t* leads) {
    int32_t id = -1;
    bool invalid = false;
    if (entry.in_chunk) {
        // Both loads before any store: a store to the copies could alias the weights for all the
        // compiler knows, and would hold the weight's load (a round trip) behind it.
        const int64_t raw = int64_t(
            static_cast<const IndexT*>(args.topk_idx)[int64_t(entry.token) * args.topk_row_stride + entry.k]);
        const float weight = args.weights_copy
                                 ? args.topk_weights[int64_t(entry.token) * args.weights_row_stride + entry.k]
                                 : 0.f;
        invalid = raw < -1 || raw >= args.num_experts;
        if (invalid)
            report_error(args.diagnostics, kErrorInvalidRouting, kPhaseLayout, -1, uint64_t(args.num_experts),
                         uint64_t(raw), 0, entry_details(entry.token, entry.k));
        else
            id = int32_t(raw);
        const int64_t flat = int64_t(entry.token) * args.topk + entry.k;
        if (args.topk_copy) args.topk_copy[flat] = id;
        if (args.weights_copy) args.weights_copy[flat] = weight;
    }
    ids[threadIdx.x] = id;
    const bool chunk_invalid = __syncthreads_or(invalid) != 0;
    // Bit 0: the token's first entry on its rank; bit 1 (kNodes): its first entry on its node.
    int32_t lead = 0;
    if (id >= 0) {
        const int experts_per_rank = args.num_experts / args.num_ranks;
        const int rank = id / experts_per_rank;
        const int experts_per_node = experts_per_rank * (kNodes ? args.ranks_per_node : 1);
        lead = kNodes ? 3 : 1;
        for (int j = int(threadIdx.x) - entry.k; j < int(threadIdx.x); ++j) {
            if (ids[j] >= 0 && ids[j] / experts_per_rank == rank) lead &= ~1;
            if (kNodes && ids[j] >= 0 && ids[j] / experts_per_node == id / experts_per_node) lead &= ~2;
        }
    }
    leads[threadIdx.x] = lead;
    return chunk_invalid;
}

// totals[c] = the chunk's entries of column c (experts, then ranks, then nodes); each counted
// entry gets its rank among the chunk's earlier entries of its column (in_chunk_pos for the expert,
// in_chunk_slot for the rank when it leads there, in_chunk_node_slot for the node when it leads
// there). kHistogram: per-warp counts and a prefix over warps; else warps take turns in entry order,
// one block barrier per warp. `node` is -1 without node columns.
template <bool kHistogram>
SY_DEVICE void count_chunk(const RoutingArgs& args, int columns, int num_entries, int32_t id, int32_t rank,
                           int32_t lead, int32_t node, int32_t* totals, int32_t* warp_counts, int32_t& in_chunk_pos,
                           int32_t& in_chunk_slot, int32_t& in_chunk_node_slot) {
    const int warp = int(threadIdx.x / 32);
    const uint32_t lower = ptx::lanemask_lt();
    uint32_t same_expert, same_rank, same_node;
    const bool expert_leader = first_lane_with(id, same_expert);
    const bool rank_leader = first_lane_with((lead & 1) ? rank : -1, same_rank) && id >= 0;
    const bool node_leader = first_lane_with((lead & 2) ? node : -1, same_node) && id >= 0;
    const int expert_column = id, rank_column = args.num_experts + rank;
    const int node_column = args.num_experts + args.num_ranks + node;
    for (int i = threadIdx.x; i < columns; i += blockDim.x) totals[i] = 0;
    if constexpr (kHistogram) {
        for (int i = threadIdx.x; i < kLayoutWarps * columns; i += blockDim.x) warp_counts[i] = 0;
        __syncthreads();
        if (expert_leader) warp_counts[warp * columns + expert_column] = __popc(same_expert);
        if (rank_leader) warp_counts[warp * columns + rank_column] = __popc(same_rank);
        if (node_leader) warp_counts[warp * columns + node_column] = __popc(same_node);
        __syncthreads();
        // Exclusive prefix over the warps, in place; the sum is the chunk's total.
        for (int column = threadIdx.x; column < columns; column += blockDim.x) {
            int32_t running = 0;
#pragma unroll 8
            for (int w = 0; w < kLayoutWarps; ++w) {
                const int32_t count = warp_counts[w * columns + column];
                warp_counts[w * columns + column] = running;
                running += count;
            }
            totals[column] = running;
        }
        __syncthreads();
        if (id >= 0) in_chunk_pos = warp_counts[warp * columns + expert_column] + __popc(same_expert & lower);
        if (id >= 0 && (lead & 1))
            in_chunk_slot = warp_counts[warp * columns + rank_column] + __popc(same_rank & lower);
        if (id >= 0 && (lead & 2))
            in_chunk_node_slot = warp_counts[warp * columns + node_column] + __popc(same_node & lower);
        return;
    }
    __syncthreads();
    for (int turn = 0; turn * 32 < num_entries; ++turn) {
        if (warp == turn) {
            if (id >= 0) in_chunk_pos = totals[expert_column] + __popc(same_expert & lower);
            if (id >= 0 && (lead & 1)) in_chunk_slot = totals[rank_column] + __popc(same_rank & lower);
            if (id >= 0 && (lead & 2)) in_chunk_node_slot = totals[node_column] + __popc(same_node & lower);
            __syncwarp();
            if (expert_leader) totals[expert_column] += __popc(same_expert);
            if (rank_leader) totals[rank_column] += __popc(same_rank);
            if (node_leader) totals[node_column] += __popc(same_node);
        }
        __syncthreads();
    }
}

// starts[c] = sum of the totals of column c over the chunks p < chunk, each word waited for until
// it carries this op's epoch. Columns are spread over the threads, and with few columns each
// column's chunks over several threads. Returns false in a thread whose wait timed out (reported);
// `invalid` gets whether any of its words came from a chunk with invalid ids.
SY_DEVICE bool sum_earlier_chunks(const RoutingArgs& args, int columns, int chunk, uint64_t epoch,
                                  int32_t* starts, int32_t* partial, bool& invalid) {
    const int parts = max(1, int(blockDim.x) / columns);
    bool ok = true;
    invalid = false;
    for (int i = threadIdx.x; i < columns * parts; i += blockDim.x) {
        const int column = i % columns, part = i / columns;
        int32_t running = 0;
        // Eleven chunks' totals in flight at once: at 4,096 tokens (32 chunks of 128 tokens, top-8)
        // and up to 264 columns (three parts per column, 33 chunks' reach) that is one round trip
        // per thread on the last chunk's path. (Twelve 64-bit words spill 8-12 bytes at the
        // 64-register cap in every instantiation but the histogram one without node columns.)
        constexpr int kBatch = 11;
        for (int first = part * kBatch; first < chunk; first += parts * kBatch) {
            uint64_t words[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
                words[j] =
                    first + j < chunk
                        ? ptx::ld_relaxed_gpu(args.chunk_totals + int64_t(first + j) * columns + column)
                        : layout_total_word(epoch, 0, false);
#pragma unroll
            for (int j = 0; j < kBatch; ++j) {
                uint64_t word = words[j];
                // Not yet published (the word still carries an earlier op's epoch): wait for it.
                if (!layout_word_of_epoch(word, epoch) &&
                    !wait_until<SignalScope::kGpu>(
                        args.chunk_totals + int64_t(first + j) * columns + column,
                        [epoch, &word](uint64_t seen) {
                            word = seen;
                            return layout_word_of_epoch(seen, epoch);
                        },
                        args.diagnostics, kPhaseLayout, -1, epoch))
                    ok = false;
                running += layout_word_total(word);
                invalid = invalid || (word & kLayoutInvalidBit) != 0;
            }
        }
        if (parts == 1)
            starts[column] = running;
        else
            partial[i] = running;
    }
    if (parts == 1) return ok;
    __syncthreads();
    for (int column = threadIdx.x; column < columns; column += blockDim.x) {
        int32_t running = 0;
        for (int part = 0; part < parts; ++part) running += partial[part * columns + column];
        starts[column] = running;
    }
    return ok;
}

}  // namespace routing_detail

template <typename IndexT, bool kHistogram, bool kNodes = false>
__global__ void __launch_bounds__(kLayoutThreads, 1)
    routing_kernel(const __grid_constant__ RoutingArgs args) {
    extern __shared__ __align__(16) int32_t shared[];
    const int columns = args.num_experts + args.num_ranks + (kNodes ? args.num_nodes : 0);
    const int64_t padded = align_up(int64_t(columns), 4);
    int32_t* totals = shared;           // [columns] this chunk's entries per column
    int32_t* starts = shared + padded;  // [columns] entries of the earlier chunks per column
    int32_t* ids = starts + padded;
    int32_t* leads = ids + kLayoutThreads;
    int32_t* partial = leads + kLayoutThreads;
    int32_t* warp_counts = partial + kLayoutThreads;  // [32][columns] (kHistogram)
    const int experts_per_rank = args.num_experts / args.num_ranks;
    __shared__ uint64_t epoch;
    // The dispatch kernel may be scheduled now (or after the publish below): it waits for this
    // grid before reading anything.
    if (args.dependents_early) ptx::launch_dependents();
    if (threadIdx.x == 0) trace_mark(args.trace, kHtRoutingStart, true);
    // Thread 0 takes the block's chunk and reads the epoch (it cannot advance before every block
    // has published), both round trips at once; the epoch is waited for only at the publish.
    __shared__ int32_t ticket;
    uint64_t old_epoch = 0;
    if (threadIdx.x == 0) {
        const uint32_t taken = atomicAdd(args.chunk_tickets, 1u);
        old_epoch = *reinterpret_cast<volatile uint64_t*>(args.epoch_word);
        // Every other block has its ticket: the counter goes back to zero for the next op.
        if (taken == uint32_t(args.num_chunks - 1)) ptx::st_relaxed_gpu(args.chunk_tickets, 0u);
        ticket = int32_t(taken);
    }
    __syncthreads();
    const int chunk = ticket;
    const routing_detail::LayoutEntry entry = routing_detail::entry_of(args, chunk);
    // Defaults for the chunk's tokens: in no rank.
    const int tokens = entry.num_entries / max(args.topk, 1);
    for (int i = threadIdx.x; i < tokens * args.num_ranks; i += blockDim.x) {
        const int64_t cell = int64_t(entry.first_token) * args.num_ranks + i;
        args.token_rank_slot[cell] = -1;
        if (args.token_in_rank) args.token_in_rank[cell] = 0;
    }
    if constexpr (kNodes)
        for (int i = threadIdx.x; i < tokens * args.num_nodes; i += blockDim.x)
            args.token_node_slot[int64_t(entry.first_token) * args.num_nodes + i] = -1;
    const bool chunk_invalid = routing_detail::stage_entry<IndexT, kNodes>(args, entry, ids, leads);
    __syncthreads();  // leads written; the defaults above precede the slots below (same block)
    if (threadIdx.x == 0) trace_mark(args.trace, kHtRoutingLoaded);
    const int32_t id = ids[threadIdx.x];
    const int rank = id >= 0 ? id / experts_per_rank : -1;
    const int node = kNodes && id >= 0 ? rank / args.ranks_per_node : -1;
    const int32_t lead = leads[threadIdx.x];
    int32_t expert_pos = -1, rank_slot = -1, node_slot = -1;
    routing_detail::count_chunk<kHistogram>(args, columns, entry.num_entries, id, rank, lead, node, totals,
                                            warp_counts, expert_pos, rank_slot, node_slot);
    if (threadIdx.x == 0) epoch = old_epoch + 1;
    __syncthreads();

    // publish: the totals, tagged (no fence: a reader waits for the tag on each word).
    for (int column = threadIdx.x; column < columns; column += blockDim.x)
        ptx::st_relaxed_gpu(args.chunk_totals + int64_t(chunk) * columns + column,
                            layout_total_word(epoch, totals[column], chunk_invalid));
    if (threadIdx.x == 0) trace_mark(args.trace, kHtRoutingPublished);
    if (!args.dependents_early) ptx::launch_dependents();

    // The notify's poison check and op sequence (below) are loaded now, beside the earlier
    // chunks' totals. A chunk with invalid ids says so in its words (the look back sees it);
    // the poison word covers a buffer poisoned before this op.
    __shared__ int announce, poisoned;
    __shared__ uint64_t notify_sequence;
    const bool last_chunk = chunk == args.num_chunks - 1;
    if (threadIdx.x == 0 && last_chunk) {
        const bool notifies = args.notify.peer_bases != nullptr;
        notify_sequence = notifies ? *args.notify.op_counter + 1 : 0;
        announce = notifies;
        poisoned = is_poisoned(args.diagnostics);
    }
    // look back: every earlier chunk's totals (their blocks are running and publish first).
    bool earlier_invalid = false;
    const bool looked_back =
        routing_detail::sum_earlier_chunks(args, columns, chunk, epoch, starts, partial, earlier_invalid);
    if (!__syncthreads_and(looked_back)) return;
    const bool any_invalid = __syncthreads_or(earlier_invalid || chunk_invalid) != 0;
    if (threadIdx.x == 0) trace_mark(args.trace, kHtRoutingLookedBack);
    if (last_chunk) {
        for (int column = threadIdx.x; column < columns; column += blockDim.x) {
            const int32_t total = starts[column] + totals[column];
            if (column < args.num_experts)
                args.num_tokens_per_expert[column] = total;
            else if (column < args.num_experts + args.num_ranks)
                args.num_tokens_per_rank[column - args.num_experts] = total;
            else
                args.num_tokens_per_node[column - args.num_experts - args.num_ranks] = total;
        }
        // Every block has published a chunk, so every block has read the old epoch.
        if (threadIdx.x == 0) *args.epoch_word = epoch;
        if (announce) {  // invalid routing or a poisoned buffer announces its failure instead
            const uint32_t failure =
                any_invalid ? kPeerFailureInvalidRouting : (poisoned ? kPeerFailurePoisoned : 0u);
            ht_notify_peers(
                args.notify, notify_sequence,
                [&](int32_t rank) {
                    return starts[args.num_experts + rank] + totals[args.num_experts + rank];
                },
                [&](int32_t expert) { return starts[expert] + totals[expert]; }, failure);
            if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchNotified);
        }
    }
    if (entry.in_chunk) {
        if (args.token_expert_pos)
            args.token_expert_pos[int64_t(entry.token) * args.topk + entry.k] =
                id >= 0 ? starts[id] + expert_pos : -1;
        if (id >= 0 && (lead & 1)) {
            const int64_t cell = int64_t(entry.token) * args.num_ranks + rank;
            args.token_rank_slot[cell] = starts[args.num_experts + rank] + rank_slot;
            if (args.token_in_rank) args.token_in_rank[cell] = 1;
        }
        if (kNodes && id >= 0 && (lead & 2))
            args.token_node_slot[int64_t(entry.token) * args.num_nodes + node] =
                starts[args.num_experts + args.num_ranks + node] + node_slot;
    }
    if (threadIdx.x == 0) trace_mark(args.trace, kHtRoutingEnd);
}

#endif

}  // namespace switchyard::device
