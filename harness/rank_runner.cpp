// See rank_runner.hpp.
#include "harness/rank_runner.hpp"

#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

#include "core/stream_pool.hpp"
#include "util/cuda_check.hpp"

namespace switchyard::harness {

namespace {
// Must happen before CUDA initialises, hence a static initializer of this file, which every user
// of the runner links (the library checks the value when ranks share a GPU).
const bool kHardwareQueuesSet = [] {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    return true;
}();

constexpr auto kBarrierTimeout = std::chrono::seconds(120);
}  // namespace

void RankContext::host_barrier() const {
    communicator->barrier(kBarrierTimeout);
}

RankGroup::RankGroup(int num_ranks, int num_gpus) : num_gpus_(num_gpus) {
    (void)kHardwareQueuesSet;
    if (num_ranks < 1 || num_gpus < 1 || num_gpus > num_ranks)
        throw InvalidArgument("rank runner: " + std::to_string(num_ranks) + " rank(s) on " +
                              std::to_string(num_gpus) + " GPU(s): needs 1 <= GPUs <= ranks");
    auto communicators = make_in_process_communicators(num_ranks);
    ranks_.resize(num_ranks);
    for (int r = 0; r < num_ranks; ++r) {
        RankContext& context = ranks_[r];
        context.rank = r;
        context.num_ranks = num_ranks;
        context.num_gpus = num_gpus;
        context.device = device_of_rank(r, num_ranks, num_gpus);
        context.communicator = communicators[r];
    }
    // Pooled streams: each live stream keeps its own hardware queue however many groups a process
    // creates (core/stream_pool.hpp says why). On failure, the streams taken so far go back.
    try {
        for (RankContext& context : ranks_) context.stream = core::acquire_stream(context.device);
    } catch (...) {
        for (RankContext& context : ranks_) core::release_stream(context.device, context.stream);
        throw;
    }
}

RankGroup::~RankGroup() {
    for (RankContext& context : ranks_) {
        if (!context.stream) continue;
        cudaStreamSynchronize(context.stream);  // the pool's next owner must not queue behind it
        core::release_stream(context.device, context.stream);
    }
}

void RankGroup::run(const std::function<void(RankContext&)>& body) {
    std::vector<std::string> failures(ranks_.size());
    std::vector<std::thread> threads;
    threads.reserve(ranks_.size());
    for (RankContext& context : ranks_) {
        threads.emplace_back([&body, &context, &failures] {
            std::string& failure = failures[context.rank];
            try {
                SY_CUDA_CHECK(cudaSetDevice(context.device));
                body(context);
                SY_CUDA_CHECK(cudaStreamSynchronize(context.stream));
            } catch (const std::exception& error) {
                failure = error.what();
                if (failure.empty()) failure = "an exception without a message";
            } catch (...) {
                failure = "an exception that is no std::exception";
            }
        });
    }
    for (std::thread& thread : threads) thread.join();
    std::string report;
    for (size_t r = 0; r < failures.size(); ++r)
        if (!failures[r].empty())
            report += (report.empty() ? "" : "\n  ") + ("rank " + std::to_string(r) + ": " + failures[r]);
    if (!report.empty()) throw RankFailure(report);
}

void run_ranks(int num_ranks, int num_gpus, const std::function<void(RankContext&)>& body) {
    RankGroup group(num_ranks, num_gpus);
    group.run(body);
}

}  // namespace switchyard::harness
