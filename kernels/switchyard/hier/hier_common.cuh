// What the hierarchical HT kernels share (hier/dispatch.cuh, hier/combine.cuh): this rank's place
// on the network, lock-step waits on network signals, the batches of a record stream (the network's
// unit: one put and one signal per batch), and the end of an op inside one node.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/transport/completion.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

// This rank's place and the op's fixed values, read once at a kernel's start.
struct HierOp {
    int32_t node, num_nodes, ranks_per_node, local_index;
    int32_t parity;         // the dispatch's copy of the network receive regions (dispatch count & 1)
    int32_t batch_records;  // records per batch of a stream (from the op's record size)
    uint64_t sequence;      // the HT op sequence
    SY_DEVICE int32_t rank_of(int32_t node_index, int32_t local) const { return node_index * ranks_per_node + local; }
    SY_DEVICE int32_t rail_peer(int32_t node_index) const { return rank_of(node_index, local_index); }
};

template <class Context>
SY_DEVICE HierOp hier_op(const Context& net, const HtCommon& c, uint64_t sequence, int32_t parity,
                         int64_t record_bytes) {
    HierOp op;
    op.node = net.node;
    op.num_nodes = net.num_nodes;
    op.ranks_per_node = net.ranks_per_node;
    op.local_index = net.local_index;
    op.parity = parity;
    op.batch_records = hier_batch_records(c.layout.hier.max_tokens, net.num_nodes, record_bytes);
    op.sequence = sequence;
    return op;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// One thread: waits (bounded) until network signal `id` from the rail peer on `node` reaches
// `target`, and checks it is exactly there (lock step: a larger value means the ranks' op sequences
// diverged; it is reported as a sequence mismatch). False on timeout, mismatch or poisoning.
template <class Backend>
SY_DEVICE bool wait_signal_exact(const NetPort<Backend>& port, const Diagnostics& diagnostics, uint32_t id,
                                 uint64_t target, int32_t node, int32_t phase) {
    if (!port.wait_signal(id, target, node, phase)) return false;
    const uint64_t seen = port.read_signal(id);
    if (seen == target) return true;
    report_error(diagnostics, kErrorSequenceMismatch, phase, port.rail_peer(node), target, seen, 0);
    return false;
}

// Source reuse across ops. A hierarchical op's puts read sources that this rank rewrites in its
// next op of the same kind (the dispatch's net_send and counts_send, the combine's partial_send and
// weights_send). The op does not flush them before it ends, which held its end until its own wire
// had carried everything: each such put raises the kind's network counter once its source was read
// (transport/net.cuh, contract 3), the op's last block adds the number of those puts (known from
// the counts: a put per batch of each stream to another node, and the counts or weights puts) to
// the kind's workspace tally, and the next op of the kind waits at its start for the counter to
// reach the tally (at once, unless that op follows the previous one of its kind while the network
// still reads its sources).
struct HierSources {
    uint32_t counter;  // network counter id on kHierContext
    int32_t tally;     // workspace counter: the kind's puts with that counter so far

    // The op's last block: this op issued `puts` of them.
    SY_DEVICE void add(uint64_t* counters, uint64_t puts) const { counters[tally] += puts; }
    // One thread, at the op's start (before any of its puts): the previous ops' sources were read.
    // False on timeout (reported).
    template <class Backend>
    SY_DEVICE bool wait_read(const NetPort<Backend>& port, const uint64_t* counters) const {
        return port.wait_counter(counter, counters[tally], kPhaseNetwork);
    }
};
SY_DEVICE HierSources dispatch_sources() {
    return {kHierDispatchSourceCounter, kCounterHierDispatchSourcePuts};
}
SY_DEVICE HierSources combine_sources() {
    return {kHierCombineSourceCounter, kCounterHierCombineSourcePuts};
}

// A stream of records to one node, as its writers complete them. Records [first, first + count)
// written by one lane's warp go to their batches; the lane whose records complete a batch sends
// it: to another node as one put of the whole batch with the batch's signal (+1), to this rank's
// own node as a ready word (the op's sequence). The records' writers fence at GPU scope before
// they add them; the completing lane's fence after its add orders every writer's records before
// its put, whose own release covers them: so one put carries records that several warps of
// several blocks wrote (the issue order the put needs, transport/net.cuh contract 2 and 5, is
// established through the counter).
struct HierStream {
    uint32_t* staged;        // [batches] records written so far (workspace; reset by the op's last block)
    uint64_t* ready;         // own node: [batches] ready words; else null
    uint64_t src_offset;     // slot 0 of the stream in this rank's window
    uint64_t dst_offset;     // slot 0 of the stream in the peer's window
    int64_t record_bytes;
    uint32_t first_signal;   // signal id of batch 0 (the batches' ids are consecutive)
    int32_t node;            // destination node
    int32_t records;         // records of the stream in this op
    int32_t batch_records;
    OpTrace trace;           // the op's timeline: its first put raises `first_put_mark`
    int32_t first_put_mark;
    uint32_t source_counter;  // raised by each put once its source was read (HierSources)
};

// One lane. Returns false when a put could not be issued (reported).
template <class Backend>
SY_DEVICE bool add_to_stream(const NetPort<Backend>& port, const HierStream& s, int32_t first, int32_t count,
                             uint64_t sequence) {
    const int32_t B = s.batch_records;
    for (int32_t batch = first / B; count > 0; ++batch) {
        const int32_t end = min((batch + 1) * B, first + count);
        const uint32_t added = uint32_t(end - first);
        count -= int32_t(added);
        first = end;
        const int32_t size = hier_batch_size(s.records, batch, B);
        if (atomicAdd(s.staged + batch, added) + added != uint32_t(size)) continue;
        // Acquire: every writer's records of the batch (each fenced at GPU scope before its add)
        // precede what follows. GPU scope suffices: the put releases what its thread has seen at
        // the scope its reader needs (the emulated network's tag at system scope; GIN's put by
        // default, its source written at device scope), and the ready word's readers are this
        // rank's forwarders, on this GPU. A system fence here as well cost the dispatch across nodes
        // ~2.5 us (decisions, 2026-12-03).
        ptx::fence_acq_rel_gpu();
        if (s.ready != nullptr) {
            ptx::st_relaxed_sys(s.ready + batch, sequence);
            continue;
        }
        const uint64_t at = uint64_t(batch) * B * uint64_t(s.record_bytes);
        if (!port.put(s.node, s.dst_offset + at, s.src_offset + at, uint64_t(size) * uint64_t(s.record_bytes),
                      net_signal_add(s.first_signal + uint32_t(batch), 1), net_counter_inc(s.source_counter)))
            return false;
        trace_mark(s.trace, s.first_put_mark, true);
    }
    return true;
}

// For a timed-out wait on node peer `peer`: its HT kernels' progress (completion.cuh).
SY_DEVICE PeerKernelDetails node_peer_details(const HtCommon& c, int32_t peer) {
    return ht_detail::peer_details(c, peer);
}

// The last block's signal to this node's ranks (the direct path's finish_and_signal reaches every
// rank; here only the ranks of this node are mapped): `done_offset`'s slot of this rank at each,
// after the system fence that ended last_block_to_finish.
SY_DEVICE void signal_node(const HtCommon& c, const HierOp& op, int64_t done_offset, uint64_t value) {
    if (is_poisoned(c.diagnostics)) return;
    for (int32_t g = 0; g < op.ranks_per_node; ++g)
        ptx::st_relaxed_sys(reinterpret_cast<uint64_t*>(c.peer_bases[op.rank_of(op.node, g)] + done_offset) + c.rank,
                            value);
}

// The last block's batch bookkeeping, one word a thread: each node's staged counts of `staged_op`
// (0 dispatch, 1 combine) back to zero and, for the other nodes, one more consumed signal of
// `consumed_kind` for each batch of the `batches_of(node)` the op used. Spread over the block
// because one thread took ~5 us for the loads and stores one after another, and the kernel ends
// only after them (traced, 2026-12-02).
template <typename BatchesOf>
SY_DEVICE void book_batches(const HtCommon& c, const HierOp& op, int32_t staged_op, int32_t consumed_kind,
                            BatchesOf batches_of) {
    const WorkspaceLayout& ws = c.layout.workspace;
    for (int32_t i = int32_t(threadIdx.x); i < op.num_nodes * ws.hier_batches; i += int32_t(blockDim.x)) {
        const int32_t node = i / ws.hier_batches, batch = i % ws.hier_batches;
        *ws.hier_staged(c.local_base, staged_op, node, batch) = 0;
        if (node != op.node && batch < batches_of(node))
            *ws.hier_consumed(c.local_base, consumed_kind, node, batch) += 1;
    }
}

}  // namespace hier_detail

#endif

}  // namespace switchyard::device
