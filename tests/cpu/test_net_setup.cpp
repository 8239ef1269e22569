// A buffer's network set-up on the CPU: which backend a configuration and topology get, the
// configuration checks, GIN's capability verdicts and the UnsupportedError every rank raises
// without GIN (versions compiled and running, what is missing), the probe on this machine, and how
// the host prints network errors a kernel or the engine recorded.
#include <cstring>
#include <string>
#include <vector>

#include "comm/nccl_library.hpp"
#include "comm/topology.hpp"
#include "common/testing.hpp"
#include "core/error_state.hpp"
#include "core/tuning.hpp"
#include "net/gin_network.hpp"
#include "net/network.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/config.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/network.hpp"

using namespace switchyard;
using net::NetworkKind;

namespace {

// `ranks` ranks on `hosts` hosts (contiguous blocks), split into `emulated` nodes if > 0.
Topology topology(int ranks, int hosts, int emulated = 0, int rank = 0) {
    std::vector<RankPlacement> placements;
    for (int r = 0; r < ranks; ++r) {
        RankPlacement p;
        p.rank = r;
        p.host_id = uint64_t(100 + r / (ranks / hosts));
        p.process_id = r;
        p.gpu_bus_id = "bus" + std::to_string(r);
        placements.push_back(p);
    }
    return comm::make_topology(rank, placements, emulated);
}

BufferConfig with_backend(NetworkBackend backend) {
    BufferConfig config;
    config.network_backend = backend;
    return config;
}

}  // namespace

SY_TEST(NetSetup, BackendFollowsNodesAndCommunicator) {
    const BufferConfig automatic;
    SY_CHECK(net::resolve_network_kind(automatic, topology(4, 1), false, "in-process") == NetworkKind::kNone);
    // One node needs no network whatever was asked (a single-node NCCL communicator keeps CUDA IPC).
    SY_CHECK(net::resolve_network_kind(with_backend(NetworkBackend::kGin), topology(4, 1), true, "nccl") ==
             NetworkKind::kNone);
    SY_CHECK(net::resolve_network_kind(automatic, topology(4, 1, 2), false, "in-process") ==
             NetworkKind::kEmulated);
    SY_CHECK(net::resolve_network_kind(automatic, topology(4, 2), true, "nccl rank 0 of 4") ==
             NetworkKind::kGin);
    SY_CHECK_THROWS_WITH(
        net::resolve_network_kind(automatic, topology(4, 2), false, "local-process rank 0 of 4"),
        UnsupportedError, "needs a communicator over an ncclComm_t");
    SY_CHECK_THROWS_WITH(
        net::resolve_network_kind(automatic, topology(4, 2), false, "local-process rank 0 of 4"),
        UnsupportedError, "local-process rank 0 of 4");
    SY_CHECK_THROWS_WITH(
        net::resolve_network_kind(with_backend(NetworkBackend::kEmulated), topology(4, 2), true, "nccl"),
        UnsupportedError, "emulated nodes of one host");
    SY_CHECK_THROWS_WITH(
        net::resolve_network_kind(with_backend(NetworkBackend::kGin), topology(4, 1, 2), true, "nccl"),
        UnsupportedError, "emulated-nodes override");
}

SY_TEST(NetSetup, ConfigurationChecks) {
    BufferConfig config;
    net::validate_network_config(config, 4);
    config.network_bandwidth_gbps = -1;
    SY_CHECK_THROWS_WITH(net::validate_network_config(config, 4), InvalidArgument, "network_bandwidth_gbps");
    config = BufferConfig{};
    config.network_latency_us = -0.5;
    SY_CHECK_THROWS_WITH(net::validate_network_config(config, 4), InvalidArgument, "network_latency_us");
    config = BufferConfig{};
    config.network_adversarial = 1u << 7;
    SY_CHECK_THROWS_WITH(net::validate_network_config(config, 4), InvalidArgument, "unknown bits");
    config = BufferConfig{};
    config.network_withhold_rank = 4;
    SY_CHECK_THROWS_WITH(net::validate_network_config(config, 4), InvalidArgument, "network_withhold_rank");
    config = BufferConfig{};
    config.network_backend = static_cast<NetworkBackend>(9);
    SY_CHECK_THROWS_WITH(net::validate_network_config(config, 4), InvalidArgument, "network_backend");
}

SY_TEST(NetSetup, OlderConfigStructGetsNetworkDefaults) {
    // A caller compiled against version 1 passes a struct that ends before the network fields.
    BufferConfig old;
    old.max_hidden = 4096;
    old.network_bandwidth_gbps = 999;  // beyond the old struct: must not be read
    old.struct_size = static_cast<uint32_t>(offsetof(BufferConfig, network_backend));
    old.version = 1;
    const BufferConfig config = upgraded(old);
    SY_CHECK_EQ(config.max_hidden, 4096);
    SY_CHECK_EQ(config.network_bandwidth_gbps, 46.0);
    SY_CHECK_EQ(config.network_latency_us, 3.0);
    SY_CHECK_EQ(config.network_withhold_rank, -1);
    SY_CHECK_EQ(config.struct_size, uint32_t(sizeof(BufferConfig)));
    SY_CHECK(describe(config).find("network_bandwidth_gbps=46") != std::string::npos);
    SY_CHECK(!config.ht_mask_unresponsive_ranks);
}

