// Hierarchical HT combine, the reducing roles (hier/combine.cuh composes the roles). Warps claim
// items in one order: first the node items, then the home items, so a warp waits on a home item
// only once every node item has a warp.
//
//  reduce_node_chunk  at a forwarder, for the tokens it forwarded (stream slots of one source node,
//                     kHtCombineChunkTokens at a time): wait until this node's ranks' contributions
//                     are in (the arrival counters; how many from each rank follows from the forward
//                     metadata the dispatch kept), then the node partial of each token: fp32 over the
//                     contributions in the single-node order restricted to this node (rank-major and
//                     hierarchical: ranks ascending; flat: k ascending, weighted with the home's
//                     weights), rounded to bf16 once, with the weight of each k this node owns; into
//                     the partial stream back to the home (one put per batch, hier_common.cuh), or
//                     straight into the home's own region when the home is this rank;
//  reduce_home_chunk  at the home, for kHtCombineChunkTokens of its tokens: wait for the batches
//                     holding the token's partial from each node it went to, then bias0 + bias1 + the
//                     partials over nodes ascending, in fp32, rounded to bf16 once;
//                     combined_topk_weights from the partial of the node owning each expert.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/hier/combine_send.cuh"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_common.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ht/combine_reduce.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace hier_detail {

// One warp: out = bf16(bias0 + bias1 + sum over the set bits i of `rows` ascending of row_at(i),
// each weighted as fmaf(weight_at(i), y, acc) when `weighted`), in fp32, bf16 rows of kHidden.
template <int kHidden, typename RowAt, typename WeightAt>
SY_DEVICE void sum_rows(uint32_t rows, RowAt row_at, WeightAt weight_at, bool weighted, const uint16_t* bias0,
                        const uint16_t* bias1, uint8_t* out) {
    constexpr int kChunks = 4;
    for (int group = int(ptx::lane_id()) * 8; group < kHidden; group += 256 * kChunks) {
        float acc[kChunks][8];
#pragma unroll
        for (int u = 0; u < kChunks; ++u)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[u][i] = 0.0f;
        auto add = [&](const uint8_t* bytes, bool use_weight, float w) {
            uint4 raw[kChunks];
#pragma unroll
            for (int u = 0; u < kChunks; ++u) {
                const int channel = group + u * 256;
                raw[u] = channel < kHidden ? *reinterpret_cast<const uint4*>(bytes + int64_t(channel) * 2)
                                           : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < kChunks; ++u) {
                float v[8];
                ht_detail::unpack8(raw[u], v);
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[u][i] = use_weight ? fmaf(w, v[i], acc[u][i]) : acc[u][i] + v[i];
            }
        };
        if (bias0) add(reinterpret_cast<const uint8_t*>(bias0), false, 1.0f);
        if (bias1) add(reinterpret_cast<const uint8_t*>(bias1), false, 1.0f);
        for (uint32_t rest = rows; rest != 0; rest &= rest - 1) {
            const int i = __ffs(rest) - 1;
            add(row_at(i), weighted, weighted ? weight_at(i) : 1.0f);
        }
#pragma unroll
        for (int u = 0; u < kChunks; ++u) {
            const int channel = group + u * 256;
            if (channel < kHidden) *reinterpret_cast<uint4*>(out + int64_t(channel) * 2) = ht_detail::pack8(acc[u]);
        }
    }
}

// Node `node`'s partial stream of this op, as this forwarder sends it back (hier_common.cuh).
template <class Backend>
SY_DEVICE HierStream partial_stream(const HierCombineArgs<Backend>& args, const HierOp& op, int32_t node,
                                    int64_t record_bytes) {
    const HtCommon& c = args.ht.common;
    const HierLayout& h = c.layout.hier;
    const WorkspaceLayout& ws = c.layout.workspace;
    HierStream stream;
    stream.staged = ws.hier_staged(c.local_base, 1, node, 0);
    stream.ready = node == op.node ? ws.hier_ready(c.local_base, 1, 0) : nullptr;
    stream.src_offset = uint64_t(h.partial_send(node, 0, record_bytes));
    stream.dst_offset = uint64_t(h.combine_recv(op.node, 0, record_bytes));
    stream.record_bytes = record_bytes;
    stream.first_signal = h.signals().combine_batch(op.node, 0);
    stream.node = node;
    stream.records = args.forward_counts[node];
    stream.batch_records = op.batch_records;
    stream.trace = args.ht.trace;
    stream.first_put_mark = kHtCombineFirstPut;
    stream.source_counter = kHierCombineSourceCounter;
    return stream;
}

