// Hand-worked combine cases: every expected output below is worked out by hand.
//
// Same routing as test_reference_dispatch.cpp: R = 2, E = 4 (rank 0 owns 0,1; rank 1 owns 2,3),
// H = 2, K = 2, T_max = 3.
//   home 0: t0 -> [1, 2] (w .5, .25)   t1 -> [-1, -1] (nowhere)   t2 -> [3, 0] (w .125, .75)
//   home 1: t0 -> [2, -1] (w 1, -)     t1 -> [0, 1] (w .375, .625)
// Rank-major rows:  rank 0: r0 (0,0)  r1 (0,2)  r2 (1,1);   rank 1: r0 (0,0)  r1 (0,2)  r2 (1,0)
// Contiguous rows (alignment 4): rank 0: r0 (0,2,k1) r1 (1,1,k0) | r4 (0,0,k0) r5 (1,1,k1)
//                                rank 1: r0 (0,0,k1) r1 (1,0,k0) | r4 (0,2,k0)
// Masked rows (capacity 6): the same with the second expert's rows at 6, 7 instead of 4, 5.
#include <bit>
#include <cstdint>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard::reference;

namespace {

uint16_t bf(float v) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}  // exact inputs only

std::vector<uint16_t> bfs(std::vector<float> values) {
    std::vector<uint16_t> out;
    for (float v : values) out.push_back(bf(v));
    return out;
}

const Problem kProblem{2, 4, 2, 2, 3};

Routing make_routing(RecvLayout layout) {
    std::vector<DispatchInput> in(2);
    in[0].num_tokens = 3;
    in[0].x_bf16.assign(6, 0);
    in[0].topk_idx = {1, 2, -1, -1, 3, 0};
    in[0].topk_weights = {0.5f, 0.25f, 0.875f, 0.875f, 0.125f, 0.75f};
    in[1].num_tokens = 2;
    in[1].x_bf16.assign(4, 0);
    in[1].topk_idx = {2, -1, 0, 1};
    in[1].topk_weights = {1.0f, 0.0625f, 0.375f, 0.625f};
    DispatchOptions options;
    options.layout = layout;
    options.expert_alignment = layout == RecvLayout::kExpertContiguous ? 4 : 1;
    return dispatch(kProblem, in, options).routing;
}

// Rank-major rows: rank 0 {1,2},{3,4},{5,6}; rank 1 {10,20},{30,40},{50,60}.
std::vector<CombineInput> rank_major_rows() {
    std::vector<CombineInput> y(2);
    y[0].y = bfs({1, 2, 3, 4, 5, 6});
    y[1].y = bfs({10, 20, 30, 40, 50, 60});
    return y;
}

// Contiguous rows; padding rows hold garbage (99, 77, 55) that must never be read.
std::vector<CombineInput> contiguous_rows() {
    std::vector<CombineInput> y(2);
    y[0].y = bfs({1, 10, 2, 20, 99, 99, 99, 99, 3, 30, 4, 40, 77, 77, 77, 77});
    y[1].y = bfs({5, 50, 6, 60, 55, 55, 55, 55, 7, 70, 55, 55, 55, 55, 55, 55});
    return y;
}

}  // namespace

SY_TEST(combine_hand, rank_major_unweighted) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    auto out = combine(routing, rank_major_rows(), {}, {});
    SY_CHECK(out[0].out == bfs({11, 22, 0, 0, 33, 44}));  // t1 went nowhere: zero
    SY_CHECK(out[1].out == bfs({50, 60, 5, 6}));
    SY_CHECK(out[0].combined_topk_weights.empty());
}

SY_TEST(combine_hand, rank_major_one_and_two_biases) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    std::vector<CombineHomeInput> home(2);
    home[0].bias0 = bfs({0.5, 0.5, 0.5, 0.5, 0.5, 0.5});
    home[1].bias0 = bfs({1, -1, 2, 2});
    auto out = combine(routing, rank_major_rows(), home, {});
    SY_CHECK(out[0].out == bfs({11.5, 22.5, 0.5, 0.5, 33.5, 44.5}));
    SY_CHECK(out[1].out == bfs({51, 59, 7, 8}));

    home[0].bias1 = bfs({0.25, -1, 0.25, -1, 0.25, -1});
    out = combine(routing, rank_major_rows(), home, {});
    SY_CHECK(out[0].out == bfs({11.75, 21.5, 0.75, -0.5, 33.75, 43.5}));
    SY_CHECK(out[1].out == bfs({51, 59, 7, 8}));
}

