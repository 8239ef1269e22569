// The hierarchical HT path's layout (ranks on several nodes; docs/architecture.md, "HT across
// nodes"): the regions of the symmetric buffer it adds, the streams and batches a source sends to
// each node, the forward record, the counts block and the network signal ids. Host (sizing, byte
// predictions) and device (addressing) use these structs, so they agree on every offset.
//
// Streams. The tokens source rank s sends to node m form a stream in token order: token t is record
// i_m(t) = the number of s's earlier tokens that go to m (the routing kernel's token_node_slot).
// The stream is cut into batches of `batch_records` records; a batch is the unit of the network
// (one put with one signal) and of the forwarders' waits.
//
// Regions (all ranks alike, T = T_max, N nodes, C = combine slots per record):
//   counts_send    [N] counts blocks                source of the counts puts to each node
//   counts_recv    [2][N] counts blocks             from the rail peer on each node, per parity
//   net_send       [N][T] forward records           source of the record puts to each node
//   net_recv       [2][N][T] forward records        from the rail peer on each node (own node: written
//                                                   locally by this rank's senders), per parity
//   stage          [N][T][C] combine records        contributions of this node's ranks to the tokens
//                                                   this rank forwarded (combine, over NVLink)
//   partial_send   [N][T] combine records           source of the partial puts to each home
//   combine_recv   [N][T] combine records           partials from the rank that forwarded into each node
//   weights_send   [T][K] fp32                      the home's combine weights, source of their puts
//   weights_recv   [N][T][K] fp32                   the combine weights of the homes on this rail
// Records are laid out at the op's record size (at most the capacity's), stream slot by stream slot.
// The dispatch regions that the network writes have two copies, used by alternate dispatches (the
// parity of the dispatch count): a rail peer may be one dispatch ahead of this rank, never two
// (its next dispatch waits for this rank's counts), so neither its records nor its signals can
// land on a copy this rank still reads.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

constexpr int32_t kHierMaxNodes = 32;     // one lane per node in the senders' bookkeeping
// Batches of a stream. A batch is one put and one signal; on the emulated network each costs the
// engine's host thread a call for its copy and one for its signal, so batches are large: about a
// megabyte (kHierBatchBytes) takes the wire much longer than its calls take the host thread. A
// batch is not larger than that: the emulated network copies in chunks of 1 MiB and raises a
// signal with the last chunk holding its batch, so a larger batch lands its signal a chunk later
// and the last batch, which the forwarders take only once it is whole, ends the op later (BF16
// records at 4,096 tokens, 64 a batch instead of 128: dispatch 1365 vs 1380 us, combine 1391 vs
// 1398, decisions 2026-12-02). Nor much smaller: the engine then merges two batches into one copy
// and their signals land together, late (FP8 at 64 records: 794 vs 752 us). And at least
// kHierStreamBatches a stream where records are small: the first put waits for the first batch.
constexpr int64_t kHierBatchBytes = int64_t(15) << 16;  // 960 KiB
constexpr int32_t kHierStreamBatches = 32;
constexpr int32_t kHierMaxBatches = 64;  // the layout's most (fewer with many nodes: signal ids)
constexpr int32_t kHierContext = 0;       // the network context every hierarchical request uses
// Network counters (on kHierContext) of the puts whose sources the next op of the kind rewrites:
// the dispatch's (net_send, counts_send) and the combine's (partial_send, weights_send).
constexpr uint32_t kHierDispatchSourceCounter = 0;
constexpr uint32_t kHierCombineSourceCounter = 1;
// Signal ids the HT kernels may use: those below the barrier's and the LL kernels' (under the
// network check's reserved ones; transport/net_types.cuh), so no id is raised on two contexts.
constexpr int32_t kHierSignalIdLimit = int32_t(kNetBarrierSignalBase);

// Batches per stream: as many as the signal ids allow (4 N + 3 N batches ids), at most kHierMaxBatches.
SY_HOST_DEVICE constexpr int32_t hier_num_batches(int32_t num_nodes) {
    const int32_t fit = (kHierSignalIdLimit / (num_nodes > 0 ? num_nodes : 1) - 4) / 3;
    return fit > kHierMaxBatches ? kHierMaxBatches : (fit < 1 ? 1 : fit);
}
// Records per batch of an op whose records are `record_bytes`: batches of at most kHierBatchBytes,
// at least kHierStreamBatches a stream of T_max records when that keeps them smaller, and never more
// batches than the layout holds.
SY_HOST_DEVICE constexpr int32_t hier_batch_records(int32_t max_tokens, int32_t num_nodes, int64_t record_bytes) {
    if (max_tokens <= 0) return 1;
    const int32_t batches = hier_num_batches(num_nodes);
    const int64_t fewest = (max_tokens + batches - 1) / batches;  // the layout's limit
    const int64_t by_count = (max_tokens + kHierStreamBatches - 1) / kHierStreamBatches;
    const int64_t by_bytes = max64(1, kHierBatchBytes / max64(record_bytes, 1));
    return int32_t(max64(fewest, min64(by_count, by_bytes)));
}
// Records of batch `batch` in a stream of `records`.
SY_HOST_DEVICE constexpr int32_t hier_batch_size(int32_t records, int32_t batch, int32_t batch_records) {
    const int32_t left = records - batch * batch_records;
    return left <= 0 ? 0 : (left < batch_records ? left : batch_records);
}
// Batches holding a stream of `records`.
SY_HOST_DEVICE constexpr int32_t hier_batches_of(int32_t records, int32_t batch_records) {
    return records > 0 ? (records + batch_records - 1) / batch_records : 0;
}

