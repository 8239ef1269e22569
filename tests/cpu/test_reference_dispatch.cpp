// Hand-worked dispatch cases: every expected row below is written out by hand from the routing.
//
// The case: R = 2 ranks, E = 4 experts (rank 0 owns 0,1; rank 1 owns 2,3), H = 2, K = 2, T_max = 3.
//   rank 0: t0 -> experts [1, 2]   (both ranks)
//           t1 -> [-1, -1]         (routed nowhere)
//           t2 -> [3, 0]           (both ranks)
//   rank 1: t0 -> [2, -1]          (rank 1 only, a -1 slot)
//           t1 -> [0, 1]           (rank 0 only, two experts)
// Token values: x_s[t] = {100 s + 10 t + 1, 100 s + 10 t + 2}, all exact in bf16.
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

std::vector<uint16_t> row(float a, float b) {
    return {bf(a), bf(b)};
}

const Problem kProblem{2, 4, 2, 2, 3};

std::vector<DispatchInput> make_inputs() {
    std::vector<DispatchInput> in(2);
    in[0].num_tokens = 3;
    in[0].x_bf16 = {bf(1), bf(2), bf(11), bf(12), bf(21), bf(22)};
    in[0].topk_idx = {1, 2, -1, -1, 3, 0};
    in[0].topk_weights = {0.5f, 0.25f, 0.875f, 0.875f, 0.125f, 0.75f};
    in[1].num_tokens = 2;
    in[1].x_bf16 = {bf(101), bf(102), bf(111), bf(112)};
    in[1].topk_idx = {2, -1, 0, 1};
    in[1].topk_weights = {1.0f, 0.0625f, 0.375f, 0.625f};
    return in;
}

std::vector<uint16_t> rows_of(const DispatchOutput& out, std::vector<int> rows) {
    std::vector<uint16_t> data;
    for (int r : rows) data.insert(data.end(), out.x_bf16.begin() + 2 * r, out.x_bf16.begin() + 2 * r + 2);
    return data;
}

bool same_source(const RowSource& a, const RowSource& b) {
    return a.rank == b.rank && a.token == b.token && a.k == b.k;
}

void check_sources(const DispatchOutput& out, const std::vector<RowSource>& expected) {
    SY_CHECK_EQ(out.sources.size(), expected.size());
    for (size_t r = 0; r < expected.size(); ++r)
        SY_CHECK_MSG(same_source(out.sources[r], expected[r]), "row " << r << " got (" << out.sources[r].rank
                                                                      << "," << out.sources[r].token << ","
                                                                      << out.sources[r].k << ")");
}

const RowSource kPad{-1, -1, -1};

}  // namespace

SY_TEST(dispatch_hand, rank_major) {
    GlobalDispatch result = dispatch(kProblem, make_inputs(), {});
    const DispatchOutput& r0 = result.outputs[0];
    SY_CHECK(r0.layout == RecvLayout::kRankMajor);
    SY_CHECK(r0.payload == Payload::kBF16);
    SY_CHECK_EQ(r0.num_rows, 3);
    check_sources(r0, {{0, 0, -1}, {0, 2, -1}, {1, 1, -1}});
    SY_CHECK(r0.x_bf16 == (std::vector<uint16_t>{bf(1), bf(2), bf(21), bf(22), bf(111), bf(112)}));
    SY_CHECK(r0.topk_idx == (std::vector<int32_t>{1, -1, -1, 0, 0, 1}));
    SY_CHECK(r0.topk_weights == (std::vector<float>{0.5f, 0, 0, 0.75f, 0.375f, 0.625f}));
    SY_CHECK(r0.num_tokens_per_expert == (std::vector<int32_t>{2, 2}));
    SY_CHECK(r0.num_rows_per_source == (std::vector<int32_t>{2, 1}));
    SY_CHECK(r0.expert_offsets.empty());
    SY_CHECK(r0.x_fp8.empty() && r0.scales.empty());

    const DispatchOutput& r1 = result.outputs[1];
    SY_CHECK_EQ(r1.num_rows, 3);
    check_sources(r1, {{0, 0, -1}, {0, 2, -1}, {1, 0, -1}});
    SY_CHECK(r1.x_bf16 == (std::vector<uint16_t>{bf(1), bf(2), bf(21), bf(22), bf(101), bf(102)}));
    SY_CHECK(r1.topk_idx == (std::vector<int32_t>{-1, 0, 1, -1, 0, -1}));
    SY_CHECK(r1.topk_weights == (std::vector<float>{0, 0.25f, 0.125f, 0, 1.0f, 0}));
    SY_CHECK(r1.num_tokens_per_expert == (std::vector<int32_t>{2, 1}));
    SY_CHECK(r1.num_rows_per_source == (std::vector<int32_t>{2, 1}));

    // The routing is kept as given.
    SY_CHECK(result.routing.num_tokens == (std::vector<int>{3, 2}));
    SY_CHECK(result.routing.topk_idx[1] == (std::vector<int64_t>{2, -1, 0, 1}));
}

