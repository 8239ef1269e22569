// The hierarchical HT path's layout and accounting on the CPU (kernels/switchyard/hier/hier_layout.cuh,
// predict_ht_network_bytes): regions that do not overlap and fit the buffer, signal ids within the
// range the network check leaves free, batches that cover every stream, forward records whose
// payload and scales sit where the dispatch record's do (one stage serves both), senders' claims and
// forwarding items that cover every token and record once, and the byte prediction on a routing
// counted by hand.
#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/hier/dispatch_forward.cuh"
#include "switchyard/hier/dispatch_send.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/network.hpp"

using namespace switchyard;
using namespace switchyard::device;

namespace {

BufferCapacity capacity(int ranks, int nodes, int tokens = 4096, int hidden = 7168, int topk = 8, int experts = 256) {
    BufferCapacity c{};
    c.num_ranks = ranks;
    c.max_experts = experts;
    c.max_tokens_per_rank = tokens;
    c.max_hidden = hidden;
    c.max_topk = topk;
    c.ll_max_tokens_per_rank = 128;
    c.high_throughput = true;
    c.num_nodes = nodes;
    return c;
}

}  // namespace

SY_TEST(HierLayout, RegionsAreDisjointAndInsideTheBuffer) {
    for (auto [ranks, nodes] : {std::pair{4, 2}, {8, 2}, {8, 4}, {4, 4}, {16, 8}}) {
        const BufferLayout layout = BufferLayout::make(capacity(ranks, nodes, 512, 2048, 8, 64));
        const HierLayout& h = layout.hier;
        SY_CHECK(h.enabled());
        SY_CHECK_EQ(layout.ht_combine_bytes, int64_t(0));  // across nodes the combine uses the hier regions
        const int64_t N = nodes, T = h.max_tokens;
        std::vector<std::pair<int64_t, int64_t>> regions = {
            {0, layout.workspace.total_bytes},
            {layout.ht_dispatch_offset, layout.ht_dispatch_bytes},
            {h.counts_send_offset, N * h.counts_bytes},
            {h.counts_recv_offset, 2 * N * h.counts_bytes},
            {h.net_send_offset, N * T * h.forward_bytes},
            {h.net_recv_offset, 2 * N * T * h.forward_bytes},
            {h.stage_offset, N * T * h.combine_slots * h.combine_bytes},
            {h.partial_send_offset, N * T * h.combine_bytes},
            {h.combine_recv_offset, N * T * h.combine_bytes},
            {h.weights_send_offset, T * h.max_topk * 4},
            {h.weights_recv_offset, N * T * h.max_topk * 4},
        };
        std::sort(regions.begin(), regions.end());
        for (size_t i = 0; i + 1 < regions.size(); ++i)
            SY_CHECK_MSG(regions[i].first + regions[i].second <= regions[i + 1].first,
                         ranks << " ranks on " << nodes << " nodes: region at " << regions[i].first << " overlaps");
        SY_CHECK(regions.back().first + regions.back().second <= layout.total_bytes);
        // The last slot of each region, at the largest record, ends inside it.
        SY_CHECK(h.net_recv(1, nodes - 1, T - 1, h.forward_bytes) + h.forward_bytes <=
                 h.net_recv_offset + 2 * N * T * h.forward_bytes);
        SY_CHECK(h.stage(nodes - 1, T - 1, h.combine_slots - 1, h.combine_bytes) + h.combine_bytes ==
                 h.stage_offset + N * T * h.combine_slots * h.combine_bytes);
        // The workspace's hierarchical words, and its combine arrival chunks per source node.
        const WorkspaceLayout& ws = layout.workspace;
        SY_CHECK_EQ(ws.hier_nodes, nodes);
        SY_CHECK_EQ(ws.hier_batches, h.batches);
        SY_CHECK_EQ(ws.ht_combine_chunks, int32_t(N * ((T + 1) / 2)));
        SY_CHECK(ws.hier_offsets_offset + int64_t(ranks) * (ranks / nodes) * 4 <= ws.total_bytes);
    }
    // One node: no hierarchical regions, the direct combine region as before.
    const BufferLayout single = BufferLayout::make(capacity(8, 1, 512, 2048, 8, 64));
    SY_CHECK(!single.hier.enabled());
    SY_CHECK(single.ht_combine_bytes > 0);
    SY_CHECK_EQ(single.workspace.hier_batches, 0);
}

