// Hierarchical HT dispatch, the forwarding role (hier/dispatch.cuh composes the roles):
//
//  forward_records  once block 0 has published the op's counts (the first row of each source at
//                   each rank of this node), each forwarder warp claims items (batch b, source node n,
//                   part of the batch) in batch-major order, so the batches are forwarded in the
//                   order the network delivers them; an item waits for its batch (the network signal
//                   of the rail peer on node n, or this rank's own senders' ready word) and forwards
//                   its records;
//  forward_record   a forward record is staged once in shared memory (bulk load) and written as the
//                   direct path's final record at each rank of this node it goes to, at its final
//                   rank-major row (the source's first row there + the token's slot): the rank-major
//                   output stays a view of the receive region and the direct path's receive kernel
//                   expands the expert-major layouts. Its forward metadata goes to the handle for
//                   the combine.
// Rows to peers leave through the lanes' stores, this rank's own rows through a bulk store (as in
// the direct path's send_token, and for the same reason).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

// Records per forwarding item: a batch is forwarded by several warps at once, so the last batch
// to arrive is not left to a few. The last batch ends the op, and each record takes a warp a few
// microseconds: items of 2 records spread it over 64 warps (items of 8 left it to 16, which
// finished 25-50 us after it landed; decisions, 2026-12-02).
constexpr int32_t kHierForwardRecords = 2;

namespace hier_detail {

// Items per batch of a stream.
SY_HOST_DEVICE constexpr int32_t forward_parts(int32_t batch_records) {
    return (batch_records + kHierForwardRecords - 1) / kHierForwardRecords;
}

// Where item `item` forwards: source node, batch and record range (empty: lo >= hi). Items run
// batch-major (every node's parts of batch 0, then of batch 1, ...), the order the network
// delivers the batches in.
struct ForwardItem {
    int32_t node, batch, lo, hi;
};
SY_HOST_DEVICE ForwardItem forward_item(int32_t item, int32_t num_nodes, int32_t parts, int32_t batch_records,
                                        int32_t records_of_node) {
    ForwardItem it;
    const int32_t part = item % parts, rest = item / parts;
    it.node = rest % num_nodes;
    it.batch = rest / num_nodes;
    it.lo = it.batch * batch_records + part * kHierForwardRecords;
    it.hi =
        int32_t(min64(min64(it.lo + kHierForwardRecords, (it.batch + 1) * batch_records), records_of_node));
    return it;
}

}  // namespace hier_detail

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// Lane 0 starts the bulk load of a forward record's payload and scales into `stage`.
SY_DEVICE void load_record(const uint8_t* record, uint8_t* stage, uint64_t* barrier, uint32_t bytes) {
    ptx::mbarrier_arrive_expect_tx(barrier, bytes);
    ptx::bulk_load(stage, record, bytes, barrier);
}

// Waits for the load into a stage (bounded: wait_stage_barrier); `phase` is that stage's next.
SY_DEVICE bool wait_stage(uint64_t* barrier, uint32_t& phase, const Diagnostics& diagnostics) {
    if (!wait_stage_barrier(barrier, phase, diagnostics)) return false;
    phase ^= 1u;
    return true;
}

// Forwards staged record `slot` of node `node`'s stream (`record`: it in net_recv; `stage`: its
// payload and scales). Lane g holds the source's first row at node rank g (`first_row`).
template <typename Shape, class Backend>
SY_DEVICE void forward_record(const HierDispatchArgs<Backend>& args, const HierOp& op, int32_t node, int32_t slot,
                              const uint8_t* record, const uint8_t* stage, int32_t first_row) {
    constexpr int kTopk = Shape::kTopk;
    const HtCommon& c = args.ht.common;
    const RecordLayout r = Shape::record();
    const HierForwardMeta meta{kTopk, op.ranks_per_node};
    const int lane = int(ptx::lane_id());
    const int32_t* words = reinterpret_cast<const int32_t*>(record + r.meta_offset);
    int32_t* saved = args.forward_meta + (int64_t(node) * c.max_tokens + slot) * meta.total();
    for (int w = lane; w < meta.total(); w += 32) saved[w] = words[w];
    const int32_t token = words[meta.token()];
    int32_t expert = -1, position = -1, weight = 0, rank_slot = -1;
    if (lane < kTopk) {
        expert = words[meta.expert(lane)];
        weight = words[meta.weight(lane)];
        position = words[meta.position(lane)];
    }
    if (lane < op.ranks_per_node) rank_slot = words[meta.slot(lane)];
    for (uint32_t rest = __ballot_sync(0xffffffffu, rank_slot >= 0); rest != 0; rest &= rest - 1) {
        const int g = __ffs(rest) - 1;
        const int q = op.rank_of(op.node, g);
        const int64_t row = int64_t(__shfl_sync(0xffffffffu, first_row, g)) + __shfl_sync(0xffffffffu, rank_slot, g);
        uint8_t* out = c.peer_bases[q] + c.layout.ht_dispatch_offset + row * r.total_bytes;
        int32_t* out_meta = reinterpret_cast<int32_t*>(out + r.meta_offset);
        if (lane < kTopk) {
            const bool owned = expert >= q * c.local_experts && expert < (q + 1) * c.local_experts;
            out_meta[2 + lane] = owned ? expert - q * c.local_experts : -1;
            out_meta[2 + kTopk + lane] = owned ? weight : 0;
            out_meta[2 + 2 * kTopk + lane] = owned ? position : -1;
        }
        const bool bulk = q == c.rank;
        if (lane == 0) {
            out_meta[0] = token;
            out_meta[1] = slot;  // the stream slot: where this row's combine contribution goes
            if (bulk) ptx::bulk_store(out, stage, uint32_t(r.meta_offset));
        }
        if (!bulk)
            for (int64_t offset = int64_t(lane) * 16; offset < r.meta_offset; offset += 32 * 16)
                *reinterpret_cast<uint4*>(out + offset) = *reinterpret_cast<const uint4*>(stage + offset);
    }
    if (lane == 0) ptx::bulk_commit();
    __syncwarp();
}

