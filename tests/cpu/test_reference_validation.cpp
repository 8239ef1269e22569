// Input errors of the CPU reference: each throws InvalidArgument with a message naming the problem.
#include <cstdint>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard::reference;
using switchyard::InvalidArgument;

namespace {

Problem small_problem() {
    return Problem{2, 4, 8, 2, 3};
}  // R, E, H, K, T_max

// Two ranks with valid bf16 inputs and the given routing on rank 1.
std::vector<DispatchInput> inputs_with(int tokens1, std::vector<int64_t> idx1) {
    const Problem p = small_problem();
    std::vector<DispatchInput> in(2);
    in[0].num_tokens = 1;
    in[0].x_bf16.assign(p.hidden, 0);
    in[0].topk_idx = {0, 3};
    in[1].num_tokens = tokens1;
    in[1].x_bf16.assign(static_cast<size_t>(tokens1) * p.hidden, 0);
    in[1].topk_idx = std::move(idx1);
    return in;
}

}  // namespace

SY_TEST(validation, problem_shape) {
    SY_CHECK_THROWS_WITH(validate_problem(Problem{3, 8, 8, 2, 4}), InvalidArgument,
                         "num_experts (8) must be a multiple of num_ranks (3)");
    SY_CHECK_THROWS_WITH(validate_problem(Problem{0, 8, 8, 2, 4}), InvalidArgument,
                         "num_ranks must be >= 1, got 0");
    SY_CHECK_THROWS_WITH(validate_problem(Problem{2, 8, 0, 2, 4}), InvalidArgument,
                         "hidden must be >= 1, got 0");
    SY_CHECK_THROWS_WITH(validate_problem(Problem{2, 8, 8, 0, 4}), InvalidArgument,
                         "topk must be >= 1, got 0");
    SY_CHECK_THROWS_WITH(validate_problem(Problem{2, 8, 8, 2}), InvalidArgument,
                         "max_tokens_per_rank must be >= 1, got 0");
    validate_problem(small_problem());  // must not throw
    SY_CHECK_THROWS_WITH(dispatch(Problem{3, 4, 8, 2, 3}, {}, {}), InvalidArgument, "multiple of num_ranks");
}

SY_TEST(validation, routing_entries) {
    const Problem p = small_problem();
    SY_CHECK_THROWS_WITH(validate_routing(p, 1, 4, std::vector<int64_t>(8, 0)), InvalidArgument,
                         "rank 1: num_tokens 4 is outside [0, max_tokens_per_rank = 3]");
    SY_CHECK_THROWS_WITH(validate_routing(p, 0, 2, {0, 1, 2}), InvalidArgument,
                         "topk_idx has 3 entries, expected num_tokens * topk = 2 * 2 = 4");
    SY_CHECK_THROWS_WITH(validate_routing(p, 1, 2, {0, 1, 2, 4}), InvalidArgument,
                         "rank 1 token 1 slot 1: expert id 4 is outside [-1, num_experts = 4)");
    SY_CHECK_THROWS_WITH(validate_routing(p, 0, 2, {-2, 1, 2, 3}), InvalidArgument,
                         "rank 0 token 0 slot 0: expert id -2 is outside");
    SY_CHECK_THROWS_WITH(validate_routing(p, 2, 2, {0, 1, 2, 3}), InvalidArgument,
                         "rank 2 is outside [0, num_ranks = 2)");
    SY_CHECK_THROWS_WITH(validate_routing(p, -1, 2, {0, 1, 2, 3}), InvalidArgument,
                         "rank -1 is outside [0, num_ranks = 2)");
    validate_routing(p, 0, 2, {-1, -1, 3, 0});  // -1 slots are fine
    validate_routing(p, 0, 0, {});              // no tokens is fine
}

SY_TEST(validation, dispatch_rejects_bad_routing) {
    const Problem p = small_problem();
    SY_CHECK_THROWS_WITH(dispatch(p, inputs_with(2, {0, 1, 4, -1}), {}), InvalidArgument,
                         "rank 1 token 1 slot 0: expert id 4");
    SY_CHECK_THROWS_WITH(dispatch(p, inputs_with(2, {0, 1, -2, -1}), {}), InvalidArgument, "expert id -2");
    SY_CHECK_THROWS_WITH(dispatch(p, inputs_with(4, std::vector<int64_t>(8, 0)), {}), InvalidArgument,
                         "num_tokens 4 is outside");
    DispatchOptions masked;
    masked.layout = RecvLayout::kExpertMasked;
    SY_CHECK_THROWS_WITH(dispatch(p, inputs_with(1, {2, 2}), masked), InvalidArgument,
                         "rank 1 token 0 slot 1: expert 2 already appears in slot 0");
}

