// Combine: reduce the rows every receiving rank sends back into each home rank's tokens, in the
// fixed order documented in reference.hpp (fp32 accumulation, one bf16 rounding at the end).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail.hpp"

namespace switchyard::reference {
namespace {

// Where each home token's contributions sit in the receivers' combine inputs.
struct RowIndex {
    // Rank-major: token_row[q][s][t] = row of (s, t) on q, or -1.
    std::vector<std::vector<std::vector<int64_t>>> token_row;
    // Expert-major: slot_row[s][t * K + k] = row of (s, t, k) on the owner of its expert, or -1.
    std::vector<std::vector<int64_t>> slot_row;
};

RowIndex index_rows(const Routing& routing, const std::vector<detail::ReceivePlan>& plans) {
    const Problem& p = routing.problem;
    RowIndex index;
    index.token_row.resize(p.num_ranks);
    index.slot_row.resize(p.num_ranks);
    for (int s = 0; s < p.num_ranks; ++s)
        index.slot_row[s].assign(static_cast<size_t>(routing.num_tokens[s]) * p.topk, -1);
    for (int q = 0; q < p.num_ranks; ++q) {
        index.token_row[q].resize(p.num_ranks);
        for (int s = 0; s < p.num_ranks; ++s) index.token_row[q][s].assign(routing.num_tokens[s], -1);
        for (int64_t r = 0; r < plans[q].num_rows; ++r) {
            const RowSource src = plans[q].sources[r];
            if (src.rank < 0) continue;
            if (src.k < 0)
                index.token_row[q][src.rank][src.token] = r;
            else
                index.slot_row[src.rank][static_cast<size_t>(src.token) * p.topk + src.k] = r;
        }
    }
    return index;
}

// Whether any present receiver sent row weights; then every present receiver must send them all.
bool check_inputs(const Routing& routing, const std::vector<detail::ReceivePlan>& plans,
                  const std::vector<CombineInput>& inputs, const std::vector<bool>& missing) {
    const Problem& p = routing.problem;
    const bool rank_major = routing.options.layout == RecvLayout::kRankMajor;
    bool any_weights = false;
    for (int q = 0; q < p.num_ranks; ++q) {
        if (missing[q]) continue;
        const size_t rows = plans[q].num_rows;
        if (inputs[q].y.size() != rows * p.hidden)
            detail::fail("combine rank ", q, ": y has ", inputs[q].y.size(),
                         " values, expected num_rows * hidden = ", rows, " * ", p.hidden,
                         " (rows in the layout its dispatch produced)");
        any_weights = any_weights || !inputs[q].row_weights.empty();
    }
    if (!any_weights) return false;
    for (int q = 0; q < p.num_ranks; ++q) {
        const size_t expected =
            rank_major ? static_cast<size_t>(plans[q].num_rows) * p.topk : plans[q].num_rows;
        if (!missing[q] && inputs[q].row_weights.size() != expected)
            detail::fail("combine rank ", q, ": row_weights has ", inputs[q].row_weights.size(),
                         " entries, expected ", expected, rank_major ? " (num_rows * topk)" : " (num_rows)",
                         "; give row weights on every rank or on none");
    }
    return true;
}

const std::vector<uint16_t>& checked_bias(const std::vector<uint16_t>& bias, size_t expected, int s,
                                          const char* name) {
    if (!bias.empty() && bias.size() != expected)
        detail::fail("combine home rank ", s, ": ", name, " has ", bias.size(),
                     " values, expected 0 or T * hidden = ", expected);
    return bias;
}

}  // namespace

std::vector<CombineOutput> combine(const Routing& routing, const std::vector<CombineInput>& inputs,
                                   const std::vector<CombineHomeInput>& home_inputs,
                                   const CombineOptions& options) {
    detail::validate_routing_struct(routing);
    const Problem& p = routing.problem;
    const int num_ranks = p.num_ranks;
    const bool rank_major = routing.options.layout == RecvLayout::kRankMajor;
    if (inputs.size() != static_cast<size_t>(num_ranks))
        detail::fail("combine got ", inputs.size(), " inputs, expected one per rank (", num_ranks, ")");
    if (!home_inputs.empty() && home_inputs.size() != static_cast<size_t>(num_ranks))
        detail::fail("combine got ", home_inputs.size(), " home inputs, expected none or one per rank (",
                     num_ranks, ")");
    if (rank_major && (options.weighted || options.hierarchical))
        detail::fail(
            "combine of a rank-major layout is always a flat unweighted sum; weighted and hierarchical "
            "apply to expert-major layouts only");

    // Ranks absent at dispatch received nothing; ranks absent now send nothing back.
    const int num_nodes = options.num_nodes;
    if (num_nodes < 1 || num_ranks % num_nodes != 0)
        detail::fail("combine: num_nodes = ", num_nodes, " must be at least 1 and divide the ", num_ranks,
                     " ranks (nodes are equal, contiguous blocks of ranks)");
    const int ranks_per_node = num_ranks / num_nodes;
    const std::vector<bool> dispatch_absent =
        detail::absent_mask(routing.options.absent_ranks, num_ranks, "DispatchOptions");
    const std::vector<bool> combine_absent =
        detail::absent_mask(options.absent_ranks, num_ranks, "CombineOptions");
    std::vector<bool> missing(num_ranks);
    std::vector<detail::ReceivePlan> plans(num_ranks);
    for (int q = 0; q < num_ranks; ++q) {
        missing[q] = dispatch_absent[q] || combine_absent[q];
        plans[q] = detail::plan_receive(routing, dispatch_absent, q);
    }
    const bool has_row_weights = check_inputs(routing, plans, inputs, missing);
    const RowIndex index = index_rows(routing, plans);

    const size_t hidden = p.hidden;
    const size_t topk = p.topk;
    const int num_local = p.local_experts();
    std::vector<CombineOutput> outputs(num_ranks);
    for (int s = 0; s < num_ranks; ++s) {
        const size_t num_tokens = routing.num_tokens[s];
        CombineOutput& out = outputs[s];
        out.out.assign(num_tokens * hidden, 0);  // an absent home keeps zeros
        if (has_row_weights) out.combined_topk_weights.assign(num_tokens * topk, 0.0f);
        if (missing[s]) continue;

        const CombineHomeInput no_home_input;
        const CombineHomeInput& home = home_inputs.empty() ? no_home_input : home_inputs[s];
        const auto& bias0 = checked_bias(home.bias0, num_tokens * hidden, s, "bias0");
        const auto& bias1 = checked_bias(home.bias1, num_tokens * hidden, s, "bias1");
        const std::vector<float>& weights =
            home.topk_weights.empty() ? routing.topk_weights[s] : home.topk_weights;
        if (options.weighted && weights.size() != num_tokens * topk)
            detail::fail("combine home rank ", s, ": weighted combine needs T * topk = ", num_tokens * topk,
                         " weights, got ", weights.size(),
                         " (give CombineHomeInput::topk_weights or dispatch weights)");

        const std::vector<int64_t>& idx = routing.topk_idx[s];
        auto owner = [&](size_t slot) {
            return idx[slot] < 0 ? -1 : static_cast<int>(idx[slot] / num_local);
        };
        // y of slot (t, k) at channel h, read from the row its owner sent back.
        auto slot_value = [&](size_t slot, size_t h) {
            const int64_t row = index.slot_row[s][slot];
            return bf16_to_float(inputs[owner(slot)].y[row * hidden + h]);
        };
        auto add_slot = [&](float acc, size_t slot, size_t h) {
            const float y = slot_value(slot, h);
            return options.weighted ? std::fmaf(weights[slot], y, acc) : acc + y;
        };

        // The single-node order restricted to receiving ranks [first, last): added to `acc`; `any`
        // says whether one of them contributed.
        auto contributions = [&](float acc, int first, int last, size_t t, size_t h, bool& any) {
            if (rank_major) {
                for (int q = first; q < last; ++q) {
                    const int64_t row = index.token_row[q][s][t];
                    if (missing[q] || row < 0) continue;
                    any = true;
                    acc += bf16_to_float(inputs[q].y[row * hidden + h]);
                }
            } else if (options.hierarchical) {
                // Each receiver reduces its own slots (k ascending) and rounds the partial to bf16.
                for (int q = first; q < last; ++q) {
                    if (missing[q]) continue;
                    bool mine = false;
                    float partial = 0.0f;
                    for (size_t k = 0; k < topk; ++k) {
                        if (owner(t * topk + k) != q) continue;
                        mine = true;
                        partial = add_slot(partial, t * topk + k, h);
                    }
                    if (mine) acc += bf16_to_float(float_to_bf16(partial));
                    any = any || mine;
                }
            } else {
                for (size_t k = 0; k < topk; ++k) {
                    const int q = owner(t * topk + k);
                    if (q < first || q >= last || missing[q]) continue;
                    any = true;
                    acc = add_slot(acc, t * topk + k, h);
                }
            }
            return acc;
        };

        for (size_t t = 0; t < num_tokens; ++t) {
            for (size_t h = 0; h < hidden; ++h) {
                float acc = 0.0f;
                if (!bias0.empty()) acc += bf16_to_float(bias0[t * hidden + h]);
                if (!bias1.empty()) acc += bf16_to_float(bias1[t * hidden + h]);
                bool any = false;
                if (num_nodes == 1) {
                    acc = contributions(acc, 0, num_ranks, t, h, any);
                } else {
                    // Several nodes: one bf16 partial per node, summed over nodes ascending.
                    for (int node = 0; node < num_nodes; ++node) {
                        bool from_node = false;
                        const float partial = contributions(0.0f, node * ranks_per_node,
                                                            (node + 1) * ranks_per_node, t, h, from_node);
                        if (from_node) acc += bf16_to_float(float_to_bf16(partial));
                    }
                }
                out.out[t * hidden + h] = float_to_bf16(acc);
            }
            if (!has_row_weights) continue;
            for (size_t k = 0; k < topk; ++k) {
                const int q = owner(t * topk + k);
                if (q < 0 || missing[q]) continue;
                out.combined_topk_weights[t * topk + k] =
                    rank_major ? inputs[q].row_weights[index.token_row[q][s][t] * topk + k]
                               : inputs[q].row_weights[index.slot_row[s][t * topk + k]];
            }
        }
    }
    return outputs;
}

}  // namespace switchyard::reference
