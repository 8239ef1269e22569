// Cross-rank GPU barrier: ordering over EP 1/2/4/8 on one and two GPUs, and a peer that never
// arrives ending in a TimeoutError that names rank, peer and phase.
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;
using namespace switchyard::testing;

namespace {

BufferConfig small_config(double timeout_seconds) {
    BufferConfig config;
    config.max_tokens_per_rank = 64;
    config.max_hidden = 256;
    config.max_topk = 4;
    config.max_experts = 64;
    config.timeout_seconds = timeout_seconds;
    return config;
}

}  // namespace

SY_TEST(Barrier, OrdersPeerWritesAllConfigs) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        std::printf("  %s\n", rc.name().c_str());
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, small_config(20.0));
            SY_CHECK_EQ(buffer.topology().num_ranks, rc.ranks);
            SY_CHECK_EQ(buffer.topology().ranks_on_my_gpu, rc.ranks / rc.gpus);
            const size_t offset = buffer.data_offset();
            uint64_t* staging = nullptr;
            SY_CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&staging), sizeof(uint64_t) * (rc.ranks + 1)));
            for (uint64_t round = 1; round <= 20; ++round) {
                // Write this round's number into slot [my rank] of every peer, then barrier: after
                // it every slot of my own region must hold this round.
                staging[rc.ranks] = round * 1000 + env.rank;
                for (int peer = 0; peer < rc.ranks; ++peer) {
                    uint8_t* target = buffer.peer_memory(peer);
                    SY_CHECK(target != nullptr);
                    SY_CUDA_OK(cudaMemcpyAsync(target + offset + sizeof(uint64_t) * env.rank, &staging[rc.ranks],
                                               sizeof(uint64_t), cudaMemcpyDefault, env.stream));
                }
                buffer.barrier(env.stream);
                SY_CUDA_OK(cudaMemcpyAsync(staging, buffer.local_memory() + offset, sizeof(uint64_t) * rc.ranks,
                                           cudaMemcpyDeviceToHost, env.stream));
                SY_CUDA_OK(cudaStreamSynchronize(env.stream));
                for (int peer = 0; peer < rc.ranks; ++peer) SY_CHECK_EQ(staging[peer], round * 1000 + peer);
                // Second barrier: nobody overwrites a slot before its owner has read it.
                buffer.barrier(env.stream);
            }
            for (int i = 0; i < 200; ++i) buffer.barrier(env.stream);
            buffer.synchronize();
            SY_CUDA_OK(cudaFreeHost(staging));
        });
    }
}

SY_TEST(Barrier, PeerThatNeverArrivesTimesOut) {
    require_gpus(1);
    const int max_gpus = std::min(2, cuda_device_count());
    for (int gpus = 1; gpus <= max_gpus; ++gpus) {
        run_ranks(2, gpus, [&](RankEnv& env) {
            constexpr double kTimeout = 2.0;
            {
                Buffer buffer(env.communicator, env.device, small_config(kTimeout));
                buffer.barrier(env.stream);  // both arrive: healthy
                buffer.synchronize();
                if (env.rank == 0) {
                    const auto start = std::chrono::steady_clock::now();
                    buffer.barrier(env.stream);  // rank 1 never comes
                    bool thrown = false;
                    try {
                        buffer.synchronize();
                    } catch (const TimeoutError& error) {
                        thrown = true;
                        const double elapsed =
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                        std::printf("  [%d GPU(s)] TimeoutError after %.2f s: %s\n", gpus, elapsed, error.what());
                        SY_CHECK(elapsed < kTimeout + 1.0);
                        SY_CHECK(elapsed >= kTimeout * 0.9);
                        SY_CHECK_EQ(error.rank(), 0);
                        SY_CHECK_EQ(error.peer(), 1);
                        SY_CHECK_EQ(error.phase(), std::string("barrier"));
                    }
                    SY_CHECK(thrown);
                    // Poisoned: the next operation refuses to start.
                    SY_CHECK_THROWS(buffer.barrier(env.stream), TimeoutError);
                }
            }  // both ranks tear the buffer down
            Buffer fresh(env.communicator, env.device, small_config(kTimeout));
            for (int i = 0; i < 10; ++i) fresh.barrier(env.stream);
            fresh.synchronize();
        });
    }
}

SY_TEST(Barrier, ResetClearsPoison) {
    require_gpus(1);
    run_ranks(2, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, small_config(1.0));
        if (env.rank == 0) {
            buffer.barrier(env.stream);
            SY_CHECK_THROWS(buffer.synchronize(), TimeoutError);
        }
        buffer.reset();  // collective
        for (int i = 0; i < 5; ++i) buffer.barrier(env.stream);
        buffer.synchronize();
    });
}

SY_TEST_MAIN()
