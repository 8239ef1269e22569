#include "cpu_round_trip.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "routing.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::bench {
namespace {

namespace ref = switchyard::reference;

std::vector<ref::DispatchInput> make_inputs(const CpuRoundTripShape& shape) {
    std::vector<ref::DispatchInput> inputs(shape.ranks);
    for (int s = 0; s < shape.ranks; ++s) {
        ref::DispatchInput& in = inputs[s];
        in.num_tokens = shape.tokens_per_rank;
        in.payload = ref::Payload::kBF16;
        std::mt19937 rng(static_cast<uint32_t>(rank_seed(shape.seed, s)));
        std::normal_distribution<float> value(0.0f, 1.0f);
        in.x_bf16.resize(static_cast<size_t>(shape.tokens_per_rank) * shape.hidden);
        for (uint16_t& v : in.x_bf16) v = ref::float_to_bf16(value(rng));
        in.topk_idx =
            random_topk_routing(shape.tokens_per_rank, shape.topk, shape.experts, rank_seed(shape.seed, s));
    }
    return inputs;
}

ref::Problem make_problem(const CpuRoundTripShape& shape) {
    ref::Problem problem;
    problem.num_ranks = shape.ranks;
    problem.num_experts = shape.experts;
    problem.hidden = shape.hidden;
    problem.topk = shape.topk;
    problem.max_tokens_per_rank = shape.tokens_per_rank;
    return problem;
}

// Number of ranks that own at least one of token t's experts: how many copies combine adds up.
int receiving_ranks(const CpuRoundTripShape& shape, const std::vector<int64_t>& topk_idx, int t) {
    const int experts_per_rank = shape.experts / shape.ranks;
    std::vector<char> reached(shape.ranks, 0);
    for (int k = 0; k < shape.topk; ++k) {
        const int64_t e = topk_idx[static_cast<size_t>(t) * shape.topk + k];
        if (e >= 0) reached[e / experts_per_rank] = 1;
    }
    return static_cast<int>(std::count(reached.begin(), reached.end(), 1));
}

// Rank-major combine of the unmodified dispatch output must give x * (receiving ranks), rounded
// to bf16 once: the fp32 sum of n equal bf16 values is exact for n <= 4, so this is bit-exact.
int64_t count_combine_mismatches(const CpuRoundTripShape& shape,
                                 const std::vector<ref::DispatchInput>& inputs,
                                 const std::vector<ref::CombineOutput>& combined) {
    int64_t mismatches = 0;
    for (int s = 0; s < shape.ranks; ++s) {
        for (int t = 0; t < shape.tokens_per_rank; ++t) {
            const float n = static_cast<float>(receiving_ranks(shape, inputs[s].topk_idx, t));
            for (int h = 0; h < shape.hidden; ++h) {
                const size_t i = static_cast<size_t>(t) * shape.hidden + h;
                const uint16_t expected = ref::float_to_bf16(ref::bf16_to_float(inputs[s].x_bf16[i]) * n);
                mismatches += combined[s].out[i] != expected;
            }
        }
    }
    return mismatches;
}

// Rows of a bf16 dispatch must be bit-exact copies of their source tokens.
int64_t count_copy_mismatches(const CpuRoundTripShape& shape, const std::vector<ref::DispatchInput>& inputs,
                              const std::vector<ref::DispatchOutput>& outputs) {
    int64_t mismatches = 0;
    for (const ref::DispatchOutput& out : outputs) {
        for (int64_t row = 0; row < out.num_rows; ++row) {
            const ref::RowSource& src = out.sources[row];
            const uint16_t* got = out.x_bf16.data() + row * shape.hidden;
            const uint16_t* want =
                inputs[src.rank].x_bf16.data() + static_cast<size_t>(src.token) * shape.hidden;
            mismatches += !std::equal(got, got + shape.hidden, want);
        }
    }
    return mismatches;
}

struct Fp8Error {
    double max_relative = 0.0;       // over values in e4m3's normal range after scaling
    double max_abs_over_amax = 0.0;  // |error| / amax of the value's 128-channel block
};

// Dequantizes every received FP8 row and compares it with the bf16 source value.
Fp8Error measure_fp8_error(const CpuRoundTripShape& shape, const std::vector<ref::DispatchInput>& inputs,
                           const std::vector<ref::DispatchOutput>& outputs) {
    Fp8Error error;
    const int words = ref::num_scale_words(shape.hidden, ref::ScaleFormat::kFloat32);
    for (const ref::DispatchOutput& out : outputs) {
        for (int64_t row = 0; row < out.num_rows; ++row) {
            const ref::RowSource& src = out.sources[row];
            const uint16_t* x =
                inputs[src.rank].x_bf16.data() + static_cast<size_t>(src.token) * shape.hidden;
            const uint32_t* scales = out.scales.data() + row * words;
            for (int block = 0; block * 128 < shape.hidden; ++block) {
                const int end = std::min(shape.hidden, (block + 1) * 128);
                float amax = 1e-4f;
                for (int h = block * 128; h < end; ++h)
                    amax = std::max(amax, std::fabs(ref::bf16_to_float(x[h])));
                for (int h = block * 128; h < end; ++h) {
                    const double want = ref::bf16_to_float(x[h]);
                    const double got =
                        ref::dequantize_value(out.x_fp8[row * shape.hidden + h], scales, h, out.scale_format);
                    const double abs_error = std::fabs(got - want);
                    error.max_abs_over_amax = std::max(error.max_abs_over_amax, abs_error / amax);
                    // Below 2^-6 after scaling e4m3 is subnormal and its relative error grows; the
                    // absolute figure above covers those values.
                    if (std::fabs(want) * 448.0 / amax >= 1.0 / 64.0) {
                        error.max_relative = std::max(error.max_relative, abs_error / std::fabs(want));
                    }
                }
            }
        }
    }
    return error;
}

}  // namespace