SY_TEST(combine_hand, rank_major_rounds_once_in_order) {
    // home 0 t0 channel 0: bias 1, then rank 0's 256, then rank 1's 1: 258 in fp32, exact in bf16.
    // Rounding after each step would give 256 (257 is a tie, to even).
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    std::vector<CombineInput> y(2);
    y[0].y = bfs({256, 0, 0, 0, 0, 0});
    y[1].y = bfs({1, 0, 0, 0, 0, 0});
    std::vector<CombineHomeInput> home(2);
    home[0].bias0 = bfs({1, 0, 0, 0, 0, 0});
    auto out = combine(routing, y, home, {});
    SY_CHECK_EQ(out[0].out[0], bf(258));
}

SY_TEST(combine_hand, rank_major_combined_topk_weights) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    auto y = rank_major_rows();
    y[0].row_weights = {0.11f, 0.12f, 0.13f, 0.14f, 0.15f, 0.16f};
    y[1].row_weights = {0.21f, 0.22f, 0.23f, 0.24f, 0.25f, 0.26f};
    auto out = combine(routing, y, {}, {});
    // home 0: t0 k0 (expert 1, rank 0 row 0 col 0), k1 (expert 2, rank 1 row 0 col 1); t1 none;
    //         t2 k0 (expert 3, rank 1 row 1 col 0), k1 (expert 0, rank 0 row 1 col 1).
    SY_CHECK(out[0].combined_topk_weights == (std::vector<float>{0.11f, 0.22f, 0, 0, 0.23f, 0.14f}));
    // home 1: t0 k0 (rank 1 row 2 col 0), k1 empty; t1 (rank 0 row 2 cols 0, 1).
    SY_CHECK(out[1].combined_topk_weights == (std::vector<float>{0.25f, 0, 0.15f, 0.16f}));
}

SY_TEST(combine_hand, expert_major_unweighted) {
    const Routing routing = make_routing(RecvLayout::kExpertContiguous);
    auto out = combine(routing, contiguous_rows(), {}, {});
    // home 0 t0 = rank0 r4 + rank1 r0; t2 = rank1 r4 + rank0 r0; home 1 t0 = rank1 r1;
    // home 1 t1 = rank0 r1 + rank0 r5.
    SY_CHECK(out[0].out == bfs({8, 80, 0, 0, 8, 80}));
    SY_CHECK(out[1].out == bfs({6, 60, 6, 60}));
}

SY_TEST(combine_hand, expert_major_weighted) {
    const Routing routing = make_routing(RecvLayout::kExpertContiguous);
    CombineOptions options;
    options.weighted = true;
    auto out = combine(routing, contiguous_rows(), {}, options);
    // home 0 t0: .5*3 + .25*5 = 2.75, .5*30 + .25*50 = 27.5; t2: .125*7 + .75*1 = 1.625, 8.75 + 7.5
    // home 1 t0: 1*6, 1*60; t1: .375*2 + .625*4 = 3.25, 7.5 + 25 = 32.5
    SY_CHECK(out[0].out == bfs({2.75, 27.5, 0, 0, 1.625, 16.25}));
    SY_CHECK(out[1].out == bfs({6, 60, 3.25, 32.5}));

    // Weights given to combine replace the dispatch's (home 1 only; home 0 keeps its own).
    std::vector<CombineHomeInput> home(2);
    home[1].topk_weights = {2, 0, 1, -1};
    home[1].bias0 = bfs({0.5, 0.5, 0.5, 0.5});
    out = combine(routing, contiguous_rows(), home, options);
    SY_CHECK(out[0].out == bfs({2.75, 27.5, 0, 0, 1.625, 16.25}));
    SY_CHECK(out[1].out == bfs({12.5, 120.5, -1.5, -19.5}));
}

