// Hierarchical HT dispatch, the sending role (hier/dispatch.cuh composes the roles):
//
//  send_tokens   a warp walks tokens in runs it claims in token order (every run is claimed, none
//                assigned: a block held up, as block 0 is by the counts, holds no tokens back, so
//                the first batches leave as soon as any warp has them): first the head, one token
//                a claim, by every warp of the grid; then the rest, in runs of several tokens, by
//                the sender warps. A token is staged once in shared memory (bulk load, or quantized
//                by the warp: the direct path's stage_token) and written as a forward record into
//                the stream of every node it goes to, at its stream slot (the routing kernel's
//                token_node_slot): into net_send for other nodes, straight into this rank's own
//                net_recv for its own node. Lanes write the metadata, lane 0 the payload and
//                scales with a bulk store.
//  end_run       after a run of consecutive tokens (their records are consecutive in each stream)
//                lane m adds the run's records of node m's stream to their batches; the lane that
//                completes a batch sends it whole (hier_common.cuh, add_to_stream).
// Senders need no counts from any peer: the streams' regions are worst case, per source node.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ht/dispatch_send.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

namespace hier_detail {

// The tokens [start, num_tokens) claimed `run` consecutive tokens a claim (the last claim shorter):
// claim c covers [first(c), end(c)).
struct RunSchedule {
    int32_t start, num_tokens, run;
    SY_HOST_DEVICE int64_t claims() const {
        return num_tokens > start ? (int64_t(num_tokens) - start + run - 1) / run : 0;
    }
    SY_HOST_DEVICE int64_t first(int64_t claim) const { return start + claim * run; }
    SY_HOST_DEVICE int64_t end(int64_t claim) const { return min64(first(claim) + run, num_tokens); }
};

// The head: the tokens of each stream's first kHierHeadBatches batches (about: most tokens go to
// every node), one token a claim, sent by every warp of the grid before the senders go on in runs
// of kClaimTokens (the body) and the forwarders start. A stream's batch waits for its slowest run,
// and a run costs its tokens plus a fixed part (its records made visible at system scope, its
// batches' adds): with runs of kClaimTokens from the sender warps only, the first puts left ~33 us
// after the kernel's start. A head of two batches put them out ~15 us sooner but left the wire idle
// until the senders' first runs filled the third; four keep it busy (docs/decisions.md).
constexpr int32_t kHierHeadBatches = 4;

SY_HOST_DEVICE constexpr int32_t hier_head_tokens(int32_t batch_records, int32_t num_tokens) {
    return int32_t(min64(int64_t(kHierHeadBatches) * batch_records, num_tokens));
}
SY_HOST_DEVICE constexpr RunSchedule hier_head_schedule(int32_t batch_records, int32_t num_tokens) {
    return RunSchedule{0, hier_head_tokens(batch_records, num_tokens), 1};
}
SY_HOST_DEVICE constexpr RunSchedule hier_body_schedule(int32_t batch_records, int32_t num_tokens,
                                                        int32_t run) {
    return RunSchedule{hier_head_tokens(batch_records, num_tokens), num_tokens, run};
}

}  // namespace hier_detail

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// A token's route as the sender needs it: lanes < K its experts, their positions and weights;
// lane m < N its slot in the stream to node m (-1: not sent there).
struct HierRoute {
    int32_t expert = -1, position = -1;
    float weight = 0.0f;
    int32_t node_slot = -1;
};

template <typename Shape, class Backend>
SY_DEVICE HierRoute load_route(const HierDispatchArgs<Backend>& args, const HierOp& op, int token) {
    const HtDispatchArgs& ht = args.ht;
    const uint32_t lane = ptx::lane_id();
    HierRoute route;
    if (int(lane) < Shape::kTopk) {
        route.expert = ht.topk_idx[int64_t(token) * Shape::kTopk + lane];
        route.position = ht.token_expert_pos[int64_t(token) * Shape::kTopk + lane];
        if (ht.topk_weights) route.weight = ht.topk_weights[int64_t(token) * ht.weights_row_stride + lane];
    }
    if (int(lane) < op.num_nodes) route.node_slot = args.token_node_slot[int64_t(token) * op.num_nodes + lane];
    return route;
}

