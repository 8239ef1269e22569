// The receive layout of one rank: which (source, token, slot) every output row holds. Everything
// else (dispatch payload copies, combine lookups) is derived from this one function, so the
// documented orders live in exactly one place.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "detail.hpp"

namespace switchyard::reference::detail {
namespace {

int64_t round_up(int64_t value, int64_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

ReceivePlan plan_receive(const Routing& routing, const std::vector<bool>& absent, int q) {
    const Problem& p = routing.problem;
    const int num_local = p.local_experts();
    const int first_expert = q * num_local;
    ReceivePlan plan;
    plan.num_tokens_per_expert.assign(num_local, 0);
    plan.num_rows_per_source.assign(p.num_ranks, 0);

    // Rank-major rows (s, t) and expert-major entries (s, t, k) per local expert, both in
    // s, t, k order. An absent rank receives nothing and an absent source sends nothing.
    std::vector<RowSource> token_rows;
    std::vector<std::vector<RowSource>> expert_rows(num_local);
    for (int s = 0; s < p.num_ranks && !absent[q]; ++s) {
        if (absent[s]) continue;
        for (int t = 0; t < routing.num_tokens[s]; ++t) {
            bool reaches_q = false;
            for (int k = 0; k < p.topk; ++k) {
                const int64_t idx = routing.topk_idx[s][static_cast<size_t>(t) * p.topk + k];
                if (idx < first_expert || idx >= first_expert + num_local) continue;  // also skips -1
                reaches_q = true;
                expert_rows[idx - first_expert].push_back({s, t, k});
            }
            if (reaches_q) {
                token_rows.push_back({s, t, -1});
                ++plan.num_rows_per_source[s];
            }
        }
    }
    for (int e = 0; e < num_local; ++e)
        plan.num_tokens_per_expert[e] = static_cast<int32_t>(expert_rows[e].size());

    switch (routing.options.layout) {
        case RecvLayout::kRankMajor:
            plan.sources = std::move(token_rows);
            break;
        case RecvLayout::kExpertContiguous: {
            // Segment e starts at expert_offsets[e], a multiple of the alignment; its count rows are
            // followed by padding up to the next multiple. An empty expert takes no rows. Choice:
            // expert_offsets[L] is the total including the last segment's padding, so it is a
            // multiple of the alignment too and the whole tensor tiles into aligned GEMM blocks.
            const int64_t alignment = routing.options.expert_alignment;
            plan.expert_offsets.assign(num_local + 1, 0);
            for (int e = 0; e < num_local; ++e)
                plan.expert_offsets[e + 1] =
                    plan.expert_offsets[e] + round_up(expert_rows[e].size(), alignment);
            plan.sources.assign(plan.expert_offsets[num_local], RowSource{});
            for (int e = 0; e < num_local; ++e)
                for (size_t i = 0; i < expert_rows[e].size(); ++i)
                    plan.sources[plan.expert_offsets[e] + i] = expert_rows[e][i];
            break;
        }
        case RecvLayout::kExpertMasked: {
            // Fixed capacity R * T_max per expert: enough for one row per (source, token).
            const int64_t capacity = static_cast<int64_t>(p.num_ranks) * p.max_tokens_per_rank;
            plan.expert_offsets.assign(num_local + 1, 0);
            for (int e = 0; e <= num_local; ++e) plan.expert_offsets[e] = e * capacity;
            plan.sources.assign(num_local * capacity, RowSource{});
            for (int e = 0; e < num_local; ++e) {
                if (static_cast<int64_t>(expert_rows[e].size()) > capacity)
                    fail("rank ", q, " local expert ", e, " receives ", expert_rows[e].size(),
                         " rows, more than the masked capacity R * T_max = ", capacity);
                for (size_t i = 0; i < expert_rows[e].size(); ++i)
                    plan.sources[e * capacity + i] = expert_rows[e][i];
            }
            break;
        }
    }
    plan.num_rows = static_cast<int64_t>(plan.sources.size());
    return plan;
}

}  // namespace switchyard::reference::detail
