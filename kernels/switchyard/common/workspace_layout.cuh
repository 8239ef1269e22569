// The control workspace at the front of every rank's symmetric buffer.
//
// It starts zeroed and stays zero-or-monotone: signals are sequence numbers that only grow, so no
// consumer has to re-zero them and CUDA-graph replays stay valid (sequence counters live here too,
// on the device, not in host variables baked into a graph). Host (sizing, zeroing) and device
// (addressing) use this one struct, so they agree on every offset.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

constexpr int32_t kTraceMaxMarks = 21;  // marks of the longest op timeline (common/op_trace.cuh)

// Local sequence counters (only the owning rank touches them).
enum Counter : int32_t {
    kCounterBarrier = 0,  // barriers issued on this buffer
    kCounterHt = 1,       // high-throughput ops (dispatch and combine share one sequence)
    // Low-latency halves, one sequence per op kind and half: each kind alternates between the two
    // sets on its own, and op n of a kind is the ceil(n / 2)-th on its set (ll_arrival_target).
    kCounterLlDispatchSend = 2,
    kCounterLlDispatchRecv = 3,
    kCounterHtBlocksDone = 4,  // blocks of the running HT kernel that finished (last one resets)
    kCounterLlBlocksDone = 5,  // blocks of the running LL kernel past its prologue (last one resets)
    kCounterLlCombineSend = 6,
    kCounterLlCombineRecv = 7,
    // Written by each barrier kernel as it starts (its sequence and the global timer), for a peer
    // that times out waiting for this rank to say whether this rank's kernel ever ran.
    kCounterBarrierRunning = 8,
    kCounterBarrierStartNs = 9,
    // The same for the high-throughput kernels (dispatch and combine share the op sequence).
    kCounterHtRunning = 10,
    kCounterHtStartNs = 11,
    // Work items claimed so far in the running HT kernel: dispatch token chunks (claim_tokens),
    // combine chunks (publisher variant). The kernel's last block resets it.
    kCounterHtNextItem = 12,
    // LL across nodes (ll/net_layout.cuh): the blocks of the running dispatch / combine kernel
    // that finished their network work (the last one issues the op's signals and resets it), and
    // the combine's forward puts issued so far (monotone: a later combine waits for the forward
    // counter to reach it before its node-mates may write the forward area again).
    kCounterLlNetDispatchElect = 13,
    kCounterLlNetCombineElect = 14,
    kCounterLlNetForwardTally = 15,
    // Written by each LL kernel that sends, as it starts: its send sequence and the global timer
    // (per op kind), for the same diagnosis as the barrier's and the HT kernels'.
    kCounterLlDispatchRunning = 16,
    kCounterLlDispatchStartNs = 17,
    kCounterLlCombineRunning = 18,
    kCounterLlCombineStartNs = 19,
    // Written by block 0 of each LL kernel that sends, once it has raised its arrivals at every
    // unmasked destination: the op's send sequence (per op kind). A waiter that times out reads
    // it to tell a sender that never got past its stores from one whose arrivals went astray.
    kCounterLlDispatchArrived = 20,
    kCounterLlCombineArrived = 21,
    // The HT sequence of the last dispatch on this buffer (its kernel's last block writes it): a
    // combine that directly follows a dispatch needs no entry handshake (ht/combine.cuh).
    kCounterHtLastDispatch = 22,
    // Combine rows claimed by sender warps in the running op (claimed sends; the last block resets it).
    kCounterHtNextSendItem = 23,
    // SWITCHYARD_TRACE only: one counter per mark of the running op's timeline (common/op_trace.cuh),
    // and the blocks of its last kernel done (the last one copies the marks out and resets them).
    kCounterTraceFirst = 24,
    kCounterTraceBlocks = kCounterTraceFirst + kTraceMaxMarks,
    // LL across nodes: the latest combine send sequence for which this rank's forward area may be
    // written (its earlier forward puts have read their sources). Node-mates read it (NVLink).
    kCounterLlNetForwardReady = kCounterTraceBlocks + 1,
    // Hierarchical HT (ranks on several nodes): the dispatches so far (their parity picks the copy of
    // the network receive regions and signals, hier/hier_layout.cuh), and the combines that began
    // with an entry handshake over the network (the target of the entry signals). Advanced by the
    // kernels' last blocks.
    kCounterHierDispatches = kCounterLlNetForwardReady + 1,
    kCounterHierCombineEntries = kCounterLlNetForwardReady + 2,
    // Hierarchical combines whose homes sent their top-k weights to the forwarders (flat weighted).
    kCounterHierWeightRounds = kCounterLlNetForwardReady + 3,
    // Hierarchical HT source reuse (hier/hier_common.cuh, HierSources): the network puts with a
    // source counter this rank's dispatches and combines issued, through the latest op of the kind
    // (what the next one waits for before it rewrites a source). Advanced by the last blocks.
    kCounterHierDispatchSourcePuts = kCounterLlNetForwardReady + 4,
    kCounterHierCombineSourcePuts = kCounterLlNetForwardReady + 5,
    // Hierarchical HT dispatch: the head tokens claimed so far by the running kernel's warps
    // (hier/dispatch_send.cuh, head_runs; its last block resets it).
    kCounterHierHeadItem = kCounterLlNetForwardReady + 6,
    kNumCounters = kCounterHierHeadItem + 1,
};