bool run_cpu_round_trip(const CpuRoundTripShape& shape, const std::string& gpu_note) {
    const ref::Problem problem = make_problem(shape);
    const std::vector<ref::DispatchInput> inputs = make_inputs(shape);

    std::printf(
        "Switchyard CPU reference round trip: EP%d, %d tokens/rank, hidden %d, top-%d of %d experts, bf16\n",
        shape.ranks, shape.tokens_per_rank, shape.hidden, shape.topk, shape.experts);
    std::printf(
        "(rank q owns experts [q*%d, (q+1)*%d); a token is sent once to each rank owning one of its "
        "experts)\n\n",
        problem.local_experts(), problem.local_experts());

    // 1. Dispatch, rank-major layout.
    const ref::GlobalDispatch dispatched = ref::dispatch(problem, inputs, ref::DispatchOptions{});
    std::printf("dispatch (rank-major): rows received per rank\n");
    std::printf("  rank | rows | from ranks 0..%d          | tokens per local expert\n", shape.ranks - 1);
    int64_t total_rows = 0;
    for (int q = 0; q < shape.ranks; ++q) {
        const ref::DispatchOutput& out = dispatched.outputs[q];
        total_rows += out.num_rows;
        std::string sources, experts;
        for (int32_t n : out.num_rows_per_source) sources += (sources.empty() ? "" : " ") + std::to_string(n);
        for (int32_t n : out.num_tokens_per_expert)
            experts += (experts.empty() ? "" : " ") + std::to_string(n);
        std::printf("  %4d | %4lld | %-25s | %s\n", q, static_cast<long long>(out.num_rows), sources.c_str(),
                    experts.c_str());
    }
    const int64_t total_tokens = static_cast<int64_t>(shape.ranks) * shape.tokens_per_rank;
    std::printf(
        "  %lld rows for %lld tokens: %.2f receiving ranks per token on average (top-%d picks %d experts)\n",
        static_cast<long long>(total_rows), static_cast<long long>(total_tokens),
        static_cast<double>(total_rows) / static_cast<double>(total_tokens), shape.topk, shape.topk);
    const int64_t copy_mismatches = count_copy_mismatches(shape, inputs, dispatched.outputs);
    std::printf("  received rows are bit-exact copies of their source tokens: %s\n\n",
                copy_mismatches == 0 ? "yes" : "NO");

    // 2. Combine the unmodified rows back: each token comes home summed over its receiving ranks.
    std::vector<ref::CombineInput> combine_inputs(shape.ranks);
    for (int q = 0; q < shape.ranks; ++q) combine_inputs[q].y = dispatched.outputs[q].x_bf16;
    const std::vector<ref::CombineHomeInput> home_inputs(shape.ranks);
    const std::vector<ref::CombineOutput> combined =
        ref::combine(dispatched.routing, combine_inputs, home_inputs, ref::CombineOptions{});
    const int64_t combine_mismatches = count_combine_mismatches(shape, inputs, combined);
    std::printf("combine (rank-major, fp32 accumulation, one bf16 rounding):\n");
    std::printf(
        "  combine(dispatch(x)) == x * (number of receiving ranks), bit for bit: %s (%lld mismatching "
        "values)\n\n",
        combine_mismatches == 0 ? "yes" : "NO", static_cast<long long>(combine_mismatches));

    // 3. The same dispatch quantizing to FP8 (e4m3, one fp32 scale per 128 channels) on the way.
    ref::DispatchOptions fp8_options;
    fp8_options.quantize = true;
    fp8_options.quantize_format = ref::ScaleFormat::kFloat32;
    const ref::GlobalDispatch fp8 = ref::dispatch(problem, inputs, fp8_options);
    const Fp8Error fp8_error = measure_fp8_error(shape, inputs, fp8.outputs);
    std::printf("FP8 dispatch (quantized in the dispatch, e4m3 + fp32 scale per 128 channels):\n");
    std::printf("  max relative error after dequantization: %.2f%% (e4m3 keeps 3 mantissa bits: <= 6.25%%)\n",
                100.0 * fp8_error.max_relative);
    std::printf("  max absolute error / block amax: %.4f; bytes per row %d instead of %d\n\n",
                fp8_error.max_abs_over_amax, shape.hidden + 4 * ref::num_scale_blocks(shape.hidden),
                2 * shape.hidden);

    const bool ok =
        copy_mismatches == 0 && combine_mismatches == 0 && fp8_error.max_relative <= 0.0625 + 1e-6;
    std::printf("%s\n", ok ? "all checks passed" : "CHECKS FAILED");
    if (!gpu_note.empty()) std::printf("%s\n", gpu_note.c_str());
    return ok;
}

}  // namespace switchyard::bench
