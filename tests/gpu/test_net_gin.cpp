// NCCL and the scale-out network on the GPU machine (no RDMA NIC there, and NCCL 2.28.9 refuses two
// ranks on one GPU): a buffer over a single-node NCCL communicator keeps CUDA IPC and needs no GIN;
// the GIN set-up runs as far as the machine allows (capability agreed, the buffer allocated with
// ncclMemAlloc and registered as a window, the device communicator requested) and ends either in a
// working device communicator or in the documented UnsupportedError naming the NCCL versions.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/nccl_library.hpp"
#include "comm/topology.hpp"
#include "common/gpu_harness.hpp"
#include "common/testing.hpp"
#include "net/gin_network.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace std::chrono_literals;

namespace {

const nccl::Library& nccl_or_skip() {
    try {
        return nccl::library();
    } catch (const UnsupportedError& error) {
        SY_SKIP(std::string("NCCL not available: ") + error.what());
    }
}

BufferConfig small_config() {
    BufferConfig config;
    config.max_tokens_per_rank = 64;
    config.max_hidden = 1024;
    config.max_experts = 16;
    config.timeout_seconds = 20;
    return config;
}

}  // namespace

SY_TEST(NetGin, SingleNodeNcclCommunicatorKeepsCudaIpc) {
    require_gpus(1);
    const nccl::Library& lib = nccl_or_skip();
    // One rank per GPU, one process (NCCL refuses two ranks on one GPU), each rank a thread.
    const int gpus = std::min(cuda_device_count(), 2);
    std::vector<int> devices;
    for (int d = 0; d < gpus; ++d) devices.push_back(d);
    std::vector<nccl::Comm> comms(static_cast<size_t>(gpus), nullptr);
    SY_CHECK_EQ(lib.comm_init_all(comms.data(), gpus, devices.data()), nccl::kSuccess);
    std::vector<std::string> failures(static_cast<size_t>(gpus));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < gpus; ++rank) {
        threads.emplace_back([&, rank] {
            try {
                SY_CUDA_CHECK(cudaSetDevice(rank));
                auto communicator = wrap_nccl_communicator(comms[size_t(rank)], rank);
                SY_CHECK(nccl::communicator_handle(*communicator) == comms[size_t(rank)]);
                for (NetworkBackend backend : {NetworkBackend::kAuto, NetworkBackend::kGin}) {
                    BufferConfig config = small_config();
                    config.network_backend = backend;  // one node: no network, whatever is asked
                    Buffer buffer(communicator, rank, config);
                    SY_CHECK_EQ(buffer.topology().num_nodes, 1);
                    SY_CHECK_EQ(buffer.network_stats().backend, std::string("none"));
                    cudaStream_t stream = nullptr;
                    SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
                    buffer.barrier(stream);  // the NVLink barrier over CUDA IPC (or one rank)
                    buffer.synchronize();
                    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
                    SY_CUDA_CHECK(cudaStreamDestroy(stream));
                }
            } catch (const TestFailure& failure) {
                failures[size_t(rank)] = failure.message;
            } catch (const std::exception& error) {
                failures[size_t(rank)] = error.what();
            }
        });
    }
    for (auto& thread : threads) thread.join();
    for (auto comm : comms) lib.comm_destroy(comm);
    for (int rank = 0; rank < gpus; ++rank)
        SY_CHECK_MSG(failures[size_t(rank)].empty(), "rank " << rank << ": " << failures[size_t(rank)]);
}

SY_TEST(NetGin, SetUpRunsAsFarAsThisMachineAllows) {
    require_gpus(1);
    const nccl::Library& lib = nccl_or_skip();
    nccl::Comm comm = nullptr;
    const int device = 0;
    SY_CHECK_EQ(lib.comm_init_all(&comm, 1, &device), nccl::kSuccess);
    {
        auto communicator = wrap_nccl_communicator(comm, device);
        // One rank that calls itself a node of two: the set-up's steps run on this one rank.
        Topology topology = comm::make_topology(0, {RankPlacement{}}, 0);
        topology.num_nodes = 2;
        comm::NodeLayout layout;
        layout.num_nodes = 2;
        std::string outcome;
        try {
            auto gin = net::prepare_gin(*communicator, topology, layout, device, 30s);
            std::printf("  capability agreed: NCCL %s, nvcc compiled and loaded the GIN kernels\n",
                        nccl::version_text(lib.version).c_str());
            auto windows = net::allocate_gin_window(*gin, *communicator, topology, device, size_t(4) << 20, 30s);
            outcome = "a device communicator with " + std::to_string(gin->num_contexts) + " GIN context(s)";
            SY_CHECK(windows->local() == gin->memory);
        } catch (const UnsupportedError& error) {
            outcome = error.what();
            SY_CHECK(outcome.find(" compiled, ") != std::string::npos);
            SY_CHECK(outcome.find(" running") != std::string::npos);
        }
        std::printf("  %s\n", outcome.c_str());
    }
    lib.comm_destroy(comm);
}

SY_TEST_MAIN()