SY_TEST(NetSetup, VersionTwoConfigStructGetsMaskingDefault) {
    // A caller compiled against version 2 passes a struct that ends before the HT masking flag.
    BufferConfig old;
    old.network_withhold_rank = 3;
    old.ht_mask_unresponsive_ranks = true;  // beyond the old struct: must not be read
    old.struct_size = static_cast<uint32_t>(offsetof(BufferConfig, ht_mask_unresponsive_ranks));
    old.version = 2;
    const BufferConfig config = upgraded(old);
    SY_CHECK_EQ(config.network_withhold_rank, 3);
    SY_CHECK(!config.ht_mask_unresponsive_ranks);
    SY_CHECK_EQ(config.version, 3u);
}

SY_TEST(NetSetup, GinVerdicts) {
    using net::judge_gin;
    SY_CHECK_EQ(judge_gin(0, 22809, 22809, "", true, true, "").missing, 0u);
    SY_CHECK_EQ(judge_gin(0, 22809, 23007, "", true, true, "").missing, uint32_t(net::kGinVersionMismatch));
    SY_CHECK_EQ(judge_gin(0, 22805, 22805, "", true, true, "").missing, uint32_t(net::kGinTooOld));
    SY_CHECK_EQ(judge_gin(0, 0, 22809, "", true, true, "").missing, uint32_t(net::kGinNotBuilt));
    SY_CHECK_EQ(judge_gin(0, 22809, 0, "libnccl.so.2: cannot open", false, true, "").missing,
                uint32_t(net::kGinNoLibrary));
    SY_CHECK_EQ(judge_gin(0, 22809, 22809, "", false, true, "").missing, uint32_t(net::kGinNoEntryPoints));
    const net::GinCapability no_kernels = judge_gin(0, 22809, 22809, "", true, false, "nvcc not found");
    SY_CHECK_EQ(no_kernels.missing, uint32_t(net::kGinNoKernels));
    SY_CHECK(std::string(no_kernels.detail) == "nvcc not found");
    // Kernels are not held against a rank that fails earlier.
    SY_CHECK_EQ(judge_gin(0, 22809, 22805, "", true, false, "x").missing,
                uint32_t(net::kGinTooOld | net::kGinVersionMismatch));
}

SY_TEST(NetSetup, EveryRankRaisesTheSameMessageNamingVersions) {
    std::vector<net::GinCapability> all;
    for (int rank = 0; rank < 12; ++rank)
        all.push_back(net::judge_gin(rank, 22809, 22809, "", true, true, ""));
    net::agree_on_gin(all, "capability", 2);  // all capable: no throw
    all[3] = net::judge_gin(3, 22809, 22707, "", true, true, "");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "capability", 2), UnsupportedError,
                         "rank 3: NCCL 2.28.9 compiled, 2.27.7 running");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "capability", 2), UnsupportedError,
                         "GIN needs NCCL 2.28.9 or newer");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "capability", 2), UnsupportedError,
                         "differs from the headers");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "capability", 2), UnsupportedError, "1 of 12 rank(s)");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "capability", 2), UnsupportedError, "none waits for another");
    // A device-communicator failure (no NIC) on many ranks: listed, then counted.
    for (auto& capability : all) {
        capability.missing = net::kGinDevCommFailed;
        std::strcpy(capability.detail, "ncclDevCommCreate: NCCL error 5 (invalid usage) GIN not supported");
    }
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "device communicator", 3), UnsupportedError,
                         "GIN-capable RDMA NIC");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "device communicator", 3), UnsupportedError,
                         "GIN not supported");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "device communicator", 3), UnsupportedError,
                         "and 4 more rank(s)");
    SY_CHECK_THROWS_WITH(net::agree_on_gin(all, "device communicator", 3), UnsupportedError, "span 3 nodes");
}

SY_TEST(NetSetup, ProbeOnThisMachine) {
    // The real probe: NCCL as this machine has it, the GIN kernels compiled with nvcc and loaded
    // (which needs a GPU). On a machine without a GPU or without NCCL it must refuse, naming the
    // versions; with everything present it passes.
    auto communicators = make_in_process_communicators(1);
    const Topology t = topology(1, 1);
    Topology two_nodes = t;
    two_nodes.num_nodes = 2;
    comm::NodeLayout layout;
    layout.num_nodes = 2;
    try {
        net::prepare_gin(*communicators[0], two_nodes, layout, 0, std::chrono::seconds(5));
        std::printf("  this machine can use GIN (the device communicator is created with the buffer)\n");
    } catch (const UnsupportedError& error) {
        const std::string message = error.what();
        std::printf("  %s\n", message.c_str());
        SY_CHECK(message.find("NCCL ") != std::string::npos);
        SY_CHECK(message.find(" compiled, ") != std::string::npos);
        SY_CHECK(message.find(" running") != std::string::npos);
    }
}

