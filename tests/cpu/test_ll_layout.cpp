// LL buffer sizing and the layouts of the LL signal area and data sets (no GPU needed), and every
// LL kernel variant compiled by the JIT for sm_90a without register spills.
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "common/ll_capacity.hpp"
#include "common/testing.hpp"
#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/ll_launch.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/ll/ll_layout.cuh"

using namespace switchyard;
using namespace switchyard::device;
using switchyard::testing::ll_capacity;

SY_TEST(LlLayout, DeepSeekShapeEp8FitsIn64MiB) {
    const BufferLayout layout = BufferLayout::make(ll_capacity(8, 1, 128, 7168, 256, 8));
    std::printf("  LL buffer: %lld bytes (%.1f MiB), set %lld bytes\n", (long long)layout.total_bytes,
                layout.total_bytes / 1048576.0, (long long)layout.ll_set_bytes);
    SY_CHECK(layout.ll_set_bytes > 0);
    SY_CHECK(layout.total_bytes <= 64ll << 20);
    SY_CHECK_EQ(layout.ll_zero_copy_bytes, int64_t(0));
    // A token crosses to a rank once: the dispatch area holds R * T_ll records, not R * T_ll * K.
    SY_CHECK_EQ(layout.ll_set.dispatch_offset + 8ll * 128 * layout.ll_set.max_record_bytes <=
                    layout.ll_set.combine_offset,
                true);
}

SY_TEST(LlLayout, ZeroCopyAreaFollowsTheSets) {
    BufferCapacity capacity = ll_capacity(2, 1, 128, 7168, 256, 8);
    capacity.ll_zero_copy_combine = true;
    const BufferLayout layout = BufferLayout::make(capacity);
    SY_CHECK_EQ(layout.ll_zero_copy_bytes, int64_t(128) * 2 * 128 * 7168 * 2);
    SY_CHECK(layout.ll_zero_copy_offset >= layout.ll_offset + 2 * layout.ll_set_bytes);
    SY_CHECK(layout.ll_zero_copy_offset + layout.ll_zero_copy_bytes <= layout.total_bytes);
    SY_CHECK_EQ(layout.ll_zero_copy_offset % 4096, int64_t(0));
}

SY_TEST(LlLayout, SetAreasDoNotOverlap) {
    for (int ranks : {1, 2, 8, 64}) {
        const int experts = ranks * 9;
        const LlSetLayout set = LlSetLayout::make(ranks, 33, 2560, 9, experts / ranks);
        SY_CHECK(set.headers_offset + set.header_bytes * ranks <= set.dispatch_offset);
        SY_CHECK(set.dispatch_offset + int64_t(ranks) * 33 * set.max_record_bytes <= set.combine_offset);
        SY_CHECK(set.combine_offset + 9ll * 33 * set.max_combine_row_bytes <= set.set_bytes);
        SY_CHECK(set.header_bytes >= 4 * (1 + experts / ranks));
        // Every op's record fits the capacity record.
        for (int kind : {kScaleNone, kScaleFloat32, kScaleUe8m0})
            SY_CHECK(ll_dispatch_record(2560, kind, 9).total_bytes <= set.max_record_bytes);
        SY_CHECK_EQ(set.record(nullptr, 1, 2, 100) - static_cast<uint8_t*>(nullptr),
                    set.dispatch_offset + (33 + 2) * 100);
    }
}

SY_TEST(LlLayout, SignalAreaFitsTheWorkspace) {
    for (int ranks : {1, 2, 8, 72, 512}) {
        const LlSignalLayout signals = LlSignalLayout::make(ranks);
        SY_CHECK(signals.total_bytes <= WorkspaceLayout::ll_signal_bytes_for(ranks));
        uint8_t* base = nullptr;
        SY_CHECK(reinterpret_cast<uint8_t*>(signals.arrivals(base, kLlCombine, 1) + ranks) <=
                 base + signals.decided_offset);
        SY_CHECK(reinterpret_cast<uint8_t*>(signals.decided(base, kLlCombine, 1) + 1) <=
                 base + signals.mask_offset);
    }
    SY_CHECK_EQ(ll_set_of(1), 1);
    SY_CHECK_EQ(ll_set_of(2), 0);
    SY_CHECK_EQ(ll_pack_source(3, 5, 7, 128) >> 5, 3 * 128 + 5);
    SY_CHECK_EQ(ll_pack_source(3, 5, 7, 128) & 31, 7);
}

