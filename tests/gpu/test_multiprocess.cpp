// Ranks as processes: the local-process communicator and CUDA-IPC mapping of the buffers.
// The test binary starts one child process per rank (fork + exec of itself, so no CUDA state is
// inherited); each child creates a Buffer, runs barriers, writes every peer's region through the
// IPC mapping with a kernel and checks its own region after a barrier.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "jit/jit.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/testing/peer_store.cuh"

using namespace switchyard;
using namespace switchyard::testing;

namespace {

constexpr const char* kRankVariable = "SWITCHYARD_TEST_MP_RANK";

// The child's job. Returns the process exit code.
int run_child(int rank, int num_ranks, int num_gpus, const std::string& key) {
    try {
        auto communicator = make_local_process_communicator(key, rank, num_ranks, std::chrono::seconds(60));
        const int device = rank * num_gpus / num_ranks;
        SY_CUDA_CHECK(cudaSetDevice(device));
        cudaStream_t stream = nullptr;
        SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        BufferConfig config;
        config.max_tokens_per_rank = 16;
        config.max_hidden = 128;
        config.timeout_seconds = 30;
        Buffer buffer(communicator, device, config);
        std::vector<uint8_t*> peers(num_ranks);
        for (int peer = 0; peer < num_ranks; ++peer) {
            peers[peer] = buffer.peer_memory(peer);
            if (!peers[peer]) throw std::runtime_error("peer " + std::to_string(peer) + " is not mapped");
        }
        DeviceArray<uint8_t*> table(peers);
        std::vector<uint64_t> slots(num_ranks);
        const jit::Kernel& store = jit::get_kernel(
            {"peer_store", "switchyard/testing/peer_store.cuh", "switchyard::device::peer_store_kernel"},
            device);
        communicator->barrier(std::chrono::seconds(60));
        for (uint64_t round = 1; round <= 10; ++round) {
            device::PeerStoreArgs args{table.data(), int64_t(buffer.data_offset()), rank, num_ranks,
                                       round * 100 + rank};
            jit::LaunchConfig launch;
            launch.block[0] = 32;
            launch.stream = stream;
            jit::launch(store, launch, &args, sizeof(args));
            buffer.barrier(stream);
            SY_CUDA_CHECK(cudaMemcpyAsync(slots.data(), buffer.local_memory() + buffer.data_offset(),
                                          8 * num_ranks, cudaMemcpyDeviceToHost, stream));
            SY_CUDA_CHECK(cudaStreamSynchronize(stream));
            for (int peer = 0; peer < num_ranks; ++peer)
                if (slots[peer] != round * 100 + peer)
                    throw std::runtime_error("round " + std::to_string(round) + ": slot of rank " +
                                             std::to_string(peer) + " holds " + std::to_string(slots[peer]));
            buffer.barrier(stream);
        }
        buffer.synchronize();
        communicator->barrier(std::chrono::seconds(60));
        return 0;
    } catch (const TestFailure& failure) {
        std::fprintf(stderr, "rank %d: %s\n", rank, failure.message.c_str());
    } catch (const std::exception& error) {
        std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
    }
    return 1;
}

// Starts the children and waits for them; returns the number that failed.
int run_processes(int num_ranks, int num_gpus) {
    const std::string key = "sy-mp-" + std::to_string(getpid()) + "-" + std::to_string(num_ranks) + "-" +
                            std::to_string(num_gpus);
    std::vector<pid_t> children;
    for (int rank = 0; rank < num_ranks; ++rank) {
        const pid_t pid = fork();
        if (pid == 0) {
            const std::string value = std::to_string(rank) + ":" + std::to_string(num_ranks) + ":" +
                                      std::to_string(num_gpus) + ":" + key;
            setenv(kRankVariable, value.c_str(), 1);
            char* const argv[] = {const_cast<char*>("/proc/self/exe"), nullptr};
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        children.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : children) {
        int status = 0;
        waitpid(pid, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    return failed;
}

}  // namespace

SY_TEST(MultiProcess, IpcMappedBuffersAndBarriers) {
    require_gpus(1);
    const int gpus = std::min(2, cuda_device_count());
    for (int num_gpus = 1; num_gpus <= gpus; ++num_gpus) {
        for (int ranks : {2, 4}) {
            if (ranks == 4 && num_gpus == 1) continue;  // time-sliced without MPS: slow, covered by 2 ranks
            const int failed = run_processes(ranks, num_gpus);
            SY_CHECK_MSG(failed == 0,
                         failed << " of " << ranks << " processes failed (" << num_gpus << " GPU(s))");
            std::printf("  %d processes on %d GPU(s): IPC-mapped writes ordered by the GPU barrier\n", ranks,
                        num_gpus);
        }
    }
}

int main(int argc, char** argv) {
    if (const char* value = std::getenv(kRankVariable)) {
        int rank = 0, ranks = 0, gpus = 0;
        char key[128] = {};
        if (std::sscanf(value, "%d:%d:%d:%127s", &rank, &ranks, &gpus, key) != 4) return 2;
        switchyard::testing::register_test_kernels();  // the child uses the tests' own kernels too
        return run_child(rank, ranks, gpus, key);
    }
    return switchyard::testing::run_all(argc, argv);
}