// The node partial of stream slot `slot` of source node `node` (contributions arrived).
template <typename Shape, class Backend>
SY_DEVICE void reduce_slot(const HierCombineArgs<Backend>& args, const HierOp& op, int32_t node, int32_t slot) {
    constexpr int kTopk = Shape::kTopk;
    constexpr bool kFlat = Shape::kMode == kHtCombineExpertFlat;
    const HtCombineArgs& ht = args.ht;
    const HtCommon& c = ht.common;
    const HierLayout& h = c.layout.hier;
    const RecordLayout r = Shape::record();
    const HierForwardMeta meta{kTopk, op.ranks_per_node};
    const int lane = int(ptx::lane_id());
    const int32_t* words = args.forward_meta + (int64_t(node) * c.max_tokens + slot) * meta.total();
    const int32_t token = words[meta.token()];
    const int32_t experts_per_node = c.local_experts * op.ranks_per_node;
    const int32_t expert = lane < kTopk ? words[meta.expert(lane)] : -1;
    const bool here = expert >= 0 && expert / experts_per_node == op.node;  // lane k: k owned in this node
    // Contributions in the node's order: ranks ascending (their slots), or k ascending (flat).
    const uint32_t rows = kFlat ? __ballot_sync(0xffffffffu, here)
                                : __ballot_sync(0xffffffffu, lane < op.ranks_per_node && words[meta.slot(lane)] >= 0);
    float weight = 1.0f;  // lane k: w_k of a flat weighted combine (the home's weights)
    if (kFlat && ht.weighted && here)
        weight = node == op.node ? ht.home_weights[int64_t(token) * ht.home_weights_stride + lane]
                                 : reinterpret_cast<const float*>(c.local_base + h.weights_recv(node, token, kTopk))[lane];
    auto row_at = [&](int i) { return c.local_base + h.stage(node, slot, i, r.total_bytes); };
    auto weight_at = [&](int i) { return __shfl_sync(0xffffffffu, weight, i); };
    uint8_t* out = c.local_base + (node == op.node ? h.combine_recv(op.node, slot, r.total_bytes)
                                                   : h.partial_send(node, slot, r.total_bytes));
    // (weight_at shuffles: every lane runs sum_rows' loop in step, the warp converged.)
    sum_rows<Shape::kHidden>(rows, row_at, weight_at, kFlat && ht.weighted, nullptr, nullptr, out);
    if (lane < kTopk) {
        float w = 0.0f;  // the weight the owner of expert k sent back with its row
        if (here) {
            const int contribution = kFlat ? lane : (expert / c.local_experts) % op.ranks_per_node;
            w = reinterpret_cast<const float*>(row_at(contribution) + r.meta_offset)[lane];
        }
        reinterpret_cast<float*>(out + r.meta_offset)[lane] = w;
    }
}

// Waits (lane g: node rank g) until the contributions to slots [first, last) of source node
// `node` are in, and books them. False when a wait failed.
template <typename Shape, class Backend>
SY_DEVICE bool wait_for_contributions(const HierCombineArgs<Backend>& args, const HierOp& op, int32_t node,
                                      int32_t first, int32_t last) {
    constexpr int kTopk = Shape::kTopk;
    const HtCommon& c = args.ht.common;
    const HierForwardMeta meta{kTopk, op.ranks_per_node};
    const int g = int(ptx::lane_id());
    bool ok = true;
    if (g < op.ranks_per_node) {
        const int32_t q = op.rank_of(op.node, g);
        uint32_t expected = 0;
        for (int32_t slot = first; slot < last; ++slot) {
            const int32_t* words = args.forward_meta + (int64_t(node) * c.max_tokens + slot) * meta.total();
            if constexpr (Shape::kMode == kHtCombineExpertFlat) {
                for (int k = 0; k < kTopk; ++k) expected += words[meta.expert(k)] >= 0 && words[meta.expert(k)] / c.local_experts == q;
            } else {
                expected += words[meta.slot(g)] >= 0;
            }
        }
        if (expected > 0) {
            const int32_t chunk = arrival_key(c, node, first) / kHtCombineChunkTokens;
            uint64_t* consumed = c.layout.workspace.ht_combine_consumed(c.local_base, chunk, q);
            const uint64_t target = *consumed + expected;
            if (wait_for_sequence(c.layout.workspace.ht_combine_arrival(c.local_base, chunk, q), target, c.diagnostics,
                                  kPhaseHtCombine, q, node_peer_details(c, q)))
                *consumed = target;
            else
                ok = false;
        }
    }
    __syncwarp();  // the acquiring lanes' view orders the warp's reads of the stage
    return __all_sync(0xffffffffu, ok);
}