SY_TEST(LlArrivals, EachOpAddsExactlyOneTargetStep) {
    // Op n of a kind is the ceil(n / 2)-th on set n & 1: the targets of one set step by 2^32.
    for (uint64_t n = 1; n <= 12; ++n) {
        SY_CHECK_EQ(ll_set_of(n), int32_t(n & 1));
        SY_CHECK_EQ(ll_arrival_target(n), ((n + 1) / 2) << 32);
        if (n > 2) SY_CHECK_EQ(ll_arrival_target(n) - ll_arrival_target(n - 2), uint64_t(1) << 32);
    }
    // However many blocks send, their adds sum to 2^32; no strict subset reaches it, so a partial
    // op never looks complete (block 0's add alone is below it, the others' adds are tiny).
    for (int32_t blocks : {1, 2, 7, 112, 132, 1024}) {
        uint64_t total = 0, without_block0 = 0;
        for (int32_t b = 0; b < blocks; ++b) {
            total += ll_arrival_amount(uint32_t(b), blocks);
            if (b != 0) without_block0 += ll_arrival_amount(uint32_t(b), blocks);
        }
        SY_CHECK_EQ(total, uint64_t(1) << 32);
        SY_CHECK(total - 1 < (uint64_t(1) << 32));  // any one block missing falls short
        SY_CHECK(without_block0 < (uint64_t(1) << 32));
    }
}

SY_TEST(LlDispatchShape, RoutingMaskSizesAndGrid) {
    SY_CHECK_EQ(ll_token_mask_words(0), 1);
    SY_CHECK_EQ(ll_token_mask_words(1), 1);
    SY_CHECK_EQ(ll_token_mask_words(32), 1);
    SY_CHECK_EQ(ll_token_mask_words(33), 2);
    // (E + R) masks of ceil(T / 32) words next to the [R] mask, [R] presence and [R + 1] starts.
    SY_CHECK_EQ(ll_dispatch_shared_bytes(2, 256, 128), 4 * (3 * 2 + 1 + (256 + 2) * 4) + 64);
    // The receive's row offsets [R * L = E], the experts' first rows [L + 1] and their padding
    // starts [L + 1] need the scratch too when the masks are smaller.
    SY_CHECK_EQ(ll_dispatch_shared_bytes(8, 256, 1), 4 * (3 * 8 + 1 + 256 + 2 * (32 + 1)) + 64);
    SY_CHECK_EQ(ll_dispatch_shared_bytes(1, 64, 1), 4 * (3 * 1 + 1 + 64 + 2 * (64 + 1)) + 64);
    // Expert-major contiguous output: every source's T_ll tokens on up to min(K, L) local experts,
    // plus alignment - 1 rows of padding per expert.
    SY_CHECK_EQ(ll_contiguous_rows(2, 128, 8, 128, 1), int64_t(2) * 128 * 8);
    SY_CHECK_EQ(ll_contiguous_rows(8, 128, 8, 4, 16), int64_t(8) * 128 * 4 + 4 * 15);

    launch::LaunchContext context;
    context.num_ranks = 2;
    context.sm_budget = 132;
    launch::LlDispatchShape shape;
    shape.hidden = 7168;
    shape.topk = 8;
    shape.scale_kind = kScaleFloat32;
    // T_ll = 1: 2 sources x 4 receive slices of 2 KB = 8 warp items -> one block.
    SY_CHECK_EQ(launch::ll_dispatch_blocks(context, 0, shape, 1), 1);
    SY_CHECK_EQ(launch::ll_dispatch_blocks(context, 0, shape, 0), 1);
    // T_ll = 128: 2 x 128 x 4 = 1,024 receive items -> 128 blocks of 8 warps, whatever this rank's
    // own token count (its peers may send T_ll each).
    SY_CHECK_EQ(launch::ll_dispatch_blocks(context, 0, shape, 128), 128);
    // Capped by the budget and by num_sms.
    SY_CHECK_EQ(launch::ll_dispatch_blocks(context, 0, shape, 1024), 132);
    SY_CHECK_EQ(launch::ll_dispatch_blocks(context, 16, shape, 128), 16);
    // zero_padding: the segments' most padding rows too (T_ll = 1, L = 4, alignment 16: 2 + 60
    // rows of 4 slices = 248 items -> 31 blocks).
    SY_CHECK_EQ(launch::ll_dispatch_blocks(context, 0, shape, 1, 4 * 15), 31);
}

// zero_padding: the padding rows, numbered over the experts in order, map to exactly the rows of
// each aligned segment past its count (empty experts and experts without padding included).
SY_TEST(LlDispatchShape, PaddingRowsAreEachSegmentsTail) {
    const int32_t alignment = 8;
    const std::vector<int32_t> counts = {3, 0, 8, 1, 0, 16, 7, 9, 0};
    const int32_t L = int32_t(counts.size());
    std::vector<int32_t> expert_starts(L + 1, 0), padding_starts(L + 1, 0);
    std::vector<int64_t> expected;
    for (int32_t e = 0; e < L; ++e) {
        const int32_t rows = int32_t(align_up(counts[e], alignment));
        expert_starts[e + 1] = expert_starts[e] + rows;
        padding_starts[e + 1] = padding_starts[e] + rows - counts[e];
        for (int32_t r = counts[e]; r < rows; ++r) expected.push_back(expert_starts[e] + r);
    }
    SY_CHECK_EQ(int64_t(padding_starts[L]), int64_t(expected.size()));
    for (int32_t p = 0; p < padding_starts[L]; ++p)
        SY_CHECK_MSG(ll_padding_row(padding_starts.data(), expert_starts.data(), L, p) == expected[p],
                     "padding row " << p << " maps to "
                                    << ll_padding_row(padding_starts.data(), expert_starts.data(), L, p)
                                    << ", expected " << expected[p]);
}