SY_TEST(HierLayout, SignalIdsStayBelowTheNetworkChecksAndBatchesCoverStreams) {
    for (int nodes : {2, 3, 4, 8, 16, 32}) {
        const HierSignals signals{nodes, hier_num_batches(nodes)};
        SY_CHECK(signals.batches >= 1 && signals.batches <= kHierMaxBatches);
        SY_CHECK_MSG(int32_t(signals.count()) <= kHierSignalIdLimit, nodes << " nodes use " << signals.count() << " ids");
        SY_CHECK_EQ(signals.combine_batch(nodes - 1, signals.batches - 1) + 1, signals.count());
    }
    SY_CHECK_EQ(hier_num_batches(2), kHierMaxBatches);
    for (int64_t record_bytes : {int64_t(64), int64_t(7552), int64_t(14464), int64_t(4) << 20}) {
        for (int tokens : {1, 7, 48, 640, 4096, 5000}) {
            const int B = hier_batch_records(tokens, 2, record_bytes);
            SY_CHECK(B >= 1 && hier_batches_of(tokens, B) <= hier_num_batches(2));
            for (int records : {0, 1, tokens / 2, tokens}) {
                int covered = 0;
                for (int b = 0; b < hier_batches_of(records, B); ++b) covered += hier_batch_size(records, b, B);
                SY_CHECK_EQ(covered, records);
                SY_CHECK_EQ(hier_batch_size(records, hier_batches_of(records, B), B), 0);
            }
        }
    }
}

// Batches by size (hier_layout.cuh, kHierBatchBytes): at DeepSeek-V3's shape an FP8 forward record
// makes 32 batches of 128 records (under a megabyte each), a BF16 one (or a combine partial) more
// batches of at most kHierBatchBytes; small streams keep kHierStreamBatches batches; a record
// larger than a batch travels alone, and the layout's batches bound the count.
SY_TEST(HierLayout, BatchesHoldAboutAMegabyteWithinTheLayoutsCount) {
    const int32_t G = 2, K = 8;
    const int64_t fp8 = hier_forward_record(7168, kPayloadFp8, kScaleFloat32, K, G).total_bytes;
    const int64_t bf16 = hier_forward_record(7168, kPayloadBf16, kScaleNone, K, G).total_bytes;
    const int64_t partial = RecordLayout::combine(7168, K).total_bytes;
    SY_CHECK_EQ(hier_batch_records(4096, 2, fp8), 128);
    for (int64_t record : {bf16, partial}) {
        const int B = hier_batch_records(4096, 2, record);
        SY_CHECK_MSG(B * record <= kHierBatchBytes && (B + 1) * record > kHierBatchBytes,
                     "record " << record << ": " << B << " a batch");
        SY_CHECK(hier_batches_of(4096, B) > kHierStreamBatches && hier_batches_of(4096, B) <= kHierMaxBatches);
    }
    SY_CHECK_EQ(hier_batch_records(640, 2, bf16), 20);  // 640 / 32: small streams keep their batches
    SY_CHECK_EQ(hier_batch_records(640, 2, int64_t(4) << 20), 10);  // the layout's 64 batches at most
    SY_CHECK_EQ(hier_batch_records(100, 2, int64_t(4) << 20), 2);
    SY_CHECK_EQ(hier_batch_records(0, 2, fp8), 1);
}

