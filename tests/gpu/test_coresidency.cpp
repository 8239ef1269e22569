// Several ranks per GPU: the kernels of ranks that share a GPU must run at the same time and wait
// on each other. Each rank (a thread with its own stream, the harness's mechanism) launches its
// SM budget of blocks, plainly and cooperatively; every block waits for every block of every rank.
#include <cstdio>

#include "common/gpu_harness.hpp"
#include "jit/jit.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/testing/coresidency_probe.cuh"

using namespace switchyard;
using namespace switchyard::testing;

SY_TEST(Coresidency, RanksSharingAGpuRunTogether) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        for (bool cooperative : {false, true}) {
            run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
                BufferConfig config;
                config.max_tokens_per_rank = 16;
                config.max_hidden = 128;
                Buffer buffer(env.communicator, env.device, config);
                const int blocks = buffer.sm_budget();
                const auto all_blocks = env.communicator->all_gather_value(blocks, std::chrono::seconds(30));
                uint64_t total = 0;
                for (int b : all_blocks) total += uint64_t(b);
                DeviceArray<int32_t> failed(1);
                failed.fill_bytes(0);
                const jit::Kernel& kernel =
                    jit::get_kernel({"coresidency_probe", "switchyard/testing/coresidency_probe.cuh",
                                     "switchyard::device::coresidency_probe_kernel"},
                                    env.device);
                for (uint64_t round = 1; round <= 3; ++round) {
                    device::CoresidencyProbeArgs args{};
                    args.counter =
                        reinterpret_cast<unsigned long long*>(buffer.peer_memory(0) + buffer.data_offset());
                    args.target = round * total;
                    args.timeout_ns = 10ull * 1000 * 1000 * 1000;
                    args.failed = failed.data();
                    jit::LaunchConfig launch;
                    launch.grid[0] = unsigned(blocks);
                    launch.block[0] = 128;
                    launch.stream = env.stream;
                    launch.cooperative = cooperative;
                    jit::launch(kernel, launch, &args, sizeof(args));
                    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                    SY_CHECK_MSG(failed.download()[0] == 0, rc.name()
                                                                << (cooperative ? " cooperative" : " plain")
                                                                << ": blocks did not all run together");
                    env.communicator->barrier(std::chrono::seconds(30));
                }
                if (env.rank == 0)
                    std::printf("  %s, %s launches of %d blocks per rank: all %llu blocks co-resident\n",
                                rc.name().c_str(), cooperative ? "cooperative" : "plain", blocks,
                                (unsigned long long)total);
            });
        }
    }
}

SY_TEST_MAIN()