// A node item: chunk `chunk` of source node `node`'s stream (`records` slots). `put`: this lane
// issued a put. False when a wait or a put failed.
template <typename Shape, class Backend>
SY_DEVICE bool reduce_node_chunk(const HierCombineArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                                 int32_t node, int32_t chunk, int32_t records, uint64_t weight_rounds) {
    const HtCommon& c = args.ht.common;
    const int32_t first = chunk * kHtCombineChunkTokens;
    const int32_t last = min(first + kHtCombineChunkTokens, records);
    if (Shape::kMode == kHtCombineExpertFlat && args.ht.weighted && node != op.node) {
        int arrived = 1;  // the home's weights (a put at the start of its combine)
        if (ptx::lane_id() == 0)
            arrived = wait_signal_exact(port, c.diagnostics, c.layout.hier.signals().home_weights(node),
                                        weight_rounds + 1, node, kPhaseHierCombine);
        __syncwarp();
        if (!__shfl_sync(0xffffffffu, arrived, 0)) return false;
    }
    if (!wait_for_contributions<Shape>(args, op, node, first, last)) return false;
    for (int32_t slot = first; slot < last; ++slot) reduce_slot<Shape>(args, op, node, slot);
    __syncwarp();
    bool ok = true;
    if (ptx::lane_id() == 0) {
        // The warp's partials (observed through the warp barrier) before the add; GPU scope, as the
        // dispatch's senders (end_run): the batch's completing lane acquires them, its put releases.
        ptx::fence_acq_rel_gpu();
        ok = add_to_stream(port, partial_stream(args, op, node, Shape::record().total_bytes), first, last - first,
                           op.sequence);
    }
    return __shfl_sync(0xffffffffu, int(ok), 0) != 0;
}

// Lane m waits for the batch holding the token's partial from node m (`slot`: its stream slot,
// -1 when the token did not go there); `waited` caches the last batch it waited for.
template <class Backend>
SY_DEVICE bool wait_for_partial(const HierCombineArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                                int32_t slot, int32_t& waited) {
    const HtCommon& c = args.ht.common;
    const WorkspaceLayout& ws = c.layout.workspace;
    const int32_t node = int32_t(ptx::lane_id());
    if (slot < 0 || slot / op.batch_records == waited) return true;
    const int32_t batch = slot / op.batch_records;
    const bool arrived =
        node == op.node
            ? wait_for_sequence(ws.hier_ready(c.local_base, 1, batch), op.sequence, c.diagnostics, kPhaseHtCombine, c.rank)
            : wait_signal_exact(port, c.diagnostics, c.layout.hier.signals().combine_batch(node, batch),
                                *ws.hier_consumed(c.local_base, 2, node, batch) + 1, node, kPhaseHierCombine);
    if (arrived) waited = batch;
    if (arrived && node != op.node) {
        trace_mark(args.ht.trace, kHtCombineFirstLanded, true);
        trace_mark(args.ht.trace, kHtCombineLastLanded);
    }
    return arrived;
}

// A home item: tokens [chunk * kHtCombineChunkTokens, ...). False when a wait failed.
template <typename Shape, class Backend>
SY_DEVICE bool reduce_home_chunk(const HierCombineArgs<Backend>& args, const HierOp& op, const NetPort<Backend>& port,
                                 int32_t chunk, int32_t& waited) {
    constexpr int kTopk = Shape::kTopk;
    const HtCombineArgs& ht = args.ht;
    const HtCommon& c = ht.common;
    const HierLayout& h = c.layout.hier;
    const RecordLayout r = Shape::record();
    const int lane = int(ptx::lane_id());
    const int32_t last = min((chunk + 1) * kHtCombineChunkTokens, c.num_tokens);
    for (int32_t token = chunk * kHtCombineChunkTokens; token < last; ++token) {
        const int32_t slot = lane < op.num_nodes ? args.token_node_slot[int64_t(token) * op.num_nodes + lane] : -1;
        const bool ok = lane >= op.num_nodes || wait_for_partial(args, op, port, slot, waited);
        __syncwarp();  // the acquiring lanes' view orders the warp's reads of the partials
        if (!__all_sync(0xffffffffu, ok)) return false;
        auto row_at = [&](int node) {
            return c.local_base + h.combine_recv(node, __shfl_sync(0xffffffffu, slot, node), r.total_bytes);
        };
        sum_rows<Shape::kHidden>(
            __ballot_sync(0xffffffffu, slot >= 0), row_at, [](int) { return 1.0f; }, false,
            ht.bias0 ? ht.bias0 + int64_t(token) * ht.bias0_stride : nullptr,
            ht.bias1 ? ht.bias1 + int64_t(token) * ht.bias1_stride : nullptr,
            reinterpret_cast<uint8_t*>(ht.out + int64_t(token) * ht.out_stride));
        if (ht.combined_weights) {
            const int32_t expert = lane < kTopk ? ht.topk_idx[int64_t(token) * kTopk + lane] : -1;
            const int32_t node = expert >= 0 ? expert / (c.local_experts * op.ranks_per_node) : 0;
            const uint8_t* partial = row_at(node);  // (every lane shuffles: converged)
            if (lane < kTopk)
                ht.combined_weights[int64_t(token) * kTopk + lane] =
                    expert >= 0 ? reinterpret_cast<const float*>(partial + r.meta_offset)[lane] : 0.0f;
        }
    }
    return true;
}

}  // namespace hier_detail

#endif

}  // namespace switchyard::device
