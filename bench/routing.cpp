#include "routing.hpp"

#include <algorithm>
#include <random>
#include <string>

#include "switchyard/errors.hpp"

namespace switchyard::bench {

std::vector<int64_t> random_topk_routing(int num_tokens, int topk, int num_experts, uint64_t seed) {
    if (topk > num_experts || topk < 0 || num_tokens < 0) {
        throw InvalidArgument("random_topk_routing: need 0 <= topk <= experts, got topk " +
                              std::to_string(topk) + " of " + std::to_string(num_experts) + " experts");
    }
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> pick(0, num_experts - 1);
    std::vector<int64_t> topk_idx(static_cast<size_t>(num_tokens) * topk);
    for (int t = 0; t < num_tokens; ++t) {
        int64_t* row = topk_idx.data() + static_cast<size_t>(t) * topk;
        // Rejection sampling: cheap because topk is far below the expert count in practice.
        for (int k = 0; k < topk;) {
            const int expert = pick(rng);
            if (std::find(row, row + k, expert) != row + k) continue;
            row[k++] = expert;
        }
    }
    return topk_idx;
}

}  // namespace switchyard::bench
