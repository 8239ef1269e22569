// Barrier stress: many back-to-back barriers with ranks sharing a GPU, then every rank's
// sequence counter and barrier slots are read back and must all equal the number of barriers.
#include <chrono>
#include <cstdio>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/common/workspace_layout.cuh"

using namespace switchyard;
using namespace switchyard::testing;

SY_TEST(BarrierStress, CountersAndSlotsAgree) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            BufferConfig config;
            config.max_tokens_per_rank = 16;
            config.max_hidden = 128;
            config.timeout_seconds = 10;
            Buffer buffer(env.communicator, env.device, config);
            const auto layout = device::WorkspaceLayout::make(
                rc.ranks, int32_t((config.max_experts + rc.ranks - 1) / rc.ranks));
            std::vector<uint64_t> counters(device::kNumCounters), slots(rc.ranks);
            for (int batch = 1; batch <= 5; ++batch) {
                // A rank whose first barrier kernel starts late: did its host
                // call block, or did the kernel wait on the GPU? Print the host side.
                const auto before = std::chrono::steady_clock::now();
                buffer.barrier(env.stream);
                const double call_s =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
                if (call_s > 1.0)
                    std::fprintf(stderr, "  %s rank %d: barrier() call of batch %d took %.2f s on the host\n",
                                 rc.name().c_str(), env.rank, batch, call_s);
                for (int i = 1; i < 100; ++i) buffer.barrier(env.stream);
                buffer.synchronize();
                SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                SY_CUDA_CHECK(cudaMemcpy(counters.data(), buffer.local_memory() + layout.counters_offset,
                                         8 * counters.size(), cudaMemcpyDeviceToHost));
                SY_CUDA_CHECK(cudaMemcpy(slots.data(), buffer.local_memory() + layout.barrier_signals_offset,
                                         8 * slots.size(), cudaMemcpyDeviceToHost));
                const uint64_t expected = 100ull * batch;
                std::string text;
                for (uint64_t s : slots) text += std::to_string(s) + " ";
                SY_CHECK_MSG(counters[device::kCounterBarrier] == expected,
                             rc.name() << " batch " << batch << ": counter "
                                       << counters[device::kCounterBarrier] << ", slots " << text);
                for (int peer = 0; peer < rc.ranks; ++peer)
                    SY_CHECK_MSG(slots[peer] >= expected, rc.name() << ": slot of rank " << peer << " = "
                                                                    << slots[peer] << " < " << expected);
                env.communicator->barrier(std::chrono::seconds(30));
            }
            if (env.rank == 0)
                std::printf("  %s: 500 barriers, counters and slots agree\n", rc.name().c_str());
        });
    }
}

SY_TEST_MAIN()