SY_TEST(validation, dispatch_rejects_bad_inputs) {
    const Problem p = small_problem();
    auto in = inputs_with(1, {1, 2});
    in[1].x_bf16.resize(3);
    SY_CHECK_THROWS_WITH(dispatch(p, in, {}), InvalidArgument, "rank 1: x_bf16 has 3 values");

    in = inputs_with(1, {1, 2});
    in[0].topk_weights = {0.5f, 0.5f};
    SY_CHECK_THROWS_WITH(dispatch(p, in, {}), InvalidArgument, "rank 1: topk_weights has 0 entries");

    in = inputs_with(1, {1, 2});
    in[1].payload = Payload::kFP8;
    in[1].x_fp8.assign(p.hidden, 0);
    SY_CHECK_THROWS_WITH(dispatch(p, in, {}), InvalidArgument, "needs scale_format kFloat32 or kUE8M0");
    in[1].scale_format = ScaleFormat::kFloat32;
    in[1].scales = {0};
    SY_CHECK_THROWS_WITH(dispatch(p, in, {}), InvalidArgument, "rank 1 sends a different payload type");
    DispatchOptions quantize;
    quantize.quantize = true;
    SY_CHECK_THROWS_WITH(dispatch(p, in, quantize), InvalidArgument, "payload must be bf16");

    DispatchOptions options;
    options.expert_alignment = 0;
    SY_CHECK_THROWS_WITH(dispatch(p, inputs_with(1, {1, 2}), options), InvalidArgument,
                         "expert_alignment must be >= 1, got 0");
    options = {};
    options.absent_ranks = {true};
    SY_CHECK_THROWS_WITH(dispatch(p, inputs_with(1, {1, 2}), options), InvalidArgument,
                         "absent_ranks has 1 entries");
    SY_CHECK_THROWS_WITH(dispatch(p, {DispatchInput{}}, {}), InvalidArgument,
                         "got 1 inputs, expected one per rank");
}

SY_TEST(validation, cached_dispatch_and_combine_inputs) {
    const Problem p = small_problem();
    GlobalDispatch result = dispatch(p, inputs_with(1, {1, 2}), {});
    auto other = inputs_with(2, {1, 2, 3, 0});
    SY_CHECK_THROWS_WITH(cached_dispatch(result.routing, other), InvalidArgument,
                         "cached_dispatch rank 1: num_tokens 2 differs from the routing's 1");

    // Rank 0 receives rows (0,0) and (1,0): 2 rows; give it one.
    std::vector<CombineInput> y(2);
    y[0].y.assign(static_cast<size_t>(1) * p.hidden, 0);
    y[1].y.assign(static_cast<size_t>(result.outputs[1].num_rows) * p.hidden, 0);
    SY_CHECK_THROWS_WITH(combine(result.routing, y, {}, {}), InvalidArgument,
                         "combine rank 0: y has 8 values, expected num_rows * hidden = 2 * 8");
    y[0].y.assign(static_cast<size_t>(result.outputs[0].num_rows) * p.hidden, 0);
    CombineOptions weighted;
    weighted.weighted = true;
    SY_CHECK_THROWS_WITH(combine(result.routing, y, {}, weighted), InvalidArgument,
                         "rank-major layout is always a flat unweighted sum");
    std::vector<CombineHomeInput> home(2);
    home[1].bias0.assign(5, 0);
    SY_CHECK_THROWS_WITH(combine(result.routing, y, home, {}), InvalidArgument,
                         "combine home rank 1: bias0 has 5 values, expected 0 or T * hidden = 8");

    DispatchOptions contiguous;
    contiguous.layout = RecvLayout::kExpertContiguous;
    GlobalDispatch expert = dispatch(p, inputs_with(1, {1, 2}), contiguous);
    for (int q = 0; q < 2; ++q) y[q].y.assign(static_cast<size_t>(expert.outputs[q].num_rows) * p.hidden, 0);
    SY_CHECK_THROWS_WITH(combine(expert.routing, y, {}, weighted), InvalidArgument,
                         "combine home rank 0: weighted combine needs T * topk = 2 weights, got 0");
}

SY_TEST_MAIN()
