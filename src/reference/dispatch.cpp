// Dispatch and cached dispatch: copy every source token into the rows the receive plan gives it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail.hpp"

namespace switchyard::reference {
namespace {

// What a source rank puts on the wire: its payload, quantized first if the dispatch quantizes.
struct SentData {
    Payload payload = Payload::kBF16;
    ScaleFormat scale_format = ScaleFormat::kNone;
    std::vector<uint16_t> x_bf16;
    std::vector<uint8_t> x_fp8;
    std::vector<uint32_t> scales;
};

SentData prepare_sent(const Problem& p, const DispatchInput& in, const DispatchOptions& options) {
    SentData sent;
    if (!options.quantize) {
        sent.payload = in.payload;
        sent.scale_format = in.payload == Payload::kFP8 ? in.scale_format : ScaleFormat::kNone;
        sent.x_bf16 = in.x_bf16;
        sent.x_fp8 = in.x_fp8;
        sent.scales = in.scales;
        return sent;
    }
    const int words = num_scale_words(p.hidden, options.quantize_format);
    sent.payload = Payload::kFP8;
    sent.scale_format = options.quantize_format;
    sent.x_fp8.resize(static_cast<size_t>(in.num_tokens) * p.hidden);
    sent.scales.resize(static_cast<size_t>(in.num_tokens) * words);
    for (int t = 0; t < in.num_tokens; ++t)
        quantize_token(in.x_bf16.data() + static_cast<size_t>(t) * p.hidden, p.hidden,
                       options.quantize_format, sent.x_fp8.data() + static_cast<size_t>(t) * p.hidden,
                       sent.scales.data() + static_cast<size_t>(t) * words);
    return sent;
}

// Whether the caller gave weights: any present rank with a non-empty vector. Then every present
// rank must give exactly T_s * K (a rank with no tokens may give none).
bool check_weights(const Problem& p, const std::vector<DispatchInput>& inputs,
                   const std::vector<bool>& absent) {
    bool any = false;
    for (int s = 0; s < p.num_ranks; ++s) any = any || (!absent[s] && !inputs[s].topk_weights.empty());
    if (!any) return false;
    for (int s = 0; s < p.num_ranks; ++s) {
        const size_t expected = static_cast<size_t>(inputs[s].num_tokens) * p.topk;
        if (!absent[s] && inputs[s].topk_weights.size() != expected)
            detail::fail("rank ", s, ": topk_weights has ", inputs[s].topk_weights.size(),
                         " entries, expected num_tokens * topk = ", expected,
                         " (weights must be given on every rank or on none)");
    }
    return true;
}

// Fills every rank's output from the routing (row positions) and `inputs` (row contents).
// Shared by dispatch and cached dispatch, which is what makes their layouts byte-identical.
std::vector<DispatchOutput> build_outputs(const Routing& routing, const std::vector<DispatchInput>& inputs) {
    const Problem& p = routing.problem;
    const DispatchOptions& options = routing.options;
    const std::vector<bool> absent =
        detail::absent_mask(options.absent_ranks, p.num_ranks, "DispatchOptions");
    const bool has_weights = check_weights(p, inputs, absent);

    std::vector<SentData> sent(p.num_ranks);
    int first_present = -1;
    for (int s = 0; s < p.num_ranks; ++s) {
        if (absent[s]) continue;
        sent[s] = prepare_sent(p, inputs[s], options);
        if (first_present < 0) first_present = s;
        // One output tensor per rank, so all sources must send the same payload type.
        const SentData& first = sent[first_present];
        if (sent[s].payload != first.payload || sent[s].scale_format != first.scale_format)
            detail::fail("rank ", s, " sends a different payload type or scale format than rank ",
                         first_present, "; all ranks must dispatch the same dtype");
    }
    const Payload payload = first_present >= 0 ? sent[first_present].payload
                                               : (options.quantize ? Payload::kFP8 : Payload::kBF16);
    const ScaleFormat format = first_present >= 0
                                   ? sent[first_present].scale_format
                                   : (options.quantize ? options.quantize_format : ScaleFormat::kNone);
    const size_t hidden = p.hidden;
    const size_t words = num_scale_words(p.hidden, format);
    const size_t topk = p.topk;
    const int num_local = p.local_experts();
    const bool rank_major = options.layout == RecvLayout::kRankMajor;

    std::vector<DispatchOutput> outputs(p.num_ranks);
    for (int q = 0; q < p.num_ranks; ++q) {
        detail::ReceivePlan plan = detail::plan_receive(routing, absent, q);
        DispatchOutput& out = outputs[q];
        const size_t rows = plan.num_rows;
        out.layout = options.layout;
        out.num_rows = plan.num_rows;
        out.payload = payload;
        out.scale_format = format;
        // Everything starts at zero, so padding and invalid rows are zero without further work.
        if (payload == Payload::kBF16) out.x_bf16.assign(rows * hidden, 0);
        if (payload == Payload::kFP8) {
            out.x_fp8.assign(rows * hidden, 0);
            out.scales.assign(rows * words, 0);
        }
        if (rank_major) out.topk_idx.assign(rows * topk, -1);
        if (has_weights) out.topk_weights.assign(rank_major ? rows * topk : rows, 0.0f);

        for (size_t r = 0; r < rows; ++r) {
            const RowSource src = plan.sources[r];
            if (src.rank < 0) continue;  // padding or an unused masked row
            const SentData& from = sent[src.rank];
            const size_t t = src.token;
            if (payload == Payload::kBF16) {
                std::copy_n(from.x_bf16.begin() + t * hidden, hidden, out.x_bf16.begin() + r * hidden);
            } else {
                std::copy_n(from.x_fp8.begin() + t * hidden, hidden, out.x_fp8.begin() + r * hidden);
                std::copy_n(from.scales.begin() + t * words, words, out.scales.begin() + r * words);
            }
            const std::vector<int64_t>& idx = routing.topk_idx[src.rank];
            const std::vector<float>& weights = inputs[src.rank].topk_weights;
            if (rank_major) {
                // Only the slots this rank owns are visible; the others read -1 / 0.
                for (size_t k = 0; k < topk; ++k) {
                    const int64_t local = idx[t * topk + k] - static_cast<int64_t>(q) * num_local;
                    if (idx[t * topk + k] < 0 || local < 0 || local >= num_local) continue;
                    out.topk_idx[r * topk + k] = static_cast<int32_t>(local);
                    if (has_weights) out.topk_weights[r * topk + k] = weights[t * topk + k];
                }
            } else if (has_weights) {
                out.topk_weights[r] = weights[t * topk + src.k];
            }
        }
        out.sources = std::move(plan.sources);
        out.num_tokens_per_expert = std::move(plan.num_tokens_per_expert);
        out.num_rows_per_source = std::move(plan.num_rows_per_source);
        out.expert_offsets = std::move(plan.expert_offsets);
    }
    return outputs;
}

void check_input_count(const Problem& p, size_t count, const char* what) {
    if (count != static_cast<size_t>(p.num_ranks))
        detail::fail(what, " got ", count, " inputs, expected one per rank (", p.num_ranks, ")");
}

}  // namespace

GlobalDispatch dispatch(const Problem& problem, const std::vector<DispatchInput>& inputs,
                        const DispatchOptions& options) {
    validate_problem(problem);
    detail::validate_dispatch_options(problem, options);
    check_input_count(problem, inputs.size(), "dispatch");
    const std::vector<bool> absent =
        detail::absent_mask(options.absent_ranks, problem.num_ranks, "DispatchOptions");

    // An absent rank's input is never read: it is recorded as a rank with no tokens.
    GlobalDispatch result;
    Routing& routing = result.routing;
    routing.problem = problem;
    routing.options = options;
    routing.num_tokens.assign(problem.num_ranks, 0);
    routing.topk_idx.assign(problem.num_ranks, {});
    routing.topk_weights.assign(problem.num_ranks, {});
    for (int s = 0; s < problem.num_ranks; ++s) {
        if (absent[s]) continue;
        const DispatchInput& in = inputs[s];
        validate_routing(problem, s, in.num_tokens, in.topk_idx);
        detail::validate_payload(problem, s, in, options.quantize);
        routing.num_tokens[s] = in.num_tokens;
        routing.topk_idx[s] = in.topk_idx;
        routing.topk_weights[s] = in.topk_weights;
    }
    detail::validate_routing_struct(routing);
    result.outputs = build_outputs(routing, inputs);
    return result;
}

std::vector<DispatchOutput> cached_dispatch(const Routing& routing,
                                            const std::vector<DispatchInput>& inputs) {
    detail::validate_routing_struct(routing);
    const Problem& p = routing.problem;
    check_input_count(p, inputs.size(), "cached_dispatch");
    const std::vector<bool> absent =
        detail::absent_mask(routing.options.absent_ranks, p.num_ranks, "DispatchOptions");
    for (int s = 0; s < p.num_ranks; ++s) {
        if (absent[s]) continue;
        if (inputs[s].num_tokens != routing.num_tokens[s])
            detail::fail("cached_dispatch rank ", s, ": num_tokens ", inputs[s].num_tokens,
                         " differs from the routing's ", routing.num_tokens[s],
                         "; a cached dispatch must send the same tokens");
        detail::validate_payload(p, s, inputs[s], routing.options.quantize);
    }
    // Weights, if any, come from the new inputs (none given = no weights in the output).
    return build_outputs(routing, inputs);
}

}  // namespace switchyard::reference
