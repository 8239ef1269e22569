// GPU test harness (see gpu_harness.hpp).
#include "common/gpu_harness.hpp"

#include "core/stream_pool.hpp"

#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

namespace switchyard::testing {

namespace {
// Several ranks share a GPU in this process: give every stream its own hardware queue. Must be
// set before CUDA initialises, hence a static initializer (see Buffer's check).
const bool kHardwareQueuesSet = [] {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    return true;
}();
}  // namespace

int cuda_device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    if (const char* cap = std::getenv("SWITCHYARD_TEST_MAX_GPUS")) count = std::min(count, std::atoi(cap));
    return count;
}

void require_gpus(int gpus) {
    const int available = cuda_device_count();
    if (available < gpus)
        SY_SKIP("needs " + std::to_string(gpus) + " CUDA GPU(s), found " + std::to_string(available) +
                " (GPU tests run on the GPU machine: scripts/gpu_suite.sh)");
}

std::vector<RankConfig> standard_rank_configs() {
    std::vector<RankConfig> configs;
    const int gpus = cuda_device_count();
    for (int num_gpus = 1; num_gpus <= std::min(gpus, 2); ++num_gpus)
        for (int ranks : {1, 2, 4, 8})
            if (ranks >= num_gpus) configs.push_back({ranks, num_gpus});
    return configs;
}

void cuda_ok(cudaError_t status, const char* what, const char* file, int line) {
    if (status != cudaSuccess)
        fail(file, line,
             std::string(what) + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                 ")");
}

void run_ranks(int num_ranks, int num_gpus, const std::function<void(RankEnv&)>& body) {
    auto communicators = make_in_process_communicators(num_ranks);
    std::mutex mutex;
    std::vector<std::string> failures(num_ranks);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < num_ranks; ++rank) {
        threads.emplace_back([&, rank] {
            RankEnv env;
            env.rank = rank;
            env.num_ranks = num_ranks;
            env.device = rank * num_gpus / num_ranks;
            env.communicator = communicators[rank];
            std::string failure;
            try {
                SY_CUDA_OK(cudaSetDevice(env.device));
                // Pooled, like the buffers' streams (core/stream_pool.hpp): each live stream keeps
                // its own hardware queue however many configurations a test runs.
                env.stream = core::acquire_stream(env.device);
                body(env);
                SY_CUDA_OK(cudaStreamSynchronize(env.stream));
            } catch (const TestFailure& error) {
                failure = error.message;
            } catch (const TestSkipped& skip) {
                failure = "skipped inside a rank: " + skip.reason;
            } catch (const std::exception& error) {
                failure = std::string("exception: ") + error.what();
            }
            if (env.stream) core::release_stream(env.device, env.stream);
            if (!failure.empty()) {
                std::lock_guard<std::mutex> lock(mutex);
                failures[rank] = failure;
            }
        });
    }
    for (auto& thread : threads) thread.join();
    // Report every failing rank: the one that failed first in time may not be the first to finish
    // unwinding (its destructors can wait for the others), so no single message is "the" cause.
    std::string report;
    for (int rank = 0; rank < num_ranks; ++rank)
        if (!failures[rank].empty())
            report +=
                (report.empty() ? "" : "\n  ") + ("rank " + std::to_string(rank) + ": " + failures[rank]);
    if (!report.empty()) throw TestFailure{report};
}

}  // namespace switchyard::testing