// Node `node`'s stream of this op as this rank sends it (hier_common.cuh).
template <class Backend>
SY_DEVICE HierStream dispatch_stream(const HierDispatchArgs<Backend>& args, const HierOp& op, int32_t node,
                                     int32_t records) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    const WorkspaceLayout& ws = c.layout.workspace;
    HierStream stream;
    stream.staged = ws.hier_staged(c.local_base, 0, node, 0);
    stream.ready = node == op.node ? ws.hier_ready(c.local_base, 0, 0) : nullptr;
    stream.src_offset = uint64_t(h.net_send(node, 0, args.forward_bytes));
    stream.dst_offset = uint64_t(h.net_recv(op.parity, op.node, 0, args.forward_bytes));
    stream.record_bytes = args.forward_bytes;
    stream.first_signal = h.signals().dispatch_batch(op.parity, op.node, 0);
    stream.node = node;
    stream.records = records;
    stream.batch_records = op.batch_records;
    stream.trace = args.ht.trace;
    stream.first_put_mark = kHtDispatchFirstPut;
    stream.source_counter = kHierDispatchSourceCounter;
    return stream;
}

// Writes staged token `token` into the stream of each node it goes to. Lane m counts the run's
// records of node m (`first`: the run's first slot there).
template <typename Shape, class Backend>
SY_DEVICE void write_forward_records(const HierDispatchArgs<Backend>& args, const HierOp& op, int token,
                                     const HierRoute& route, const uint8_t* stage, int32_t& first, int32_t& count) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    const RecordLayout r = Shape::record();
    const HierForwardMeta meta{Shape::kTopk, op.ranks_per_node};
    const int lane = int(ptx::lane_id());
    for (uint32_t rest = __ballot_sync(0xffffffffu, route.node_slot >= 0); rest != 0; rest &= rest - 1) {
        const int node = __ffs(rest) - 1;
        const int32_t slot = __shfl_sync(0xffffffffu, route.node_slot, node);
        uint8_t* record = c.local_base + (node == op.node ? h.net_recv(op.parity, op.node, slot, args.forward_bytes)
                                                          : h.net_send(node, slot, args.forward_bytes));
        int32_t* words = reinterpret_cast<int32_t*>(record + r.meta_offset);
        if (lane < Shape::kTopk) {
            words[meta.expert(lane)] = route.expert;
            words[meta.weight(lane)] = __float_as_int(route.weight);
            words[meta.position(lane)] = route.position;
        }
        if (lane < op.ranks_per_node)
            words[meta.slot(lane)] =
                args.ht.token_rank_slot[int64_t(token) * c.num_ranks + op.rank_of(node, lane)];
        if (lane == 0) {
            words[meta.token()] = token;
            ptx::bulk_store(record, stage, uint32_t(r.meta_offset));
        }
        if (lane == node) {
            if (count == 0) first = slot;
            ++count;
        }
    }
    if (lane == 0) ptx::bulk_commit();
    __syncwarp();
}

// After a run: its records are complete and ordered before lane m's add of node m's records to
// their batches. GPU scope suffices: the adds hand the records to the lane that completes the batch,
// on this GPU, which acquires them and whose put releases them to its reader (add_to_stream).
// False when a put failed (reported).
template <class Backend>
SY_DEVICE bool end_run(const HierDispatchArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                       int32_t records, int32_t first, int32_t& count) {
    if (ptx::lane_id() == 0) {
        ptx::bulk_wait<0>();
        ptx::fence_proxy_async_global();  // the bulk stores, before the generic fence below
        ptx::fence_acq_rel_gpu();
    }
    __syncwarp();
    bool ok = true;
    if (count > 0) {
        ptx::fence_acq_rel_gpu();  // the warp's records (observed through the warp barrier) before the add
        ok = add_to_stream(port, dispatch_stream(args, op, int32_t(ptx::lane_id()), records), first, count,
                           op.sequence);
        count = 0;
    }
    return __all_sync(0xffffffffu, ok);
}

// The runs of one warp over a schedule, claimed one run ahead (ClaimAhead) from a counter of
// claims. Warp-collective.
struct SenderRuns {
    RunSchedule schedule;
    ClaimAhead claims;  // of size 1: claims are counted, the schedule says their tokens
    int32_t end = 0;    // end of the current run

    SY_DEVICE int begin() {
        if (schedule.claims() == 0) return -1;
        claims.issue();
        return next_run();
    }
    // The token after `token`, or -1 when the warp is done; `run_ended` says a new run starts.
    SY_DEVICE int after(int token, bool& run_ended) {
        run_ended = token + 1 >= end;
        return run_ended ? next_run() : token + 1;
    }

  private:
    SY_DEVICE int next_run() {
        const int64_t claim = claims.take(schedule.claims());
        if (claim >= schedule.claims()) return -1;
        end = int32_t(schedule.end(claim));
        return int(schedule.first(claim));
    }
};

template <class Backend>
SY_DEVICE SenderRuns head_runs(const HierDispatchArgs<Backend>& args, const HierOp& op, uint64_t* counters) {
    return SenderRuns{
        hier_head_schedule(op.batch_records, args.ht.common.num_tokens),
        ClaimAhead{reinterpret_cast<unsigned long long*>(counters + kCounterHierHeadItem), 1ull}};
}

