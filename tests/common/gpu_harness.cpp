// GPU test harness (see gpu_harness.hpp).
#include "common/gpu_harness.hpp"

#include <algorithm>
#include <cstdlib>

namespace switchyard::testing {

namespace {
int capped(int count) {
    if (const char* cap = std::getenv("SWITCHYARD_TEST_MAX_GPUS")) count = std::min(count, std::atoi(cap));
    return count;
}
}  // namespace

int cuda_device_count() {
    return capped(harness::usable_gpu_count());
}

void require_gpus(int gpus) {
    std::string why;
    const int available = capped(harness::usable_gpu_count(&why));
    if (available < gpus)
        SY_SKIP("needs " + std::to_string(gpus) + " CUDA GPU(s), found " + std::to_string(available) +
                (why.empty() ? "" : " (" + why + ")") +
                "; GPU tests run on the GPU machine: scripts/gpu_suite.sh");
}

std::vector<RankConfig> standard_rank_configs() {
    std::vector<RankConfig> configs;
    const int gpus = cuda_device_count();
    for (int num_gpus = 1; num_gpus <= std::min(gpus, 2); ++num_gpus)
        for (int ranks : {1, 2, 4, 8})
            if (ranks >= num_gpus) configs.push_back({ranks, num_gpus});
    return configs;
}

void run_ranks(int num_ranks, int num_gpus, const std::function<void(RankEnv&)>& body) {
    try {
        harness::run_ranks(num_ranks, num_gpus, body);
    } catch (const harness::RankFailure& failure) {
        throw TestFailure(failure.what());
    }
}

}  // namespace switchyard::testing
