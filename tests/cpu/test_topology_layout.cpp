// Pure host logic of buffer creation: grouping ranks into nodes and GPUs, and the buffer's memory
// layout (sizes and non-overlapping regions) for the shapes the issues name.
#include <vector>

#include "comm/topology.hpp"
#include "common/testing.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/ht/dispatch.cuh"
#include "switchyard/routing/routing_kernel.cuh"

using namespace switchyard;

namespace {

std::vector<RankPlacement> placements(std::initializer_list<std::tuple<uint64_t, int, const char*>> ranks) {
    std::vector<RankPlacement> out;
    int rank = 0;
    for (const auto& [host, process, bus] : ranks) {
        RankPlacement p;
        p.rank = rank++;
        p.host_id = host;
        p.process_id = process;
        p.gpu_bus_id = bus;
        out.push_back(p);
    }
    return out;
}

}  // namespace

SY_TEST(Topology, HostsBecomeNodesAndGpusAreShared) {
    // 8 ranks: two hosts; on host 1, ranks 0-3 share GPU A (one process), 4-5 GPU B; host 2 has 6-7.
    auto p = placements({{1, 10, "A"},
                         {1, 10, "A"},
                         {1, 10, "A"},
                         {1, 10, "A"},
                         {1, 11, "B"},
                         {1, 11, "B"},
                         {2, 20, "A"},
                         {2, 20, "A"}});
    const Topology t = comm::make_topology(2, p, 0);
    SY_CHECK_EQ(t.num_nodes, 2);
    SY_CHECK(!t.emulated_nodes);
    SY_CHECK_EQ(t.node_of_rank[6], 1);
    SY_CHECK_EQ(t.ranks_on_my_gpu, 4);
    SY_CHECK_EQ(t.index_on_my_gpu, 2);
    SY_CHECK_EQ(t.num_gpus(), 3);  // A and B on host 1, A on host 2 (same bus id, other host)
    SY_CHECK(t.same_process(0) && !t.same_process(4) && !t.same_host(6));
    SY_CHECK(!t.same_gpu(6));  // same bus id on another host is another GPU
}

SY_TEST(Topology, EmulatedNodesSplitOneHost) {
    auto p = placements({{1, 10, "A"}, {1, 10, "A"}, {1, 10, "B"}, {1, 10, "B"}});
    const Topology t = comm::make_topology(3, p, 2);
    SY_CHECK(t.emulated_nodes);
    SY_CHECK_EQ(t.num_nodes, 2);
    SY_CHECK_EQ(t.node_of_rank[1], 0);
    SY_CHECK_EQ(t.node_of_rank[2], 1);
    SY_CHECK_THROWS_WITH(comm::make_topology(0, p, 3), InvalidArgument,
                         "cannot split 4 ranks into 3 emulated nodes");
}