SY_TEST(dispatch_hand, rank_major_without_weights) {
    auto in = make_inputs();
    in[0].topk_weights.clear();
    in[1].topk_weights.clear();
    GlobalDispatch result = dispatch(kProblem, in, {});
    SY_CHECK(result.outputs[0].topk_weights.empty());
    SY_CHECK(result.outputs[0].topk_idx == (std::vector<int32_t>{1, -1, -1, 0, 0, 1}));
}

SY_TEST(dispatch_hand, expert_contiguous_aligned_zero_padding) {
    DispatchOptions options;
    options.layout = RecvLayout::kExpertContiguous;
    options.expert_alignment = 4;
    options.zero_padding = true;
    GlobalDispatch result = dispatch(kProblem, make_inputs(), options);

    // Rank 0: expert 0 <- (0,2,k1), (1,1,k0); expert 1 <- (0,0,k0), (1,1,k1); each padded to 4.
    const DispatchOutput& r0 = result.outputs[0];
    SY_CHECK_EQ(r0.num_rows, 8);
    SY_CHECK(r0.expert_offsets == (std::vector<int64_t>{0, 4, 8}));
    check_sources(r0, {{0, 2, 1}, {1, 1, 0}, kPad, kPad, {0, 0, 0}, {1, 1, 1}, kPad, kPad});
    std::vector<uint16_t> expected = {bf(21), bf(22), bf(111), bf(112), 0, 0, 0, 0,
                                      bf(1),  bf(2),  bf(111), bf(112), 0, 0, 0, 0};
    SY_CHECK(r0.x_bf16 == expected);
    SY_CHECK(r0.topk_weights == (std::vector<float>{0.75f, 0.375f, 0, 0, 0.5f, 0.625f, 0, 0}));
    SY_CHECK(r0.topk_idx.empty());
    SY_CHECK(r0.num_tokens_per_expert == (std::vector<int32_t>{2, 2}));
    SY_CHECK(r0.num_rows_per_source == (std::vector<int32_t>{2, 1}));

    // Rank 1: expert 2 <- (0,0,k1), (1,0,k0); expert 3 <- (0,2,k0).
    const DispatchOutput& r1 = result.outputs[1];
    SY_CHECK_EQ(r1.num_rows, 8);
    SY_CHECK(r1.expert_offsets == (std::vector<int64_t>{0, 4, 8}));
    check_sources(r1, {{0, 0, 1}, {1, 0, 0}, kPad, kPad, {0, 2, 0}, kPad, kPad, kPad});
    expected = {bf(1), bf(2), bf(101), bf(102), 0, 0, 0, 0, bf(21), bf(22), 0, 0, 0, 0, 0, 0};
    SY_CHECK(r1.x_bf16 == expected);
    SY_CHECK(r1.topk_weights == (std::vector<float>{0.25f, 1.0f, 0, 0, 0.125f, 0, 0, 0}));
    SY_CHECK(r1.num_tokens_per_expert == (std::vector<int32_t>{2, 1}));
}