SY_TEST(combine_hand, expert_major_masked) {
    const Routing routing = make_routing(RecvLayout::kExpertMasked);
    std::vector<CombineInput> y(2);
    y[0].y.assign(24, bf(99));  // unused rows: garbage
    y[1].y.assign(24, bf(55));
    auto put = [&](int q, int r, float a) {
        y[q].y[2 * r] = bf(a);
        y[q].y[2 * r + 1] = bf(10 * a);
    };
    put(0, 0, 1), put(0, 1, 2), put(0, 6, 3), put(0, 7, 4);
    put(1, 0, 5), put(1, 1, 6), put(1, 6, 7);
    auto out = combine(routing, y, {}, {});
    SY_CHECK(out[0].out == bfs({8, 80, 0, 0, 8, 80}));
    SY_CHECK(out[1].out == bfs({6, 60, 6, 60}));
}

SY_TEST(combine_hand, hierarchical_rounds_each_rank_partial) {
    const Routing routing = make_routing(RecvLayout::kExpertContiguous);
    auto y = contiguous_rows();
    // home 1 t1 has both slots on rank 0 (rows 1 and 5).
    y[0].y[2] = bf(256), y[0].y[3] = bf(2);  // row 1
    y[0].y[10] = bf(1), y[0].y[11] = bf(3);  // row 5
    std::vector<CombineHomeInput> home(2);
    home[1].bias0 = bfs({0, 0, 1, 0});
    CombineOptions options;
    options.hierarchical = true;
    auto out = combine(routing, y, home, options);
    // Unweighted: rank 0's partial 256 + 1 = 257 rounds to 256 (tie, even); 1 + 256 = 257 -> 256.
    // (The flat sum would be 1 + 256 + 1 = 258.) Channel 1: 2 + 3 = 5.
    SY_CHECK(out[1].out == bfs({6, 60, 256, 5}));
    // Tokens with slots on both ranks: rank 0's partial, then rank 1's.
    SY_CHECK(out[0].out == bfs({8, 80, 0, 0, 8, 80}));
    options.hierarchical = false;
    out = combine(routing, y, home, options);
    SY_CHECK_EQ(out[1].out[2], bf(258));

    // Weighted, home 1 t1 channel 0: partial .375*256 + .625*1 = 96.625 -> bf16 96.5 (spacing .5);
    // with bias .125: .125 + 96.5 = 96.625 -> 96.5. Flat: .125 + 96 + .625 = 96.75, a tie -> 97.
    home[1].bias0 = bfs({0, 0, 0.125, 0});
    options.weighted = true;
    options.hierarchical = true;
    out = combine(routing, y, home, options);
    SY_CHECK_EQ(out[1].out[2], bf(96.5));
    SY_CHECK_EQ(out[1].out[3], bf(2.625));  // .375*2 + .625*3 = 2.625, exact
    SY_CHECK(out[0].out == bfs({2.75, 27.5, 0, 0, 1.625, 16.25}));
    options.hierarchical = false;
    out = combine(routing, y, home, options);
    SY_CHECK_EQ(out[1].out[2], bf(97));
}

SY_TEST(combine_hand, expert_major_combined_topk_weights) {
    const Routing routing = make_routing(RecvLayout::kExpertContiguous);
    auto y = contiguous_rows();
    y[0].row_weights = {0.1f, 0.2f, 9, 9, 0.3f, 0.4f, 9, 9};
    y[1].row_weights = {0.5f, 0.6f, 9, 9, 0.7f, 9, 9, 9};
    auto out = combine(routing, y, {}, {});
    // home 0: t0 k0 -> rank0 r4, k1 -> rank1 r0; t1 none; t2 k0 -> rank1 r4, k1 -> rank0 r0.
    SY_CHECK(out[0].combined_topk_weights == (std::vector<float>{0.3f, 0.5f, 0, 0, 0.7f, 0.1f}));
    // home 1: t0 k0 -> rank1 r1, k1 empty; t1 k0 -> rank0 r1, k1 -> rank0 r5.
    SY_CHECK(out[1].combined_topk_weights == (std::vector<float>{0.6f, 0, 0.2f, 0.4f}));
}

SY_TEST(combine_hand, absent_rank_contributions_dropped) {
    const Routing routing = make_routing(RecvLayout::kRankMajor);
    CombineOptions options;
    options.absent_ranks = {false, true};
    auto y = rank_major_rows();
    y[1] = CombineInput{};  // an absent rank's input is not read
    auto out = combine(routing, y, {}, options);
    SY_CHECK(out[0].out == bfs({1, 2, 0, 0, 3, 4}));
    SY_CHECK(out[1].out == bfs({0, 0, 0, 0}));  // the absent home's output stays zero
}

SY_TEST_MAIN()