SY_TEST(BufferLayout, RegionsAreOrderedAlignedAndSized) {
    device::BufferCapacity capacity{};
    capacity.num_ranks = 2;
    capacity.max_experts = 256;
    capacity.max_tokens_per_rank = 4096;
    capacity.max_hidden = 7168;
    capacity.max_topk = 8;
    capacity.ll_max_tokens_per_rank = 128;
    capacity.high_throughput = true;
    capacity.low_latency = true;
    const auto layout = device::BufferLayout::make(capacity);
    // Dispatch record: bf16 payload 14336 + metadata (2 + 3K = 26 words -> 128 bytes) = 14464;
    // fp8 + fp32 scales: 7168 + 224 (-> 224) + 128 = 7520. The larger one sizes the region.
    SY_CHECK_EQ(device::RecordLayout::max_dispatch_bytes(7168, 8), int64_t(14464));
    SY_CHECK_EQ(layout.ht_dispatch_bytes, int64_t(2) * 4096 * 14464);
    // Combine record: bf16 payload 14336 + 8 weights (32 bytes) = 14368, rounded up to whole
    // 128-byte lines: 14464; K slots of T_max rows.
    SY_CHECK_EQ(layout.ht_combine_bytes, int64_t(8) * 4096 * 14464);
    SY_CHECK(layout.workspace.total_bytes <= layout.ht_dispatch_offset);
    SY_CHECK(layout.ht_dispatch_offset + layout.ht_dispatch_bytes <= layout.ht_combine_offset);
    SY_CHECK(layout.ht_combine_offset + layout.ht_combine_bytes <= layout.ll_offset);
    SY_CHECK(layout.ll_offset + 2 * layout.ll_set_bytes <= layout.total_bytes);
    SY_CHECK_EQ(layout.total_bytes % (2 << 20), int64_t(0));
    SY_CHECK_EQ(layout.ht_dispatch_offset % 4096, int64_t(0));
    // Workspace signal areas do not overlap.
    const auto& w = layout.workspace;
    SY_CHECK(w.barrier_signals_offset + 8 * 2 <= w.ht_notify_offset);
    SY_CHECK(w.ht_notify_offset + w.ht_notify_entry_bytes * 2 <= w.ht_dispatch_done_offset);
    SY_CHECK(w.ht_combine_done_offset + 16 <= w.ll_signals_offset);
    // Combine arrival counters, consumed tallies ([chunks][R] each) and ready flags ([chunks])
    // follow the LL signals: 4,096 tokens in chunks of 2 = 2,048 chunks.
    static_assert(device::kHtCombineChunkTokens == 2, "the figures below assume chunks of 2 tokens");
    SY_CHECK_EQ(w.ht_combine_chunks, 2048);
    SY_CHECK(w.ll_signals_offset + w.ll_signals_bytes <= w.ht_combine_arrivals_offset);
    SY_CHECK(w.ht_combine_arrivals_offset + 2048 * 2 * 8 <= w.ht_combine_consumed_offset);
    SY_CHECK(w.ht_combine_consumed_offset + 2048 * 2 * 8 <= w.ht_combine_ready_offset);
    SY_CHECK(w.ht_combine_ready_offset + 2048 * 8 <= w.total_bytes);
    std::vector<uint8_t> workspace(size_t(w.total_bytes));
    uint8_t* base = workspace.data();
    SY_CHECK(reinterpret_cast<uint8_t*>(w.ht_combine_arrival(base, 1023, 1)) + 8 <=
             base + w.ht_combine_consumed_offset);
    SY_CHECK(reinterpret_cast<uint8_t*>(w.ht_combine_consumed(base, 1023, 1)) + 8 <=
             base + w.ht_combine_ready_offset);
    // Without high-throughput ops there are no combine counters.
    capacity.high_throughput = false;
    SY_CHECK_EQ(device::BufferLayout::make(capacity).workspace.ht_combine_chunks, 0);
    // Notify entry: 64-bit words for the sequence, the token count, rows to R = 2 ranks and L = 128
    // expert counts: 8 * 132 = 1,056 bytes (a multiple of 16).
    SY_CHECK_EQ(w.ht_notify_entry_bytes, int64_t(1056));
}

SY_TEST(BufferLayout, RecordSectionsAre32ByteAligned) {
    const auto record = device::RecordLayout::dispatch(2560, device::kPayloadFp8, device::kScaleUe8m0, 9);
    SY_CHECK_EQ(record.scale_offset % 32, int64_t(0));
    SY_CHECK_EQ(record.meta_offset % 32, int64_t(0));
    SY_CHECK_EQ(record.total_bytes % 32, int64_t(0));
    SY_CHECK_EQ(record.scale_bytes, int64_t(4) * 5);  // ceil(2560 / 512) packed words
    SY_CHECK_EQ(record.meta_bytes, int64_t(4) * (2 + 27));
}

// The buffer sizes the layout kernels' scratch once, for T_max tokens at the largest top-k; every
// smaller call must fit, and chunks must cover every token with one thread per (token, k) entry.
SY_TEST(LayoutKernels, ChunksCoverTokensAndFitTheBuffersScratch) {
    using namespace switchyard::device;
    const int32_t max_tokens = 4096, max_topk = 9, max_experts = 256, ranks = 8;
    const int64_t capacity = int64_t(layout_num_chunks(max_tokens, max_topk)) * (max_experts + ranks);
    for (int32_t topk = 1; topk <= max_topk; ++topk) {
        const int32_t per_chunk = layout_tokens_per_chunk(topk);
        SY_CHECK(per_chunk >= 1);
        SY_CHECK(int64_t(per_chunk) * topk <= kLayoutThreads);
        for (int32_t tokens : {0, 1, 7, 113, 114, 1000, 4095, 4096}) {
            const int32_t chunks = layout_num_chunks(tokens, topk);
            SY_CHECK(chunks >= 1);  // a grid of at least one block, which writes the totals
            SY_CHECK(int64_t(chunks) * per_chunk >= tokens);
            SY_CHECK(tokens == 0 || int64_t(chunks - 1) * per_chunk < tokens);
            for (int32_t experts : {8, 64, 256}) SY_CHECK(int64_t(chunks) * (experts + ranks) <= capacity);
        }
    }
}

