// Buffer creation: topology detection, emulated nodes, the memory layout, configuration mismatch.
#include <cstdio>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;
using namespace switchyard::testing;

SY_TEST(Topology, PlacementAllConfigs) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            BufferConfig config;
            config.max_tokens_per_rank = 32;
            config.max_hidden = 128;
            config.enable_low_latency = true;
            config.ll_max_tokens_per_rank = 16;
            Buffer buffer(env.communicator, env.device, config);
            const Topology& topology = buffer.topology();
            SY_CHECK_EQ(topology.num_nodes, 1);
            SY_CHECK_EQ(topology.num_gpus(), rc.gpus);
            SY_CHECK_EQ(topology.ranks_on_my_gpu, rc.ranks / rc.gpus);
            SY_CHECK(buffer.sm_budget() >= 1);
            for (int peer = 0; peer < rc.ranks; ++peer) SY_CHECK(buffer.peer_memory(peer) != nullptr);
            if (env.rank == 0)
                std::printf("  %s: %s; buffer %zu bytes, SM budget %d\n", rc.name().c_str(),
                            topology.describe().c_str(), buffer.buffer_bytes(), buffer.sm_budget());
        });
    }
}

SY_TEST(Topology, EmulatedNodes) {
    require_gpus(1);
    run_ranks(4, 1, [&](RankEnv& env) {
        BufferConfig config;
        config.max_tokens_per_rank = 16;
        config.max_hidden = 128;
        config.emulated_nodes = 2;
        Buffer buffer(env.communicator, env.device, config);
        SY_CHECK_EQ(buffer.topology().num_nodes, 2);
        SY_CHECK(buffer.topology().emulated_nodes);
        SY_CHECK_EQ(buffer.topology().node_of_rank[env.rank], env.rank / 2);
    });
}

SY_TEST(Topology, ConfigMismatchIsNamed) {
    require_gpus(1);
    run_ranks(2, 1, [&](RankEnv& env) {
        BufferConfig config;
        config.max_tokens_per_rank = 16;
        config.max_hidden = env.rank == 0 ? 128 : 256;
        SY_CHECK_THROWS_WITH(Buffer(env.communicator, env.device, config), InvalidArgument,
                             "max_hidden is 128 on rank 0 but 256 on rank 1");
    });
}

SY_TEST_MAIN()