SY_TEST(LlKernels, EveryVariantCompilesWithoutSpills) {
    std::vector<jit::KernelSource> sources;
    for (int scale : {kScaleNone, kScaleFloat32, kScaleUe8m0})  // the UE8M0 one contiguous
        sources.push_back(launch::ll_dispatch_source(
            {2560, 9, scale, scale == kScaleFloat32, kLlBothHalves, scale == kScaleUe8m0}));
    sources.push_back(launch::ll_dispatch_source({7168, 8, kScaleUe8m0, false, kLlSendHalf}));
    sources.push_back(launch::ll_dispatch_source({7168, 8, kScaleFloat32, true, kLlRecvHalf}));
    sources.push_back(
        launch::ll_dispatch_source({2064, 1, kScaleFloat32, false, kLlBothHalves}));  // partial block
    sources.push_back(launch::ll_combine_source({2560, 9, false, kLlBothHalves, false, true}));  // contiguous
    sources.push_back(launch::ll_combine_source({7168, 8, true, kLlSendHalf}));
    sources.push_back(launch::ll_combine_source({7168, 8, true, kLlRecvHalf}));
    sources.push_back(launch::ll_combine_source({7168, 8, true, kLlBothHalves, true}));  // hierarchical
    for (const auto& source : sources) {
        jit::CompileOptions options;
        options.arch = "sm_90a";
        const jit::CompiledKernel compiled = jit::compile(source, options);
        std::printf("  %s: %d registers, %d spill bytes\n", source.kernel.c_str(), compiled.num_registers,
                    compiled.spill_bytes);
        SY_CHECK_MSG(compiled.spill_bytes == 0,
                     source.kernel << " spills " << compiled.spill_bytes << " bytes");
    }
}

SY_TEST(LlKernels, SegmentLookupFindsTheLastStartAtOrBelow) {
    // Segments starting at 0, 0 (empty), 3, 3 (empty), 7: a row belongs to the last one starting at
    // or before it, so empty segments are never chosen over the non-empty one that follows them.
    const int32_t starts[] = {0, 0, 3, 3, 7};
    const int32_t expected[] = {1, 1, 1, 3, 3, 3, 3, 4, 4};
    for (int row = 0; row < 9; ++row)
        SY_CHECK_EQ(device::last_start_at_or_below(starts, 5, row), expected[row]);
    SY_CHECK_EQ(device::last_start_at_or_below(starts, 1, 5), 0);
}

// The catalog lists every instantiation the launchers can produce for its shape, once each: every
// op's kernels (ll_op_sources, what Buffer::ll_load_kernels loads) are in it, and a half's kernel
// does not depend on what the half does not run.
SY_TEST(LlKernels, CatalogHoldsEveryOpsKernelsOnce) {
    const std::vector<jit::KernelSource> catalog = launch::ll_catalog({});
    std::set<std::string> names;
    for (const jit::KernelSource& source : catalog) names.insert(source.kernel);
    SY_CHECK_EQ(names.size(), catalog.size());
    for (int scale : {kScaleNone, kScaleFloat32, kScaleUe8m0})
        for (bool int64 : {false, true})
            for (bool contiguous : {false, true})
                for (const jit::KernelSource& source :
                     launch::ll_op_sources({7168, 8, scale, int64, kLlBothHalves, contiguous}))
                    SY_CHECK_MSG(names.count(source.kernel) == 1, source.kernel << " is not in the catalog");
    // 3 scale kinds x (2 index types send + 2 layouts receive + 4 both), 2 reductions x (2 layouts
    // send + 2 index types receive + 4 both); as many across nodes (emulated network).
    SY_CHECK_EQ(catalog.size(), size_t(2 * (3 * 8 + 2 * 8)));
    SY_CHECK_EQ(launch::ll_dispatch_source({7168, 8, kScaleFloat32, true, kLlSendHalf, true}).kernel,
                launch::ll_dispatch_source({7168, 8, kScaleFloat32, true, kLlSendHalf, false}).kernel);
    SY_CHECK_EQ(launch::ll_dispatch_source({7168, 8, kScaleFloat32, true, kLlRecvHalf, true}).kernel,
                launch::ll_dispatch_source({7168, 8, kScaleFloat32, false, kLlRecvHalf, true}).kernel);
    SY_CHECK(launch::ll_dispatch_source({7168, 8, kScaleFloat32, true, kLlBothHalves, true}).kernel !=
             launch::ll_dispatch_source({7168, 8, kScaleFloat32, false, kLlBothHalves, true}).kernel);
    SY_CHECK_EQ(launch::ll_combine_source({7168, 8, true, kLlSendHalf, true, false}).kernel,
                launch::ll_combine_source({7168, 8, false, kLlSendHalf, true, false}).kernel);
    SY_CHECK_EQ(launch::ll_combine_source({7168, 8, true, kLlRecvHalf, true, true}).kernel,
                launch::ll_combine_source({7168, 8, true, kLlRecvHalf, true, false}).kernel);
}

SY_TEST_MAIN()