// The forwarders' items (hier/dispatch_forward.cuh): batch-major, at most kHierForwardRecords
// records each, never across a batch or past a stream's end, and together every record of every
// node's stream exactly once.
SY_TEST(HierLayout, ForwardItemsCoverEveryRecordOnceInBatchOrder) {
    using hier_detail::forward_item;
    for (int nodes : {2, 3, 4}) {
        for (int tokens : {1, 7, 48, 640, 4096}) {
            const int B = hier_batch_records(tokens, nodes, 7552);
            std::vector<int32_t> records(static_cast<size_t>(nodes));
            for (int n = 0; n < nodes; ++n) records[size_t(n)] = n == 1 ? 0 : tokens - (n * tokens) / 5;
            int batches = 0;
            for (int32_t r : records) batches = std::max(batches, int(hier_batches_of(r, B)));
            const int parts = hier_detail::forward_parts(B);
            SY_CHECK(parts * kHierForwardRecords >= B && (parts - 1) * kHierForwardRecords < B);
            std::vector<std::vector<int>> seen(static_cast<size_t>(nodes));
            for (int n = 0; n < nodes; ++n) seen[size_t(n)].assign(size_t(records[size_t(n)]), 0);
            int last_batch = 0;
            for (int item = 0; item < batches * nodes * parts; ++item) {
                const int node = (item / parts) % nodes;
                const hier_detail::ForwardItem it =
                    forward_item(item, nodes, parts, B, records[size_t(node)]);
                SY_CHECK_EQ(it.node, node);
                SY_CHECK(it.batch >= last_batch);
                last_batch = it.batch;
                if (it.lo >= it.hi) continue;
                SY_CHECK(it.hi - it.lo <= kHierForwardRecords);
                SY_CHECK(it.lo >= it.batch * B && it.hi <= (it.batch + 1) * B &&
                         it.hi <= records[size_t(node)]);
                for (int slot = it.lo; slot < it.hi; ++slot) ++seen[size_t(node)][size_t(slot)];
            }
            for (const auto& node_seen : seen)
                SY_CHECK(
                    std::all_of(node_seen.begin(), node_seen.end(), [](int count) { return count == 1; }));
        }
    }
}

// The senders' claims (hier/dispatch_send.cuh): the head, a token a claim, then the body in runs,
// together every token exactly once and in token order, the head the first kHierHeadBatches
// batches' worth of tokens (all of them when there are fewer).
SY_TEST(HierLayout, SenderClaimsCoverEveryTokenOnceInOrder) {
    using namespace hier_detail;
    for (int nodes : {2, 4}) {
        for (int tokens : {0, 1, 7, 48, 511, 640, 4096}) {
            for (int run : {1, 3, 8}) {
                const int B = hier_batch_records(4096, nodes, 7552);
                const RunSchedule head = hier_head_schedule(B, tokens),
                                  body = hier_body_schedule(B, tokens, run);
                const int head_tokens = std::min(tokens, kHierHeadBatches * B);
                SY_CHECK_EQ(head.num_tokens, head_tokens);
                SY_CHECK_EQ(int(head.claims()), head.num_tokens);
                int next = 0;
                for (const RunSchedule& schedule : {head, body}) {
                    for (int64_t claim = 0; claim < schedule.claims(); ++claim) {
                        SY_CHECK_EQ(int(schedule.first(claim)), next);
                        SY_CHECK(schedule.end(claim) > schedule.first(claim) &&
                                 schedule.end(claim) - schedule.first(claim) <= schedule.run);
                        next = int(schedule.end(claim));
                    }
                }
                SY_CHECK_EQ(next, tokens);
            }
        }
    }
}