// Network signal ids at a receiving rank, each raised by the rail peer on node `node` only
// (transport/net.cuh, contract 6), all on kHierContext:
//   counts[parity][node]            a counts block landed (once per dispatch of that parity)
//   combine_entry[node]             the peer entered a combine that does not follow a dispatch
//   home_weights[node]              the home's combine weights landed
//   dispatch_batch[parity][node][b] batch b of the peer's record stream to this node landed
//   combine_batch[node][b]          batch b of the partials from node `node` landed (at the home)
struct HierSignals {
    int32_t num_nodes, batches;
    SY_HOST_DEVICE uint32_t counts(int32_t parity, int32_t node) const { return uint32_t(parity * num_nodes + node); }
    SY_HOST_DEVICE uint32_t combine_entry(int32_t node) const { return uint32_t(2 * num_nodes + node); }
    SY_HOST_DEVICE uint32_t home_weights(int32_t node) const { return uint32_t(3 * num_nodes + node); }
    SY_HOST_DEVICE uint32_t dispatch_batch(int32_t parity, int32_t node, int32_t batch) const {
        return uint32_t(4 * num_nodes + (parity * num_nodes + node) * batches + batch);
    }
    SY_HOST_DEVICE uint32_t combine_batch(int32_t node, int32_t batch) const {
        return uint32_t(4 * num_nodes + 2 * num_nodes * batches + node * batches + batch);
    }
    SY_HOST_DEVICE uint32_t count() const { return uint32_t(4 * num_nodes + 3 * num_nodes * batches); }
};

// The metadata of a forward record (int32 words): what the forwarder on the destination node needs
// to write the token's final record at each rank of its node, and what its combine needs later.
struct HierForwardMeta {
    int32_t topk, ranks_per_node;
    SY_HOST_DEVICE static int32_t words(int32_t topk, int32_t ranks_per_node) {
        return 1 + 3 * topk + ranks_per_node;
    }
    SY_HOST_DEVICE int32_t token() const { return 0; }                        // source token t
    SY_HOST_DEVICE int32_t expert(int32_t k) const { return 1 + k; }         // global expert ids (-1)
    SY_HOST_DEVICE int32_t weight(int32_t k) const { return 1 + topk + k; }  // fp32 bits (0: none)
    SY_HOST_DEVICE int32_t position(int32_t k) const { return 1 + 2 * topk + k; }  // among s's rows of it
    SY_HOST_DEVICE int32_t slot(int32_t local) const { return 1 + 3 * topk + local; }  // at each node rank
    SY_HOST_DEVICE int32_t total() const { return words(topk, ranks_per_node); }
};

// A forward record: the dispatch record's payload and scales (the same sections, so one shared-
// memory stage serves both), then HierForwardMeta.
SY_HOST_DEVICE RecordLayout hier_forward_record(int64_t hidden, int32_t payload_kind, int32_t scale_kind,
                                                int32_t topk, int32_t ranks_per_node) {
    const int64_t element = payload_kind == kPayloadFp8 ? 1 : 2;
    return RecordLayout::make(hidden * element, RecordLayout::scale_words(hidden, scale_kind),
                              HierForwardMeta::words(topk, ranks_per_node));
}

// A counts block (int32 words): what source s sends to node m before its records.
struct HierCounts {
    int32_t ranks_per_node, local_experts;
    SY_HOST_DEVICE int32_t rows_to(int32_t local) const { return local; }  // rows to rank (m, local)
    SY_HOST_DEVICE int32_t expert_rows(int32_t expert_in_node) const { return ranks_per_node + expert_in_node; }
    SY_HOST_DEVICE int32_t records() const { return ranks_per_node * (1 + local_experts); }  // tokens to m
    SY_HOST_DEVICE int32_t words() const { return records() + 1; }
    SY_HOST_DEVICE int64_t bytes() const { return align_up(int64_t(words()) * 4, 16); }
};

