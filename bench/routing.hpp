// Synthetic routings for benchmarks and the CPU demo.
#pragma once

#include <cstdint>
#include <vector>

namespace switchyard::bench {

// `num_tokens` rows of `topk` distinct experts drawn uniformly from [0, num_experts), as a
// [num_tokens * topk] row-major list. Deterministic for a given seed, so runs are comparable.
// Requires topk <= num_experts.
std::vector<int64_t> random_topk_routing(int num_tokens, int topk, int num_experts, uint64_t seed);

// Seed of rank `rank`'s routing: the ranks differ, the run does not.
inline uint64_t rank_seed(uint64_t base_seed, int rank) {
    return base_seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(rank) + 1;
}

}  // namespace switchyard::bench
