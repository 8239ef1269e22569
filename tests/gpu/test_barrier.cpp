// Cross-rank GPU barrier: ordering over EP 1/2/4/8 on one and two GPUs, and a peer that never
// arrives ending in a TimeoutError that names rank, peer and phase.
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "jit/jit.hpp"
#include "switchyard/testing/peer_store.cuh"

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

// Each round every rank writes the round number into slot [its rank] of every peer, then
// barriers; after the barrier every slot of its own region must hold this round. A second barrier
// keeps the next round's writes from landing before their owner has read. Writes are plain SM
// stores from a kernel on the caller's stream (as the communication kernels write peers), or, as a
// diagnostic, copy-engine copies; returns the number of stale slots seen.
//
// Allocation happens outside the rounds: with ranks as threads sharing a GPU, a device-synchronizing
// call (cudaFree, cudaFreeHost) in one rank waits for another rank's in-flight barrier kernel, which
// waits for this rank: a deadlock that only the timeout ends (DESIGN.md §4, rule 2).
int run_ordering_rounds(Buffer& buffer, RankEnv& env, bool copy_engine,
                        const DeviceArray<uint8_t*>& peer_table, uint64_t* staging) {
    const int ranks = env.num_ranks;
    const size_t offset = buffer.data_offset() + (copy_engine ? 4096 : 0);
    std::vector<uint8_t*> peers(ranks);
    for (int peer = 0; peer < ranks; ++peer) peers[peer] = buffer.peer_memory(peer);
    const jit::Kernel& store = jit::get_kernel(
        {"peer_store", "switchyard/testing/peer_store.cuh", "switchyard::device::peer_store_kernel"},
        env.device);
    int stale = 0;
    for (uint64_t round = 1; round <= 20; ++round) {
        const uint64_t value = round * 1000 + env.rank;
        if (copy_engine) {
            staging[ranks] = value;
            for (int peer = 0; peer < ranks; ++peer)
                SY_CUDA_CHECK(cudaMemcpyAsync(peers[peer] + offset + sizeof(uint64_t) * env.rank,
                                              &staging[ranks], sizeof(uint64_t), cudaMemcpyDefault,
                                              env.stream));
        } else {
            device::PeerStoreArgs args{peer_table.data(), int64_t(offset), env.rank, ranks, value};
            jit::LaunchConfig launch;
            launch.block[0] = 32;
            launch.stream = env.stream;
            jit::launch(store, launch, &args, sizeof(args));
        }
        buffer.barrier(env.stream);
        SY_CUDA_CHECK(cudaMemcpyAsync(staging, buffer.local_memory() + offset, sizeof(uint64_t) * ranks,
                                      cudaMemcpyDeviceToHost, env.stream));
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        for (int peer = 0; peer < ranks; ++peer) {
            if (staging[peer] == round * 1000 + peer) continue;
            ++stale;
            if (!copy_engine)
                SY_CHECK_MSG(false,
                             "round " << round << ": slot of rank " << peer << " holds " << staging[peer]);
        }
        buffer.barrier(env.stream);
    }
    return stale;
}

}  // namespace

SY_TEST(Barrier, OrdersPeerWritesAllConfigs) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, small_config(20.0));
            SY_CHECK_EQ(buffer.topology().num_ranks, rc.ranks);
            SY_CHECK_EQ(buffer.topology().ranks_on_my_gpu, rc.ranks / rc.gpus);
            std::vector<uint8_t*> peers(rc.ranks);
            for (int peer = 0; peer < rc.ranks; ++peer) {
                peers[peer] = buffer.peer_memory(peer);
                SY_CHECK(peers[peer] != nullptr);
            }
            DeviceArray<uint8_t*> peer_table(peers);
            uint64_t* staging = nullptr;
            SY_CUDA_CHECK(
                cudaMallocHost(reinterpret_cast<void**>(&staging), sizeof(uint64_t) * (rc.ranks + 1)));
            env.communicator->barrier(std::chrono::seconds(30));  // every rank allocated: no more syncs
            run_ordering_rounds(buffer, env, false, peer_table, staging);
            const int stale_copies = run_ordering_rounds(buffer, env, true, peer_table, staging);
            for (int i = 0; i < 200; ++i) buffer.barrier(env.stream);
            buffer.synchronize();
            env.communicator->barrier(std::chrono::seconds(30));  // every rank done before freeing
            SY_CUDA_CHECK(cudaFreeHost(staging));
            const auto stale = env.communicator->all_gather_value(stale_copies, std::chrono::seconds(30));
            if (env.rank == 0) {
                int total = 0;
                for (int s : stale) total += s;
                std::printf(
                    "  %s: 20 rounds of SM-store writes ordered by the barrier; copy-engine writes: "
                    "%d stale slot reads (diagnostic)\n",
                    rc.name().c_str(), total);
            }
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
                        std::printf("  [%d GPU(s)] TimeoutError after %.2f s: %s\n", gpus, elapsed,
                                    error.what());
                        SY_CHECK(elapsed < kTimeout + 1.0);
                        SY_CHECK(elapsed >= kTimeout * 0.9);
                        SY_CHECK_EQ(error.rank(), 0);
                        SY_CHECK_EQ(error.peer(), 1);
                        SY_CHECK_EQ(error.phase(), std::string("barrier"));
                    }
                    SY_CHECK(thrown);
                    // Poisoned: the next operation refuses to start, quoting the timeout as its cause;
                    // check_errors() still raises the timeout itself.
                    bool refused = false;
                    try {
                        buffer.barrier(env.stream);
                    } catch (const PoisonedError& error) {
                        refused = true;
                        SY_CHECK_MSG(std::string(error.what()).find("timed out") != std::string::npos,
                                     error.what());
                        SY_CHECK_THROWS(std::rethrow_exception(error.cause()), TimeoutError);
                    }
                    SY_CHECK(refused);
                    SY_CHECK_THROWS(buffer.check_errors(), TimeoutError);
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