// Waits (lane 0) for item `it`'s batch; false on timeout or mismatch (reported).
template <class Backend>
SY_DEVICE bool wait_for_batch(const HierDispatchArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                              const ForwardItem& it) {
    const HtCommon& c = args.ht.common;
    const WorkspaceLayout& ws = c.layout.workspace;
    int arrived = 0;
    if (ptx::lane_id() == 0) {
        if (it.node == op.node)
            arrived = wait_for_sequence(ws.hier_ready(c.local_base, 0, it.batch), op.sequence, c.diagnostics,
                                        kPhaseHtData, c.rank);
        else if ((arrived = wait_signal_exact(port, c.diagnostics,
                                              c.layout.hier.signals().dispatch_batch(op.parity, it.node, it.batch),
                                              *ws.hier_consumed(c.local_base, op.parity, it.node, it.batch) + 1,
                                              it.node, kPhaseHierDispatch))) {
            trace_mark(args.ht.trace, kHtDispatchFirstLanded, true);
            trace_mark(args.ht.trace, kHtDispatchLastLanded);
        }
    }
    __syncwarp();  // the acquiring lane's view orders the warp's reads of the records
    return __shfl_sync(0xffffffffu, arrived, 0) != 0;
}

// forward_records, for one forwarder warp with its two stages, whose barriers completed
// `prior_loads` bulk loads before (alternating stages from stage 0: send_tokens). False when a wait
// failed.
template <typename Shape, class Backend>
SY_DEVICE bool forward_records(const HierDispatchArgs<Backend>& args, const HierOp& op,
                               const NetPort<Backend>& port, uint64_t* counters, uint8_t* stages,
                               uint64_t* barriers, int32_t prior_loads) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    const int lane = int(ptx::lane_id());
    const uint32_t stage_bytes = uint32_t(Shape::record().meta_offset);
    // Block 0 publishes once the counts of every node are in: a stall there (a silent rail peer) is
    // block 0's to report, naming the peer, so this wait gives it twice the budget.
    Diagnostics patient = c.diagnostics;
    patient.timeout_ns *= 2;
    int published = 1;
    if (lane == 0)
        published = wait_for_sequence(c.layout.workspace.hier_offsets_ready(c.local_base), op.sequence, patient,
                                      kPhaseHtNotify, c.rank);
    __syncwarp();
    if (!__shfl_sync(0xffffffffu, published, 0)) return false;
    // Lane n: the records forwarded from node n; the items cover the longest stream.
    const int32_t records = lane < op.num_nodes ? args.forward_counts[lane] : 0;
    int32_t batches = hier_batches_of(records, op.batch_records);
    for (int offset = 16; offset >= 1; offset /= 2) batches = max(batches, __shfl_xor_sync(0xffffffffu, batches, offset));
    const int32_t parts = forward_parts(op.batch_records);
    const int32_t items = batches * op.num_nodes * parts;
    ClaimAhead claims{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextSendItem), 1ull};
    claims.issue();
    uint32_t phases[2] = {uint32_t((prior_loads + 1) / 2) & 1u, uint32_t(prior_loads / 2) & 1u};
    for (;;) {
        const int32_t item = int32_t(claims.take(items));
        if (item >= items) {
            if (lane == 0) ptx::bulk_wait<0>();  // this rank's own rows (bulk stores) are written
            __syncwarp();
            return true;
        }
        const int32_t node_records = __shfl_sync(0xffffffffu, records, (item / parts) % op.num_nodes);
        const ForwardItem it = forward_item(item, op.num_nodes, parts, op.batch_records, node_records);
        if (it.lo >= it.hi) continue;
        if (!wait_for_batch(args, op, port, it)) return false;
        const int32_t first_row =
            lane < op.ranks_per_node
                ? c.layout.workspace.hier_offsets(c.local_base)[op.rail_peer(it.node) * op.ranks_per_node + lane]
                : 0;
        const uint8_t* base = c.local_base + h.net_recv(op.parity, it.node, 0, args.forward_bytes);
        if (lane == 0) load_record(base + int64_t(it.lo) * args.forward_bytes, stages, &barriers[0], stage_bytes);
        for (int32_t slot = it.lo; slot < it.hi; ++slot) {
            const int stage = (slot - it.lo) & 1;
            if (!__all_sync(0xffffffffu, wait_stage(&barriers[stage], phases[stage], c.diagnostics)))
                return false;  // reported
            if (lane == 0 && slot + 1 < it.hi) {
                ptx::bulk_wait_read<0>();  // the other stage's bulk store (two records ago) has read it
                load_record(base + int64_t(slot + 1) * args.forward_bytes, stages + (stage ^ 1) * stage_bytes,
                            &barriers[stage ^ 1], stage_bytes);
            }
            __syncwarp();
            forward_record<Shape>(args, op, it.node, slot, base + int64_t(slot) * args.forward_bytes,
                                  stages + stage * stage_bytes, first_row);
        }
        if (lane == 0) ptx::bulk_wait_read<0>();  // the next item starts on stage 0 again
        __syncwarp();
    }
}

}  // namespace hier_detail

#endif

}  // namespace switchyard::device