// The routing scratch: the tagged totals, then the epoch word, then the chunk ticket counter, each
// in words of its own that reset() zeroes with the rest (bytes() covers all three).
SY_TEST(LayoutKernels, RoutingScratchHoldsTotalsEpochAndTickets) {
    using namespace switchyard::device;
    std::vector<uint64_t> words(64 + 2, 0);
    RoutingScratch scratch;
    scratch.words = words.data();
    scratch.total_words = 64;
    scratch.max_chunks = 4;
    SY_CHECK(scratch.epoch() == words.data() + 64);
    SY_CHECK(reinterpret_cast<uint64_t*>(scratch.tickets()) == words.data() + 65);
    SY_CHECK(scratch.bytes() == words.size() * sizeof(uint64_t));
}

// The layout kernel's shared memory: with per-warp counts (up to kLayoutHistogramColumns columns)
// it must fit the smallest opt-in limit of the GPUs we build for (227 KiB on H100/H200/B200), and
// without them (the warps-take-turns path, up to the 4,096 experts validation allows, and 64
// ranks) the 48 KiB every launch gets without opting in.
SY_TEST(LayoutKernels, SharedMemoryFitsBothPaths) {
    using namespace switchyard::device;
    const int32_t widest_histogram_experts = kLayoutHistogramColumns - 8;
    SY_CHECK(layout_uses_histogram(widest_histogram_experts, 8));
    SY_CHECK(!layout_uses_histogram(widest_histogram_experts + 1, 8));
    SY_CHECK(layout_uses_histogram(256, 8));
    SY_CHECK(layout_shared_bytes(widest_histogram_experts, 8, true) <= 227 * 1024);
    SY_CHECK(layout_shared_bytes(4096, 64, false) <= 48 * 1024);
}

SY_TEST_MAIN()

SY_TEST(HtNotify, TaggedCountsTellThisOpFromEarlierAndLaterOnes) {
    using device::HtNotifyView;
    // A count travels with the op's sequence above it: the low 32 bits give it back, negative too.
    const uint64_t word = HtNotifyView::tagged(7, 4096);
    SY_CHECK_EQ(HtNotifyView::count_of(word), 4096);
    SY_CHECK_EQ(HtNotifyView::count_of(HtNotifyView::tagged(7, -1)), -1);
    SY_CHECK_EQ(HtNotifyView::tag_of(word), 7u);
    // The waiter of op 7 keeps waiting on op 6's word and on the zeroed workspace, stops on op 7's,
    // and also stops on op 8's, which is then a sequence mismatch, not this op's count.
    SY_CHECK(!HtNotifyView::reached(HtNotifyView::tagged(6, 4096), 7));
    SY_CHECK(!HtNotifyView::reached(0, 1));
    SY_CHECK(HtNotifyView::reached(word, 7) && HtNotifyView::written_by(word, 7));
    SY_CHECK(HtNotifyView::reached(HtNotifyView::tagged(8, 1), 7));
    SY_CHECK(!HtNotifyView::written_by(HtNotifyView::tagged(8, 1), 7));
    // Tags are the sequence's low 32 bits: op 2^32 + 1 follows op 2^32 across the wrap.
    const uint64_t wrap = uint64_t(1) << 32;
    SY_CHECK(!HtNotifyView::reached(HtNotifyView::tagged(wrap - 1, 3), wrap));
    SY_CHECK(HtNotifyView::written_by(HtNotifyView::tagged(wrap + 1, 3), wrap + 1));
    SY_CHECK(!HtNotifyView::reached(HtNotifyView::tagged(wrap, 3), wrap + 1));
}

SY_TEST(HtNotify, EntryWordsFitTheWorkspaceEntry) {
    using device::HtNotifyView;
    // {sequence, rows_to[R], expert_rows[L]}: EP8 with 32 local experts has 41 words.
    uint64_t words[41] = {};
    const HtNotifyView entry{words, 8};
    SY_CHECK_EQ(HtNotifyView::num_words(8, 32), 41);
    SY_CHECK(entry.sequence() == words);
    SY_CHECK(entry.rows_to_word(0) == words + 1 && entry.rows_to_word(7) == words + 8);
    SY_CHECK(entry.expert_rows_word(0) == words + 9 && entry.expert_rows_word(31) == words + 40);
    const auto layout = device::WorkspaceLayout::make(8, 32);
    SY_CHECK(layout.ht_notify_entry_bytes >= 8 * 41 && layout.ht_notify_entry_bytes % 16 == 0);
}