// 64-bit words of the HT notify entry one source writes to each destination: {sequence,
// rows_to[R], expert_rows[L]}, each count tagged with the op's sequence (HtNotifyView,
// transport/counts_exchange.cuh).
SY_HOST_DEVICE constexpr int64_t ht_notify_words(int32_t num_ranks, int32_t local_experts) {
    return 1 + int64_t(num_ranks) + local_experts;
}

// Home tokens per combine arrival counter, and the reduce's unit of work: small, so the reduce
// can follow the arrivals closely. Every reduce warp waits on its own chunk at the arrival front,
// so the last chunks are reduced only after they arrive, one warp each: the reduce ends about one
// chunk's reduce time after the last rows. Two tokens beat four (a shorter tail) and one (more
// waits and arrival adds per row); docs/decisions.md has the measurements.
constexpr int32_t kHtCombineChunkTokens = 2;

struct WorkspaceLayout {
    static constexpr int64_t kAlignment = 128;

    int32_t num_ranks = 0;
    int32_t max_local_experts = 0;       // L capacity of the notify entries
    int64_t counters_offset = 0;         // [kNumCounters] uint64, local
    int64_t poison_offset = 0;           // uint32, local: non-zero once an op failed
    int64_t barrier_signals_offset = 0;  // [R] uint64: slot s holds rank s's latest barrier sequence
    // High-throughput signals, written by peers (slot s = from rank s):
    int64_t ht_notify_offset = 0;  // [R] notify entries (see ht_notify_entry_bytes)
    int64_t ht_notify_entry_bytes = 0;
    int64_t ht_dispatch_done_offset = 0;  // [R] uint64: source s finished writing its rows here
    int64_t ht_combine_entry_offset = 0;  // [R] uint64: rank s entered combine (its region is free)
    int64_t ht_combine_done_offset = 0;   // [R] uint64: rank s finished writing combine rows here
    // HT masking (local): the sequence of the latest op whose peers block 0 has decided, then the
    // mask, [R] uint32 (1: rank s is masked; set by the kernels' decisions and by ht_set_mask).
    int64_t ht_mask_offset = 0;
    // Low-latency signals: one area the LL kernels lay out themselves (ll/ll_layout.cuh).
    int64_t ll_signals_offset = 0;
    int64_t ll_signals_bytes = 0;
    // High-throughput combine arrivals, per chunk of kHtCombineChunkTokens home tokens and source:
    // [chunks][R] uint64 that sources raise by the rows they wrote here (monotone), and the home's
    // own tally of the rows it has consumed from each (so a chunk's target is tally + this op's
    // rows, and nothing is ever re-zeroed).
    int32_t ht_combine_chunks = 0;
    int64_t ht_combine_arrivals_offset = 0;
    int64_t ht_combine_consumed_offset = 0;
    int64_t ht_combine_ready_offset = 0;  // [chunks] uint64, local: sequence of the op whose rows of
                                          // the chunk have all arrived (for the chunk's other warps)
    // Hierarchical HT (num_nodes > 1; hier/hier_layout.cuh), all local to this rank:
    int32_t hier_nodes = 1, hier_ranks_per_node = 1, hier_batches = 0;
    int64_t hier_staged_offset = 0;    // [2 ops][N][batches] uint32: records of a batch written so
                                       // far by the op's writers (dispatch senders, combine reducers);
                                       // the one that completes a batch sends it. Reset by the last block.
    int64_t hier_consumed_offset = 0;  // [3][N][batches] uint64: batch signals consumed so far, per
                                       // dispatch parity (0, 1) and for the combine (2)
    int64_t hier_ready_offset = 0;     // [2 ops][batches] uint64: sequence of the op whose batch of
                                       // this rank's own node is written (dispatch, combine)
    int64_t hier_offsets_ready_offset = 0;  // uint64: sequence of the dispatch whose offsets are set
    int64_t hier_offsets_offset = 0;        // [R][G] int32: first row of source s at node rank g
    int64_t total_bytes = 0;