SY_TEST(dispatch_hand, expert_contiguous_alignment_three_and_empty_expert) {
    // Only rank 1's token 1 (experts 0 and 1 on rank 0) is sent; rank 1 receives nothing.
    auto in = make_inputs();
    in[0].num_tokens = 0;
    in[0].x_bf16.clear();
    in[0].topk_idx.clear();
    in[0].topk_weights.clear();
    in[1].topk_idx = {-1, -1, 1, -1};
    DispatchOptions options;
    options.layout = RecvLayout::kExpertContiguous;
    options.expert_alignment = 3;  // padding content unspecified without zero_padding: not checked
    GlobalDispatch result = dispatch(kProblem, in, options);
    const DispatchOutput& r0 = result.outputs[0];
    // Expert 0 is empty (no rows), expert 1 has one row padded to 3: offsets[L] = 3.
    SY_CHECK(r0.expert_offsets == (std::vector<int64_t>{0, 0, 3}));
    SY_CHECK_EQ(r0.num_rows, 3);
    check_sources(r0, {{1, 1, 0}, kPad, kPad});
    SY_CHECK(rows_of(r0, {0}) == row(111, 112));
    SY_CHECK(r0.num_tokens_per_expert == (std::vector<int32_t>{0, 1}));
    SY_CHECK(r0.num_rows_per_source == (std::vector<int32_t>{0, 1}));
    const DispatchOutput& r1 = result.outputs[1];
    SY_CHECK_EQ(r1.num_rows, 0);
    SY_CHECK(r1.expert_offsets == (std::vector<int64_t>{0, 0, 0}));
    SY_CHECK(r1.x_bf16.empty());
}

SY_TEST(dispatch_hand, expert_masked) {
    DispatchOptions options;
    options.layout = RecvLayout::kExpertMasked;
    GlobalDispatch result = dispatch(kProblem, make_inputs(), options);
    // Capacity per expert: R * T_max = 6; rows = L * 6 = 12.
    const DispatchOutput& r0 = result.outputs[0];
    SY_CHECK_EQ(r0.num_rows, 12);
    SY_CHECK(r0.expert_offsets == (std::vector<int64_t>{0, 6, 12}));
    check_sources(
        r0, {{0, 2, 1}, {1, 1, 0}, kPad, kPad, kPad, kPad, {0, 0, 0}, {1, 1, 1}, kPad, kPad, kPad, kPad});
    std::vector<uint16_t> expected(24, 0);
    for (auto [r, a] : std::vector<std::pair<int, float>>{{0, 21}, {1, 111}, {6, 1}, {7, 111}}) {
        expected[2 * r] = bf(a);
        expected[2 * r + 1] = bf(a + 1);
    }
    SY_CHECK(r0.x_bf16 == expected);
    std::vector<float> weights(12, 0.0f);
    weights[0] = 0.75f;
    weights[1] = 0.375f;
    weights[6] = 0.5f;
    weights[7] = 0.625f;
    SY_CHECK(r0.topk_weights == weights);
    SY_CHECK(r0.num_tokens_per_expert == (std::vector<int32_t>{2, 2}));

    const DispatchOutput& r1 = result.outputs[1];
    check_sources(r1,
                  {{0, 0, 1}, {1, 0, 0}, kPad, kPad, kPad, kPad, {0, 2, 0}, kPad, kPad, kPad, kPad, kPad});
    SY_CHECK(rows_of(r1, {0, 1, 6, 2}) ==
             (std::vector<uint16_t>{bf(1), bf(2), bf(101), bf(102), bf(21), bf(22), 0, 0}));
    SY_CHECK(r1.num_tokens_per_expert == (std::vector<int32_t>{2, 1}));
}

SY_TEST(dispatch_hand, fp8_passthrough_copies_payload_and_scales) {
    // H = 2 -> one scale block; UE8M0 -> one word per token.
    auto in = make_inputs();
    for (int s = 0; s < 2; ++s) {
        in[s].payload = Payload::kFP8;
        in[s].scale_format = ScaleFormat::kUE8M0;
        in[s].x_bf16.clear();
        for (int t = 0; t < in[s].num_tokens; ++t) {
            in[s].x_fp8.push_back(static_cast<uint8_t>(0x10 * s + 2 * t));
            in[s].x_fp8.push_back(static_cast<uint8_t>(0x10 * s + 2 * t + 1));
            in[s].scales.push_back(0x70 + 0x10 * s + t);
        }
    }
    GlobalDispatch result = dispatch(kProblem, in, {});
    const DispatchOutput& r1 = result.outputs[1];  // rows (0,0), (0,2), (1,0)
    SY_CHECK(r1.payload == Payload::kFP8);
    SY_CHECK(r1.scale_format == ScaleFormat::kUE8M0);
    SY_CHECK(r1.x_bf16.empty());
    SY_CHECK(r1.x_fp8 == (std::vector<uint8_t>{0x00, 0x01, 0x04, 0x05, 0x10, 0x11}));
    SY_CHECK(r1.scales == (std::vector<uint32_t>{0x70, 0x72, 0x80}));
}

