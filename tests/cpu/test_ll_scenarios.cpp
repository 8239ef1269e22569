// The LL GPU tests' scenarios are valid reference problems (no GPU needed): routing without
// repeated experts, masked-layout capacity, weights, absent ranks. Catches a broken test setup on
// the CPU machine before it reaches the GPU.
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

SY_TEST_MAIN()