    // Bytes the LL signal area reserves: per set and source 256 bytes, per peer 256 bytes more.
    SY_HOST_DEVICE static int64_t ll_signal_bytes_for(int32_t num_ranks) {
        return align_up(4096 + int64_t(num_ranks) * (2 * 256 + 256), kAlignment);
    }

    // `max_tokens`: HT T_max (0 without high-throughput ops: no combine arrival counters).
    // `num_nodes` > 1: the hierarchical HT path's words (`hier_batches` batches per stream); its
    // combine counts arrivals per (source node, chunk of stream slots) and contributing rank.
    SY_HOST_DEVICE static WorkspaceLayout make(int32_t num_ranks, int32_t max_local_experts = 0,
                                               int32_t max_tokens = 0, int32_t num_nodes = 1,
                                               int32_t hier_batches = 0) {
        WorkspaceLayout layout;
        layout.num_ranks = num_ranks;
        layout.max_local_experts = max_local_experts;
        int64_t offset = 0;
        layout.counters_offset = offset;
        offset += align_up(kNumCounters * 8, kAlignment);
        layout.poison_offset = offset;
        offset += kAlignment;
        const int64_t per_rank_u64 = align_up(int64_t(num_ranks) * 8, kAlignment);
        layout.barrier_signals_offset = offset;
        offset += per_rank_u64;
        // Notify entry (ht_notify_words 64-bit words), padded to 16 bytes.
        layout.ht_notify_entry_bytes = align_up(8 * ht_notify_words(num_ranks, max_local_experts), 16);
        layout.ht_notify_offset = offset;
        offset += align_up(layout.ht_notify_entry_bytes * num_ranks, kAlignment);
        layout.ht_dispatch_done_offset = offset;
        offset += per_rank_u64;
        layout.ht_combine_entry_offset = offset;
        offset += per_rank_u64;
        layout.ht_combine_done_offset = offset;
        offset += per_rank_u64;
        layout.ht_mask_offset = offset;
        offset += align_up(8 + int64_t(num_ranks) * 4, kAlignment);
        layout.ll_signals_offset = offset;
        layout.ll_signals_bytes = ll_signal_bytes_for(num_ranks);
        offset += layout.ll_signals_bytes;
        const int32_t nodes = num_nodes > 1 ? num_nodes : 1;
        layout.ht_combine_chunks = nodes * int32_t(ceil_div(max_tokens, kHtCombineChunkTokens));
        const int64_t chunk_counters =
            align_up(int64_t(layout.ht_combine_chunks) * num_ranks * 8, kAlignment);
        layout.ht_combine_arrivals_offset = offset;
        offset += chunk_counters;
        layout.ht_combine_consumed_offset = offset;
        offset += chunk_counters;
        layout.ht_combine_ready_offset = offset;
        offset += align_up(int64_t(layout.ht_combine_chunks) * 8, kAlignment);
        if (num_nodes > 1 && max_tokens > 0) {
            const int64_t per_op = int64_t(num_nodes) * hier_batches;
            layout.hier_nodes = num_nodes;
            layout.hier_ranks_per_node = num_ranks / num_nodes;
            layout.hier_batches = hier_batches;
            layout.hier_staged_offset = offset;
            offset += align_up(2 * per_op * 4, kAlignment);
            layout.hier_consumed_offset = offset;
            offset += align_up(3 * per_op * 8, kAlignment);
            layout.hier_ready_offset = offset;
            offset += align_up(2 * int64_t(hier_batches) * 8, kAlignment);
            layout.hier_offsets_ready_offset = offset;
            offset += kAlignment;
            layout.hier_offsets_offset = offset;
            offset += align_up(int64_t(num_ranks) * layout.hier_ranks_per_node * 4, kAlignment);
        }
        layout.total_bytes = align_up(offset, 4096);
        return layout;
    }

