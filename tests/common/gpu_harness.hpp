// The GPU tests' view of the shared harness (harness/): ranks as threads of this process (one stream
// each), spread over 1 or 2 GPUs, several ranks per GPU where the rank count exceeds the GPU count
// (DESIGN.md §4), CUDA RAII helpers and SY_CUDA_CHECK.
//
// Tests call require_gpus(n) first: without enough GPUs it skips with a printed reason.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "harness/cuda_raii.hpp"
#include "harness/rank_runner.hpp"
#include "switchyard/communicator.hpp"
#include "util/cuda_check.hpp"

namespace switchyard::testing {

using harness::DeviceArray;
using harness::PinnedBuffer;
using RankEnv = harness::RankContext;

// Number of usable CUDA devices (0 without a driver or GPU), capped by SWITCHYARD_TEST_MAX_GPUS (a
// test tool variable: run the suite as if fewer GPUs were present).
int cuda_device_count();
// SY_SKIPs the test with the reason when fewer than `gpus` devices are usable.
void require_gpus(int gpus);

// The standard matrix: EP 1, 2, 4, 8 on one GPU, and on two when present.
struct RankConfig {
    int ranks;
    int gpus;
    std::string name() const {
        return "EP" + std::to_string(ranks) + " on " + std::to_string(gpus) + " GPU(s)";
    }
};
std::vector<RankConfig> standard_rank_configs();

// harness::run_ranks: `body` on `num_ranks` threads, rank r on GPU r * num_gpus / num_ranks. Every
// failing rank is reported in one TestFailure ("rank 1: ...").
void run_ranks(int num_ranks, int num_gpus, const std::function<void(RankEnv&)>& body);

}  // namespace switchyard::testing