SY_TEST(HierLayout, ForwardRecordsShareTheDispatchRecordsStage) {
    for (auto [payload, scale] : {std::pair{kPayloadBf16, kScaleNone}, {kPayloadFp8, kScaleFloat32},
                                   {kPayloadFp8, kScaleUe8m0}}) {
        const RecordLayout forward = hier_forward_record(7168, payload, scale, 8, 4);
        const RecordLayout dispatch = RecordLayout::dispatch(7168, payload, scale, 8);
        SY_CHECK_EQ(forward.meta_offset, dispatch.meta_offset);
        SY_CHECK_EQ(forward.meta_bytes, int64_t(4 * HierForwardMeta::words(8, 4)));
        SY_CHECK_EQ(forward.total_bytes % 32, int64_t(0));
    }
    const HierForwardMeta meta{8, 4};
    SY_CHECK_EQ(meta.slot(3) + 1, meta.total());
    const HierCounts counts{4, 2};
    SY_CHECK_EQ(counts.records() + 1, counts.words());
}

SY_TEST(HierLayout, PredictedNetworkBytesCountEachTokenOncePerOtherNode) {
    // 2 nodes x 2 ranks, 8 experts (2 per rank, 4 per node), top-2. Rank 0's tokens:
    //   t0 -> experts 0, 5 (nodes 0, 1)   t1 -> 6, 7 (node 1 twice)   t2 -> 1, -1 (node 0)
    //   t3 -> -1, -1 (nowhere)
    // so rank 0 sends 2 records to node 1 (its rail peer there: rank 2) and nothing to node 0.
    HtNetworkShape shape;
    shape.num_ranks = 4;
    shape.num_nodes = 2;
    shape.num_experts = 8;
    shape.hidden = 256;
    shape.topk = 2;
    const std::vector<std::vector<int64_t>> idx = {
        {0, 5, 6, 7, 1, -1, -1, -1},  // rank 0
        {4, -1},                      // rank 1
        {0, 1, 2, -1, 7, -1},         // rank 2: t0 -> node 0, t1 -> node 0, t2 -> node 1
        {},                           // rank 3: no tokens
    };
    const uint64_t forward = uint64_t(hier_forward_record(256, kPayloadBf16, kScaleNone, 2, 2).total_bytes);
    const uint64_t counts = uint64_t(HierCounts{2, 2}.bytes());
    const uint64_t partial = uint64_t(RecordLayout::combine(256, 2).total_bytes);
    auto bytes = predict_ht_network_bytes(shape, idx, 0, HtNetworkOp::kDispatch);
    SY_CHECK((bytes == std::vector<uint64_t>{0, 0, counts + 2 * forward, 0}));
    bytes = predict_ht_network_bytes(shape, idx, 2, HtNetworkOp::kDispatch);
    SY_CHECK((bytes == std::vector<uint64_t>{counts + 2 * forward, 0, 0, 0}));
    bytes = predict_ht_network_bytes(shape, idx, 3, HtNetworkOp::kDispatch);
    SY_CHECK((bytes == std::vector<uint64_t>{0, counts, 0, 0}));
    // Combine: rank 0 forwarded rank 2's two tokens that go to node 0, so two partials go back to
    // rank 2; rank 2 forwarded rank 0's two tokens of node 1.
    bytes = predict_ht_network_bytes(shape, idx, 0, HtNetworkOp::kCombine);
    SY_CHECK((bytes == std::vector<uint64_t>{0, 0, 2 * partial, 0}));
    bytes = predict_ht_network_bytes(shape, idx, 2, HtNetworkOp::kCombineWithHomeWeights);
    SY_CHECK((bytes == std::vector<uint64_t>{2 * partial + 3 * 2 * 4, 0, 0, 0}));
    // fp8 records with fp32 scales are smaller.
    shape.records = ScaleFormat::kFloat32;
    bytes = predict_ht_network_bytes(shape, idx, 0, HtNetworkOp::kDispatch);
    SY_CHECK_EQ(bytes[2], counts + 2 * uint64_t(hier_forward_record(256, kPayloadFp8, kScaleFloat32, 2, 2).total_bytes));
    shape.num_nodes = 3;
    SY_CHECK_THROWS(predict_ht_network_bytes(shape, idx, 0, HtNetworkOp::kDispatch), InvalidArgument);
}

SY_TEST_MAIN()