    SY_HOST_DEVICE uint64_t* counters(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + counters_offset);
    }
    SY_HOST_DEVICE uint32_t* poison(uint8_t* base) const {
        return reinterpret_cast<uint32_t*>(base + poison_offset);
    }
    SY_HOST_DEVICE uint64_t* barrier_signals(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + barrier_signals_offset);
    }
    SY_HOST_DEVICE uint8_t* ht_notify_entry(uint8_t* base, int32_t source) const {
        return base + ht_notify_offset + ht_notify_entry_bytes * source;
    }
    SY_HOST_DEVICE uint64_t* ht_dispatch_done(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + ht_dispatch_done_offset);
    }
    SY_HOST_DEVICE uint64_t* ht_combine_entry(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + ht_combine_entry_offset);
    }
    SY_HOST_DEVICE uint64_t* ht_combine_done(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + ht_combine_done_offset);
    }
    SY_HOST_DEVICE uint64_t* ht_mask_decided(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + ht_mask_offset);
    }
    SY_HOST_DEVICE uint32_t* ht_mask(uint8_t* base) const {
        return reinterpret_cast<uint32_t*>(base + ht_mask_offset + 8);
    }
    SY_HOST_DEVICE uint8_t* ll_signals(uint8_t* base) const { return base + ll_signals_offset; }
    // Counter of (chunk, source) in the [chunks][R] arrays.
    SY_HOST_DEVICE uint64_t* ht_combine_arrival(uint8_t* base, int32_t chunk, int32_t source) const {
        return reinterpret_cast<uint64_t*>(base + ht_combine_arrivals_offset) + int64_t(chunk) * num_ranks +
               source;
    }
    SY_HOST_DEVICE uint64_t* ht_combine_ready(uint8_t* base, int32_t chunk) const {
        return reinterpret_cast<uint64_t*>(base + ht_combine_ready_offset) + chunk;
    }
    // Hierarchical words; `op` 0 = dispatch, 1 = combine.
    SY_HOST_DEVICE uint32_t* hier_staged(uint8_t* base, int32_t op, int32_t node, int32_t batch) const {
        return reinterpret_cast<uint32_t*>(base + hier_staged_offset) +
               (int64_t(op) * hier_nodes + node) * hier_batches + batch;
    }
    // `kind` 0, 1: the dispatch batch signals of that parity; 2: the combine's.
    SY_HOST_DEVICE uint64_t* hier_consumed(uint8_t* base, int32_t kind, int32_t node, int32_t batch) const {
        return reinterpret_cast<uint64_t*>(base + hier_consumed_offset) +
               (int64_t(kind) * hier_nodes + node) * hier_batches + batch;
    }
    SY_HOST_DEVICE uint64_t* hier_ready(uint8_t* base, int32_t op, int32_t batch) const {
        return reinterpret_cast<uint64_t*>(base + hier_ready_offset) + int64_t(op) * hier_batches + batch;
    }
    SY_HOST_DEVICE uint64_t* hier_offsets_ready(uint8_t* base) const {
        return reinterpret_cast<uint64_t*>(base + hier_offsets_ready_offset);
    }
    SY_HOST_DEVICE int32_t* hier_offsets(uint8_t* base) const {
        return reinterpret_cast<int32_t*>(base + hier_offsets_offset);
    }
    SY_HOST_DEVICE uint64_t* ht_combine_consumed(uint8_t* base, int32_t chunk, int32_t source) const {
        return reinterpret_cast<uint64_t*>(base + ht_combine_consumed_offset) + int64_t(chunk) * num_ranks +
               source;
    }
};

}  // namespace switchyard::device
