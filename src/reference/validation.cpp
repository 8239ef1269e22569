// Input checks of the reference. Each message names the rank/token/slot, the bad value and the
// accepted range, so a caller can find the offending entry without a debugger.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail.hpp"

namespace switchyard::reference {

void validate_problem(const Problem& p) {
    if (p.num_ranks < 1) detail::fail("num_ranks must be >= 1, got ", p.num_ranks);
    if (p.num_experts < 1) detail::fail("num_experts must be >= 1, got ", p.num_experts);
    if (p.num_experts % p.num_ranks != 0)
        detail::fail("num_experts (", p.num_experts, ") must be a multiple of num_ranks (", p.num_ranks,
                     "): every rank owns the same number of experts");
    if (p.hidden < 1) detail::fail("hidden must be >= 1, got ", p.hidden);
    if (p.topk < 1) detail::fail("topk must be >= 1, got ", p.topk);
    if (p.max_tokens_per_rank < 1)
        detail::fail("max_tokens_per_rank must be >= 1, got ", p.max_tokens_per_rank);
}

void validate_routing(const Problem& p, int rank, int num_tokens, const std::vector<int64_t>& topk_idx) {
    if (rank < 0 || rank >= p.num_ranks)
        detail::fail("rank ", rank, " is outside [0, num_ranks = ", p.num_ranks, ")");
    if (num_tokens < 0 || num_tokens > p.max_tokens_per_rank)
        detail::fail("rank ", rank, ": num_tokens ", num_tokens,
                     " is outside [0, max_tokens_per_rank = ", p.max_tokens_per_rank, "]");
    const size_t expected = static_cast<size_t>(num_tokens) * p.topk;
    if (topk_idx.size() != expected)
        detail::fail("rank ", rank, ": topk_idx has ", topk_idx.size(),
                     " entries, expected num_tokens * topk = ", num_tokens, " * ", p.topk, " = ", expected);
    for (int t = 0; t < num_tokens; ++t) {
        for (int k = 0; k < p.topk; ++k) {
            const int64_t idx = topk_idx[static_cast<size_t>(t) * p.topk + k];
            if (idx < -1 || idx >= p.num_experts)
                detail::fail("rank ", rank, " token ", t, " slot ", k, ": expert id ", idx,
                             " is outside [-1, num_experts = ", p.num_experts, ") (-1 marks an empty slot)");
        }
    }
}

namespace detail {

std::vector<bool> absent_mask(const std::vector<bool>& absent_ranks, int num_ranks, const char* what) {
    if (absent_ranks.empty()) return std::vector<bool>(num_ranks, false);
    if (static_cast<int>(absent_ranks.size()) != num_ranks)
        fail(what, ".absent_ranks has ", absent_ranks.size(), " entries; give none or one per rank (",
             num_ranks, ")");
    return absent_ranks;
}

void validate_dispatch_options(const Problem& p, const DispatchOptions& options) {
    if (options.layout != RecvLayout::kRankMajor && options.layout != RecvLayout::kExpertContiguous &&
        options.layout != RecvLayout::kExpertMasked)
        fail("unknown layout value ", static_cast<int>(options.layout));
    if (options.expert_alignment < 1) fail("expert_alignment must be >= 1, got ", options.expert_alignment);
    if (options.quantize && options.quantize_format != ScaleFormat::kFloat32 &&
        options.quantize_format != ScaleFormat::kUE8M0)
        fail("quantize_format must be kFloat32 or kUE8M0 when quantize is set");
    absent_mask(options.absent_ranks, p.num_ranks, "DispatchOptions");
}

void validate_payload(const Problem& p, int rank, const DispatchInput& in, bool quantize) {
    const size_t elements = static_cast<size_t>(in.num_tokens) * p.hidden;
    if (in.payload == Payload::kBF16) {
        if (in.x_bf16.size() != elements)
            fail("rank ", rank, ": x_bf16 has ", in.x_bf16.size(),
                 " values, expected num_tokens * hidden = ", elements);
        return;
    }
    if (in.payload != Payload::kFP8)
        fail("rank ", rank, ": unknown payload value ", static_cast<int>(in.payload));
    if (quantize) fail("rank ", rank, ": the dispatch quantizes, so the payload must be bf16, got fp8");
    if (in.x_fp8.size() != elements)
        fail("rank ", rank, ": x_fp8 has ", in.x_fp8.size(),
             " values, expected num_tokens * hidden = ", elements);
    if (in.scale_format != ScaleFormat::kFloat32 && in.scale_format != ScaleFormat::kUE8M0)
        fail("rank ", rank, ": an fp8 payload needs scale_format kFloat32 or kUE8M0, got kNone");
    const size_t words = static_cast<size_t>(in.num_tokens) * num_scale_words(p.hidden, in.scale_format);
    if (in.scales.size() != words)
        fail("rank ", rank, ": scales has ", in.scales.size(), " words, expected num_tokens * ",
             num_scale_words(p.hidden, in.scale_format), " = ", words);
}

void validate_no_duplicate_experts(const Problem& p, int rank, int num_tokens,
                                   const std::vector<int64_t>& topk_idx) {
    for (int t = 0; t < num_tokens; ++t) {
        const int64_t* row = topk_idx.data() + static_cast<size_t>(t) * p.topk;
        for (int k = 0; k < p.topk; ++k)
            for (int j = 0; j < k; ++j)
                if (row[k] >= 0 && row[k] == row[j])
                    fail("rank ", rank, " token ", t, " slot ", k, ": expert ", row[k],
                         " already appears in slot ", j,
                         "; the masked layout holds at most one row per (source, token) and expert");
    }
}

void validate_routing_struct(const Routing& routing) {
    const Problem& p = routing.problem;
    validate_problem(p);
    validate_dispatch_options(p, routing.options);
    const size_t ranks = static_cast<size_t>(p.num_ranks);
    if (routing.num_tokens.size() != ranks || routing.topk_idx.size() != ranks ||
        routing.topk_weights.size() != ranks)
        fail("Routing has ", routing.num_tokens.size(), "/", routing.topk_idx.size(), "/",
             routing.topk_weights.size(),
             " entries in num_tokens/topk_idx/topk_weights, expected one per rank (", p.num_ranks,
             "); pass the routing returned by dispatch()");
    for (int s = 0; s < p.num_ranks; ++s) {
        validate_routing(p, s, routing.num_tokens[s], routing.topk_idx[s]);
        const size_t weights = routing.topk_weights[s].size();
        if (weights != 0 && weights != routing.topk_idx[s].size())
            fail("Routing rank ", s, ": topk_weights has ", weights, " entries, expected 0 or ",
                 routing.topk_idx[s].size());
        if (routing.options.layout == RecvLayout::kExpertMasked)
            validate_no_duplicate_experts(p, s, routing.num_tokens[s], routing.topk_idx[s]);
    }
}

}  // namespace detail
}  // namespace switchyard::reference
