// The analytical SM model on hand-computed cases.
#include <cmath>
#include <cstdio>

#include "common/testing.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/sm_model.hpp"

using namespace switchyard;

static bool near(double a, double b, double tolerance = 1e-9) {
    return std::fabs(a - b) <= tolerance;
}

SY_TEST(SmModel, ExpectedDistinctRanksTop8Of256) {
    // By hand: P(miss) = prod_{i<8} (E - E/g - i) / (E - i).
    //  g = 2:  prod (128-i)/(256-i) = 0.0034899...  ->  2 * (1 - 0.0034899) = 1.9930201
    //  g = 8:  prod (224-i)/(256-i) = 0.3381685...  ->  8 * (1 - 0.3381685) = 5.2946520
    //  g = 64: prod (252-i)/(256-i) = 0.8800663...  -> 64 * (1 - 0.8800663) = 7.6757502
    SY_CHECK(near(expected_distinct_groups(256, 8, 2), 1.9930201154, 1e-9));
    SY_CHECK(near(expected_distinct_groups(256, 8, 8), 5.2946520004, 1e-9));
    SY_CHECK(near(expected_distinct_groups(256, 8, 64), 7.6757501918, 1e-9));
}

SY_TEST(SmModel, DegenerateGroupings) {
    SY_CHECK(near(expected_distinct_groups(256, 8, 1), 1.0));    // one group is always hit
    SY_CHECK(near(expected_distinct_groups(256, 8, 256), 8.0));  // one expert per group: k groups
    SY_CHECK(near(expected_distinct_groups(16, 0, 4), 0.0));     // no picks, no groups
    SY_CHECK(near(expected_distinct_groups(4, 4, 2), 2.0));      // all experts picked
    SY_CHECK_THROWS(expected_distinct_groups(10, 2, 3), InvalidArgument);
}

SY_TEST(SmModel, Ep2OnH200ByHand) {
    // EP2, top-8 of 256: D = 1.99302; NVLink bytes per token byte = D * (2-1)/2 = 0.99651.
    // Token rate the link absorbs: 390 / 0.99651 = 391.366 GB/s of token payload.
    // Writes: 391.366 * 1.99302 / 65 = 12.0000 SMs; reads: 391.366 / 200 = 1.957 SMs.
    // With 1.25 headroom: 15.0000 -> ceil 15 -> even 16.
    SmModelInput input;
    input.num_ranks = 2;
    input.bandwidth = default_arch_bandwidth(9);
    const SmModelResult result = model_num_sms(input);
    SY_CHECK_EQ(result.bottleneck, std::string("nvlink"));
    SY_CHECK(near(result.link_bytes_per_token, 0.9965100577, 1e-9));
    SY_CHECK(near(result.exact_sms, 390.0 / 0.5 / 65.0, 1e-9));  // D cancels: R/(R-1) * link / write
    SY_CHECK_EQ(result.num_sms, 16);
}

SY_TEST(SmModel, Ep2CombineWritesWithItsSendingWarpsOnly) {
    // The combine's SMs write at 10/16 of the rate: exact = 12 / 0.625 = 19.2; * 1.25 = 24.
    SmModelInput input;
    input.num_ranks = 2;
    input.op = SmModelOp::kCombine;
    SmModelResult result = model_num_sms(input);
    SY_CHECK(near(result.exact_sms, 390.0 / 0.5 / (65.0 * 10.0 / 16.0), 1e-9));
    SY_CHECK_EQ(result.num_sms, 24);
    // At 6/16: exact = 12 / 0.375 = 32; * 1.25 = 40.
    input.combine_send_fraction = 6.0 / 16.0;
    result = model_num_sms(input);
    SY_CHECK(near(result.exact_sms, 390.0 / 0.5 / (65.0 * 6.0 / 16.0), 1e-9));
    SY_CHECK_EQ(result.num_sms, 40);
    input.combine_send_fraction = 0.0;
    SY_CHECK_THROWS_WITH(model_num_sms(input), InvalidArgument, "combine_send_fraction");
}