struct HierLayout {
    int32_t num_nodes = 1, ranks_per_node = 1;
    int32_t max_tokens = 0;     // T_max: stream slots per source node
    int32_t max_topk = 0;
    int32_t batches = 0;        // the most a stream has: an op's own follow from its record size
    int32_t combine_slots = 0;  // C: contributions per stream slot (ranks of a node, or top-k)
    int64_t counts_bytes = 0, forward_bytes = 0, combine_bytes = 0;  // capacities of one block / record
    int64_t counts_send_offset = 0, counts_recv_offset = 0;
    int64_t net_send_offset = 0, net_recv_offset = 0;
    int64_t stage_offset = 0, partial_send_offset = 0, combine_recv_offset = 0;
    int64_t weights_send_offset = 0, weights_recv_offset = 0;
    int64_t total_bytes = 0;

    SY_HOST_DEVICE bool enabled() const { return num_nodes > 1; }
    SY_HOST_DEVICE HierSignals signals() const { return {num_nodes, batches}; }

    // Regions from `offset` on (aligned to `alignment`), for these capacities.
    SY_HOST_DEVICE static HierLayout make(int32_t num_nodes, int32_t ranks_per_node, int32_t max_tokens,
                                          int64_t max_hidden, int32_t max_topk, int32_t max_local_experts,
                                          int64_t offset, int64_t alignment) {
        HierLayout h;
        h.num_nodes = num_nodes;
        h.ranks_per_node = ranks_per_node;
        h.max_tokens = max_tokens;
        h.max_topk = max_topk;
        h.batches = hier_num_batches(num_nodes);
        h.combine_slots = int32_t(max64(ranks_per_node, max_topk));
        h.counts_bytes = HierCounts{ranks_per_node, max_local_experts}.bytes();
        h.forward_bytes = max64(hier_forward_record(max_hidden, kPayloadBf16, kScaleNone, max_topk, ranks_per_node).total_bytes,
                                hier_forward_record(max_hidden, kPayloadFp8, kScaleFloat32, max_topk, ranks_per_node).total_bytes);
        h.combine_bytes = RecordLayout::combine(max_hidden, max_topk).total_bytes;
        const int64_t N = num_nodes, T = max_tokens;
        auto take = [&](int64_t bytes) {
            const int64_t at = align_up(offset, alignment);
            offset = at + bytes;
            return at;
        };
        const int64_t start = align_up(offset, alignment);
        h.counts_send_offset = take(N * h.counts_bytes);
        h.counts_recv_offset = take(2 * N * h.counts_bytes);
        h.net_send_offset = take(N * T * h.forward_bytes);
        h.net_recv_offset = take(2 * N * T * h.forward_bytes);
        h.stage_offset = take(N * T * h.combine_slots * h.combine_bytes);
        h.partial_send_offset = take(N * T * h.combine_bytes);
        h.combine_recv_offset = take(N * T * h.combine_bytes);
        h.weights_send_offset = take(T * max_topk * 4);
        h.weights_recv_offset = take(N * T * max_topk * 4);
        h.total_bytes = align_up(offset, alignment) - start;
        return h;
    }

    // Byte offsets in a rank's window; `record` is the op's record size of that region.
    SY_HOST_DEVICE int64_t counts_send(int32_t node) const { return counts_send_offset + node * counts_bytes; }
    SY_HOST_DEVICE int64_t counts_recv(int32_t parity, int32_t node) const {
        return counts_recv_offset + (int64_t(parity) * num_nodes + node) * counts_bytes;
    }
    SY_HOST_DEVICE int64_t net_send(int32_t node, int64_t slot, int64_t record) const {
        return net_send_offset + (int64_t(node) * max_tokens + slot) * record;
    }
    SY_HOST_DEVICE int64_t net_recv(int32_t parity, int32_t node, int64_t slot, int64_t record) const {
        return net_recv_offset + ((int64_t(parity) * num_nodes + node) * max_tokens + slot) * record;
    }
    SY_HOST_DEVICE int64_t stage(int32_t node, int64_t slot, int32_t contribution, int64_t record) const {
        return stage_offset + ((int64_t(node) * max_tokens + slot) * combine_slots + contribution) * record;
    }
    SY_HOST_DEVICE int64_t partial_send(int32_t node, int64_t slot, int64_t record) const {
        return partial_send_offset + (int64_t(node) * max_tokens + slot) * record;
    }
    SY_HOST_DEVICE int64_t combine_recv(int32_t node, int64_t slot, int64_t record) const {
        return combine_recv_offset + (int64_t(node) * max_tokens + slot) * record;
    }
    SY_HOST_DEVICE int64_t weights_send(int64_t token, int32_t topk) const {
        return weights_send_offset + token * topk * 4;
    }
    SY_HOST_DEVICE int64_t weights_recv(int32_t node, int64_t token, int32_t topk) const {
        return weights_recv_offset + (int64_t(node) * max_tokens + token) * topk * 4;
    }
};

}  // namespace switchyard::device
