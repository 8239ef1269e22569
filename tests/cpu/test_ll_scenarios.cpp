// The LL GPU tests' scenarios are valid reference problems (no GPU needed): routing without
// repeated experts, masked-layout capacity, weights, absent ranks. Catches a broken test setup on
// the CPU machine before it reaches the GPU.
#include <algorithm>
#include <cstdio>

#include "gpu/ll_test_support.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::ll;

SY_TEST(LlScenarios, BuildForEveryRankCount) {
    for (int ranks : {1, 2, 4, 8}) {
        Case c;
        c.hidden = 2560, c.topk = 9, c.experts = 32, c.format = ScaleFormat::kUE8M0,
        c.tokens = {1, 0, 17, 32};
        const Scenario sc = make_scenario(c, ranks);
        int64_t rows = 0;
        for (int q = 0; q < ranks; ++q)
            for (int32_t count : sc.dispatched.outputs[q].num_tokens_per_expert) rows += count;
        std::printf("  EP%d: %lld expert rows\n", ranks, (long long)rows);
        SY_CHECK(rows > 0);
        c.routing = Routing::kOneExpert;
        c.use_fp8 = false;
        (void)make_scenario(c, ranks);
        if (ranks >= 2) {
            c.absent.assign(ranks, false);
            c.absent[ranks - 1] = true;
            const Scenario masked = make_scenario(c, ranks);
            SY_CHECK(masked.dispatched.outputs[0].num_rows_per_source[ranks - 1] == 0);
        }
    }
}

// A contiguous case's reference (what check_dispatch compares the GPU's output with): the masked
// reference's rows moved to aligned segments, zero padding rows up to the segments' end, all
// within the GPU's capacity; and the combine's y carries each valid masked row to its new place.
SY_TEST(LlScenarios, ContiguousReferenceMatchesTheMaskedOne) {
    for (int ranks : {1, 2, 4, 8}) {
        Case c;
        c.hidden = 2560, c.topk = 9, c.experts = 32, c.format = ScaleFormat::kUE8M0,
        c.tokens = {1, 0, 17, 32};
        c.contiguous_alignment = 16, c.zero_padding = true;
        const Scenario sc = make_scenario(c, ranks);
        const size_t H = c.hidden, words = expected_words(sc);
        int64_t padding_rows = 0;
        for (int q = 0; q < ranks; ++q) {
            const auto& masked = sc.dispatched.outputs[q];
            const auto& contiguous = sc.contiguous[q];
            SY_CHECK(contiguous.expert_offsets[sc.local_experts()] <= sc.output_rows());
            for (int e = 0; e < sc.local_experts(); ++e) {
                const int64_t start = contiguous.expert_offsets[e], count = masked.num_tokens_per_expert[e];
                SY_CHECK_EQ(start % 16, int64_t(0));
                SY_CHECK_EQ(contiguous.expert_offsets[e + 1], start + (count + 15) / 16 * 16);
                for (int64_t r = 0; r < count; ++r) {
                    const size_t from = size_t(e * sc.rows_per_expert() + r), to = size_t(start + r);
                    SY_CHECK(std::equal(masked.x_fp8.begin() + from * H,
                                        masked.x_fp8.begin() + (from + 1) * H,
                                        contiguous.x_fp8.begin() + to * H));
                    SY_CHECK(std::equal(masked.scales.begin() + from * words,
                                        masked.scales.begin() + (from + 1) * words,
                                        contiguous.scales.begin() + to * words));
                    SY_CHECK(std::equal(sc.expert_outputs[q].y.begin() + from * H,
                                        sc.expert_outputs[q].y.begin() + (from + 1) * H,
                                        sc.contiguous_y[q].begin() + to * H));
                }
                for (int64_t row = start + count; row < contiguous.expert_offsets[e + 1];
                     ++row, ++padding_rows) {
                    SY_CHECK_EQ(contiguous.sources[row].rank, -1);
                    SY_CHECK(std::all_of(contiguous.x_fp8.begin() + row * H,
                                         contiguous.x_fp8.begin() + (row + 1) * H,
                                         [](uint8_t v) { return v == 0; }));
                    SY_CHECK(std::all_of(contiguous.scales.begin() + row * words,
                                         contiguous.scales.begin() + (row + 1) * words,
                                         [](uint32_t v) { return v == 0; }));
                }
            }
        }
        std::printf("  EP%d: %lld padding rows\n", ranks, (long long)padding_rows);
        SY_CHECK(padding_rows > 0);
    }
}

SY_TEST_MAIN()
