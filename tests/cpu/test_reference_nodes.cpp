// The node-level reduction of a combine across nodes (DESIGN.md §2 "Several nodes"), worked by hand.
//
// R = 4 ranks on 2 nodes (ranks 0, 1 on node 0; ranks 2, 3 on node 1), E = 4 (rank q owns expert
// q), H = 2, K = 4, T_max = 1. Home rank 0 has one token routed to experts [0, 1, 2, 3]; the other
// ranks have no tokens. The values are chosen so that rounding a node's partial to bf16 shows:
// 1 + 2^-8 lies exactly halfway between the bf16 neighbours 1 and 1 + 2^-7 and rounds to even (1).
#include <bit>
#include <cstdint>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard::reference;

namespace {

constexpr float kTiny = 0.00390625f;  // 2^-8

uint16_t bf(float v) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}  // exact inputs only

std::vector<uint16_t> bfs(std::vector<float> values) {
    std::vector<uint16_t> out;
    for (float v : values) out.push_back(bf(v));
    return out;
}

Routing make_routing(RecvLayout layout) {
    const Problem problem{4, 4, 2, 4, 1};
    std::vector<DispatchInput> in(4);
    in[0].num_tokens = 1;
    in[0].x_bf16.assign(2, 0);
    in[0].topk_idx = {0, 1, 2, 3};
    in[0].topk_weights = {1.0f, 1.0f, 1.0f, 1.0f};
    for (int s = 1; s < 4; ++s) in[s].topk_weights.clear();
    DispatchOptions options;
    options.layout = layout;
    return dispatch(problem, in, options).routing;
}

// Every rank holds one row (the home's token); rank q's row is {values[q], 2}.
std::vector<CombineInput> rows(std::vector<float> values) {
    std::vector<CombineInput> y(4);
    for (int q = 0; q < 4; ++q) y[q].y = bfs({values[q], 2.0f});
    return y;
}

}  // namespace

SY_TEST(combine_nodes, rank_major_rounds_each_node_partial_once) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    const auto y = rows({1.0f, kTiny, kTiny, 0.0f});
    // One node: 1 + 2^-8 + 2^-8 + 0 = 1 + 2^-7, exact in bf16.
    SY_CHECK(combine(routing, y, {}, {})[0].out == bfs({1.0078125f, 8.0f}));
    // Two nodes: node 0 = bf16(1 + 2^-8) = 1 (tie to even), node 1 = 2^-8; home: bf16(1 + 2^-8) = 1.
    CombineOptions options;
    options.num_nodes = 2;
    SY_CHECK(combine(routing, y, {}, options)[0].out == bfs({1.0f, 8.0f}));
    // Four nodes of one rank: every partial is a single bf16 row (exact), then one rounding at home.
    options.num_nodes = 4;
    SY_CHECK(combine(routing, y, {}, options)[0].out == bfs({1.0078125f, 8.0f}));
}

SY_TEST(combine_nodes, biases_are_added_by_the_home_after_the_node_partials) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    std::vector<CombineHomeInput> home(4);
    home[0].bias0 = bfs({kTiny, 0.0f});
    CombineOptions options;
    options.num_nodes = 2;
    // Node 0 = bf16(1 + 2^-8) = 1, node 1 = bf16(0 + 0) = 0; home: 2^-8 + 1 + 0 -> bf16 tie -> 1.
    SY_CHECK(combine(routing, rows({1.0f, kTiny, 0.0f, 0.0f}), home, options)[0].out == bfs({1.0f, 8.0f}));
    // The bias joins the home's sum, not a node's partial: 2^-8 + 1 + 2^-8 = 1 + 2^-7.
    SY_CHECK(combine(routing, rows({1.0f, 0.0f, kTiny, 0.0f}), home, options)[0].out ==
             bfs({1.0078125f, 8.0f}));
}

SY_TEST(combine_nodes, expert_flat_and_hierarchical) {
    const Routing routing = make_routing(RecvLayout::kExpertContiguous);
    // Contiguous layout, alignment 1: every rank holds one row, (0, 0, k = q).
    const auto y = rows({1.0f, kTiny, kTiny, 0.0f});
    CombineOptions options;
    options.weighted = true;
    SY_CHECK(combine(routing, y, {}, options)[0].out == bfs({1.0078125f, 8.0f}));
    options.num_nodes = 2;
    SY_CHECK(combine(routing, y, {}, options)[0].out == bfs({1.0f, 8.0f}));
    // Hierarchical inside the nodes: each rank's partial is its single row (exact), then per node.
    options.hierarchical = true;
    SY_CHECK(combine(routing, y, {}, options)[0].out == bfs({1.0f, 8.0f}));
}

SY_TEST(combine_nodes, nodes_must_divide_the_ranks) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    CombineOptions options;
    options.num_nodes = 3;
    SY_CHECK_THROWS_WITH(combine(routing, rows({1, 1, 1, 1}), {}, options), switchyard::InvalidArgument,
                         "num_nodes");
}

SY_TEST_MAIN()