template <int kClaimTokens, class Backend>
SY_DEVICE SenderRuns body_runs(const HierDispatchArgs<Backend>& args, const HierOp& op, uint64_t* counters) {
    return SenderRuns{hier_body_schedule(op.batch_records, args.ht.common.num_tokens, kClaimTokens),
                      ClaimAhead{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextItem), 1ull}};
}

// A warp's runs over a schedule and the first token of them (claimed), which the kernel may stage
// ahead, before it waits for the routing kernel (ht_detail::stage_ahead).
struct SenderStart {
    SenderRuns runs;
    int token = -1;       // -1: the warp has no tokens in the schedule
    bool staged = false;  // staged ahead into the stage of the warp's next use
};

// Claims the warp's first run of `runs`; with `stage`, stages its first token ahead (`staged`: the
// tokens the warp staged before, whose count picks the stage and its barrier's phase).
template <typename Shape, class Backend>
SY_DEVICE SenderStart start_runs(const HierDispatchArgs<Backend>& args, SenderRuns runs, uint8_t* stages,
                                 uint64_t* barriers, int32_t staged, bool stage) {
    SenderStart start{runs};
    start.token = start.runs.begin();
    if (stage && start.token >= 0) {
        const int s = StageUse::of_token(staged).stage;
        ht_detail::stage_ahead<Shape>(args.ht, start.token, stages + int64_t(s) * Shape::record().meta_offset,
                                      &barriers[s]);
        start.staged = true;
    }
    return start;
}

// send_tokens, for one warp with its two stages (`stages`, `barriers`), over the tokens of `start`;
// `staged` counts the tokens the warp staged, in this call and before (the stages alternate, and
// the barriers' phases follow from it). False when a request failed.
template <typename Shape, class Backend>
SY_DEVICE bool send_tokens(const HierDispatchArgs<Backend>& args, const HierOp& op,
                           const NetPort<Backend>& port, uint8_t* stages, uint64_t* barriers,
                           SenderStart start, int32_t& staged) {
    constexpr bool kPrefetch = !Shape::kQuantize;
    const int64_t stage_bytes = Shape::record().meta_offset;
    const uint32_t lane = ptx::lane_id();
    const int32_t records = int(lane) < op.num_nodes ? args.num_tokens_per_node[lane] : 0;
    int32_t first = 0, count = 0;
    SenderRuns& runs = start.runs;
    int token = start.token;
    HierRoute route{};
    if (token >= 0) route = load_route<Shape>(args, op, token);
    bool ok = true, ran = false;
    for (bool first_token = true; token >= 0; first_token = false) {
        const StageUse use = StageUse::of_token(staged++);  // the stage and its barrier's phase
        const int stage = use.stage;
        if (!kPrefetch || first_token) {
            if (lane == 0) ptx::bulk_wait_read<1>();  // the stores from this stage two tokens ago read it
            __syncwarp();
        }
        uint8_t* stage_at = stages + int64_t(stage) * stage_bytes;
        if (!ht_detail::stage_token<Shape>(args.ht, token, stage_at, &barriers[stage], use,
                                           first_token ? start.staged : kPrefetch)) {
            ok = false;  // reported; this warp's runs never complete their batches
            break;
        }
        if (first_token && lane == 0) trace_mark(args.ht.trace, kHtDispatchFirstStaged, true);
        bool run_ended = false;
        const int next = runs.after(token, run_ended);
        if (kPrefetch && next >= 0) {
            if (lane == 0) {
                ptx::bulk_wait_read<0>();  // the next stage was last read by the previous token's stores
                ht_detail::issue_load<Shape>(args.ht, next, stages + int64_t(stage ^ 1) * stage_bytes,
                                             &barriers[stage ^ 1]);
            }
            __syncwarp();
        }
        const HierRoute next_route = next >= 0 ? load_route<Shape>(args, op, next) : HierRoute{};
        write_forward_records<Shape>(args, op, token, route, stage_at, first, count);
        if (run_ended && !(ok = end_run(args, op, port, records, first, count))) break;
        if (run_ended && !ran && lane == 0) trace_mark(args.ht.trace, kHtDispatchFirstRun, true);
        ran = ran || run_ended;
        token = next;
        route = next_route;
    }
    if (lane == 0) ptx::bulk_wait<0>();
    __syncwarp();
    return ok;
}

// The senders' last marks, once their runs are done.
SY_DEVICE void mark_sent(const OpTrace& trace) {
    if (ptx::lane_id() == 0) {
        trace_mark(trace, kHtDispatchSent);
        trace_mark(trace, kHtDispatchFirstSent, true);
    }
}

}  // namespace hier_detail

#endif

}  // namespace switchyard::device