SY_TEST(NetSetup, NetworkErrorsNameNodeAndTransport) {
    device::ErrorRecord record{};
    record.kind = device::kErrorTimeout;
    record.rank = 0;
    record.peer = 3;
    record.phase = device::kPhaseNetwork;
    record.expected = 5;
    record.observed = 4;
    record.elapsed_ns = 2'000'000'000;
    record.detail[device::kNetDetailPeerNode] = 1;
    record.detail[device::kNetDetailId] = 17;
    record.detail[device::kNetDetailContext] = 2;
    record.detail[device::kNetDetailWhat] = device::kNetWaitSignal;
    record.detail[device::kNetDetailTransport] = device::kNetTransportMarker;
    try {
        core::throw_error_record(record, 2.0);
    } catch (const TimeoutError& error) {
        const std::string message = error.what();
        std::printf("  %s\n", message.c_str());
        SY_CHECK_EQ(error.phase(), std::string("network"));
        SY_CHECK_EQ(error.peer(), 3);
        SY_CHECK(message.find("rank 3 on node 1 over the network") != std::string::npos);
        SY_CHECK(message.find("signal 17 on context 2") != std::string::npos);
    }
    // A network wait inside another phase still says it was the network.
    record.phase = device::kPhaseHtData;
    SY_CHECK_THROWS_WITH(core::throw_error_record(record, 2.0), TimeoutError, "over the network");
    // A local completion (flush): no peer.
    record.phase = device::kPhaseNetwork;
    record.peer = -1;
    record.detail[device::kNetDetailWhat] = device::kNetWaitFlush;
    SY_CHECK_THROWS_WITH(core::throw_error_record(record, 2.0), TimeoutError, "waiting for the network");
    SY_CHECK_THROWS_WITH(core::throw_error_record(record, 2.0), TimeoutError, "a flush of context 2");
    // A refused request.
    record.kind = device::kErrorNetworkRequest;
    record.detail[device::kNetDetailWhat] = device::kNetBadDestination;
    record.expected = 1 << 20;
    record.observed = (1 << 20) + 64;
    SY_CHECK_THROWS_WITH(core::throw_error_record(record, 2.0), Error,
                         "destination range ends past the window");
}

SY_TEST_MAIN()

// The emulated network's copies may run on SMs: the ranks of its GPU leave 4 SMs each for them.
SY_TEST(NetSetup, EmulatedNetworkLeavesSmsForItsCopies) {
    SY_CHECK_EQ(tuning::rank_sm_budget(132, 1, false), 132);
    SY_CHECK_EQ(tuning::rank_sm_budget(132, 2, false), 66);
    SY_CHECK_EQ(tuning::rank_sm_budget(132, 2, true), 62);
    SY_CHECK_EQ(tuning::rank_sm_budget(132, 4, true), 29);
    SY_CHECK_EQ(tuning::rank_sm_budget(132, 8, true), 12);
    SY_CHECK_EQ(tuning::rank_sm_budget(132, 0, false), 132);
    SY_CHECK_EQ(tuning::rank_sm_budget(8, 4, true), 1);  // never below one SM
    for (int ranks = 1; ranks <= 8; ++ranks)
        SY_CHECK(ranks * tuning::rank_sm_budget(132, ranks, true) +
                     ranks * tuning::kEmulatedNetworkSmsPerRank <=
                 132);
}

// The routing lets its chained dispatch be scheduled at its start only where both grids fit the
// rank's share: four ranks with the network (29 SMs, 32 chunks of 4,096 tokens, 16 dispatch SMs) wait
// for the publish, two ranks sharing a GPU and a rank alone do not.
SY_TEST(NetSetup, DispatchScheduledWithTheRoutingOnlyWhereBothGridsFit) {
    const int ep4_nodes = tuning::rank_sm_budget(132, 4, true), ep2 = tuning::rank_sm_budget(132, 2, false);
    SY_CHECK(!tuning::dispatch_scheduled_with_routing(32, 16, ep4_nodes));
    SY_CHECK(!tuning::dispatch_scheduled_with_routing(32, 16, tuning::rank_sm_budget(132, 4, false)));
    SY_CHECK(tuning::dispatch_scheduled_with_routing(32, 16, ep2));
    SY_CHECK(tuning::dispatch_scheduled_with_routing(32, 24, tuning::rank_sm_budget(132, 1, false)));
    SY_CHECK(tuning::dispatch_scheduled_with_routing(8, 16, ep4_nodes));  // 1,024 tokens
}