SY_TEST(SmModel, Ep8AndBudget) {
    // EP8: exact = link * R / (R - 1) / write = 390 * 8/7 / 65 = 6.857143; * 1.25 = 8.57 -> 9 -> 10.
    SmModelInput input;
    input.num_ranks = 8;
    SmModelResult result = model_num_sms(input);
    SY_CHECK(near(result.exact_sms, 390.0 * 8.0 / 7.0 / 65.0, 1e-9));
    SY_CHECK_EQ(result.num_sms, 10);
    // Eight ranks sharing one GPU: budget 132 / 8 = 16 SMs each; a slow link needs fewer.
    input.max_sms = 3;
    result = model_num_sms(input);
    SY_CHECK_EQ(result.num_sms, 2);  // clamped to the even budget
}

SY_TEST(SmModel, TwoNodesRdmaBound) {
    // 2 nodes x 8 ranks over 46 GB/s RDMA, the hierarchical dispatch: RDMA bytes = N_d * 1/2 with
    // N_d = 1.99302 -> 0.99651; token rate = 46 / 0.99651 = 46.161 GB/s; the SMs write a record per
    // destination node and a row per destination rank: 46.161 * (N_d + D16) / 65 with
    // D16 = expected_distinct_groups(256, 8, 16); they read 1 + N_d.
    SmModelInput input;
    input.num_ranks = 16;
    input.num_nodes = 2;
    SmModelResult result = model_num_sms(input);
    SY_CHECK_EQ(result.bottleneck, std::string("rdma"));
    const double d16 = expected_distinct_groups(256, 8, 16);
    const double nodes = 1.9930201154;
    SY_CHECK(near(result.expected_nodes_per_token, nodes, 1e-6));
    SY_CHECK(near(result.sm_write_bytes_per_token, nodes + d16, 1e-6));
    SY_CHECK(near(result.sm_read_bytes_per_token, 1.0 + nodes, 1e-6));
    SY_CHECK(near(result.exact_sms, 46.0 / 0.9965100577 * (nodes + d16) / 65.0, 1e-5));
    SY_CHECK_EQ(result.num_sms % 2, 0);
    // The combine: reads 2 D + N_d, writes D + N_d at the combine's sending share of the write rate.
    input.op = SmModelOp::kCombine;
    result = model_num_sms(input);
    SY_CHECK(near(result.sm_read_bytes_per_token, 2.0 * d16 + nodes, 1e-6));
    SY_CHECK(near(result.exact_sms, 46.0 / 0.9965100577 * (nodes + d16) / (65.0 * 10.0 / 16.0), 1e-5));
}

SY_TEST(SmModel, TwoNodesOfTwoRanksStayWithinSixteenSms) {
    // The acceptance shape: 2 emulated nodes x 2 ranks, DeepSeek-V3 routing, 46 GB/s: both ops within
    // the 16 SMs per rank the target allows, even.
    SmModelInput input;
    input.num_ranks = 4;
    input.num_nodes = 2;
    input.max_sms = 33;
    for (SmModelOp op : {SmModelOp::kDispatch, SmModelOp::kCombine}) {
        input.op = op;
        const SmModelResult result = model_num_sms(input);
        std::printf("  2x2 %s: %d SMs (exact %.2f)\n", op == SmModelOp::kDispatch ? "dispatch" : "combine",
                    result.num_sms, result.exact_sms);
        SY_CHECK(result.num_sms >= 2 && result.num_sms <= 16 && result.num_sms % 2 == 0);
    }
}

SY_TEST(SmModel, SingleRankIsLocal) {
    SmModelInput input;
    input.num_ranks = 1;
    const SmModelResult result = model_num_sms(input);
    SY_CHECK_EQ(result.bottleneck, std::string("none"));
    SY_CHECK(result.num_sms >= 2 && result.num_sms % 2 == 0);
}

SY_TEST_MAIN()