SY_TEST(dispatch_hand, quantizing_dispatch) {
    // Rank 0 token 0 = {1, 2}: amax 2, 2/448 in (2^-8, 2^-7] -> UE8M0 byte 120, s = 2^-7;
    // 1/s = 128 -> 0x70, 2/s = 256 -> 0x78.
    DispatchOptions options;
    options.quantize = true;
    options.quantize_format = ScaleFormat::kUE8M0;
    GlobalDispatch result = dispatch(kProblem, make_inputs(), options);
    const DispatchOutput& r0 = result.outputs[0];
    SY_CHECK(r0.payload == Payload::kFP8);
    SY_CHECK(r0.scale_format == ScaleFormat::kUE8M0);
    SY_CHECK_EQ(r0.x_fp8[0], 0x70);
    SY_CHECK_EQ(r0.x_fp8[1], 0x78);
    SY_CHECK_EQ(r0.scales[0], 120u);
    // Every row equals quantize_token of its source token.
    auto in = make_inputs();
    for (int r = 0; r < 3; ++r) {
        const RowSource src = r0.sources[r];
        uint8_t q[2];
        uint32_t word = 0;
        quantize_token(in[src.rank].x_bf16.data() + 2 * src.token, 2, ScaleFormat::kUE8M0, q, &word);
        SY_CHECK_EQ(r0.x_fp8[2 * r], q[0]);
        SY_CHECK_EQ(r0.x_fp8[2 * r + 1], q[1]);
        SY_CHECK_EQ(r0.scales[r], word);
    }
}

SY_TEST(dispatch_hand, absent_rank_sends_and_receives_nothing) {
    DispatchOptions options;
    options.absent_ranks = {false, true};
    auto in = make_inputs();
    in[1] = DispatchInput{};  // an absent rank's input is never read
    GlobalDispatch result = dispatch(kProblem, in, options);
    const DispatchOutput& r0 = result.outputs[0];
    check_sources(r0, {{0, 0, -1}, {0, 2, -1}});
    SY_CHECK(r0.x_bf16 == (std::vector<uint16_t>{bf(1), bf(2), bf(21), bf(22)}));
    SY_CHECK(r0.num_tokens_per_expert == (std::vector<int32_t>{1, 1}));
    SY_CHECK(r0.num_rows_per_source == (std::vector<int32_t>{2, 0}));
    SY_CHECK_EQ(result.outputs[1].num_rows, 0);
    SY_CHECK(result.outputs[1].num_tokens_per_expert == (std::vector<int32_t>{0, 0}));
    SY_CHECK_EQ(result.routing.num_tokens[1], 0);
}

SY_TEST(dispatch_hand, cached_dispatch_new_data_same_layout) {
    DispatchOptions options;
    options.layout = RecvLayout::kExpertContiguous;
    options.expert_alignment = 4;
    options.zero_padding = true;
    GlobalDispatch result = dispatch(kProblem, make_inputs(), options);
    auto in = make_inputs();
    for (auto& rank : in) {
        for (auto& v : rank.x_bf16) v = bf(-1);  // new data
        rank.topk_idx.clear();                   // ignored by a cached dispatch
        rank.topk_weights.clear();               // no weights this time
    }
    std::vector<DispatchOutput> cached = cached_dispatch(result.routing, in);
    check_sources(cached[1], {{0, 0, 1}, {1, 0, 0}, kPad, kPad, {0, 2, 0}, kPad, kPad, kPad});
    SY_CHECK(rows_of(cached[1], {0, 2, 4}) == (std::vector<uint16_t>{bf(-1), bf(-1), 0, 0, bf(-1), bf(-1)}));
    SY_CHECK(cached[1].topk_weights.empty());
    SY_CHECK(cached[1].expert_offsets == (std::vector<int64_t>{0, 4, 8}));
}

SY_TEST_MAIN()
