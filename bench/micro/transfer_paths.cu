// Microbenchmark: how fast each way of moving a bulk payload between two NVLink peers is, per SM
// count, with both GPUs sending at once (as in dispatch and combine). It decides how the HT kernels
// should move data: SM stores against the copy engine, and how many stores in flight per SM a
// combine needs.
//
// Each GPU moves `bytes` to (or from) the other GPU, both directions at once; a case's time is the
// slower GPU's, event-timed around one launch behind a device-side gate; median of the iterations.
//   ce          cudaMemcpyAsync into the peer's memory (the copy engine; zero SMs): the bound
//   push_st     every warp loads 16 B per lane from local memory and stores it to the peer
//               (8 independent 16-byte stores per lane in flight), as the HT kernels do today
//   pull_ld     the same with the roles swapped: loads from the peer, stores to local memory
//   pull_bulk   one thread per block drives bulk (TMA) copies: peer -> shared memory (mbarrier
//               completion), then shared -> local; `stages` chunks in flight per block
//   push_bulk   bulk copies local -> shared, then shared -> peer (bulk stores)
// After the last iteration of each case the destination is compared with the source (all bytes).
//
// Build and run (sm_90a; not part of the library build, which needs no nvcc):
//   nvcc -O3 -std=c++20 -arch=sm_90a -Ikernels bench/micro/transfer_paths.cu -o transfer_paths
//   ./transfer_paths [bytes=58720256] [iters=10]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "micro_common.cuh"
#include "switchyard/common/ptx.cuh"

namespace ptx = switchyard::device::ptx;

enum Mode : int { kCopyEngine, kPushStores, kPullLoads, kPullBulk, kPushBulk };
const char* const kModeNames[] = {"ce", "push_st", "pull_ld", "pull_bulk", "push_bulk"};

constexpr int kChunkBytes = 28672;  // two bf16 rows of hidden 7168
constexpr int kStages = 7;          // 196 KB of shared memory per block
constexpr int kStoreThreads = 512;
constexpr int kUnroll = 8;

// Register path: 16 B per lane, kUnroll loads in flight before the stores.
__global__ void __launch_bounds__(kStoreThreads)
    copy_registers(const int4* source, int4* destination, int64_t vectors) {
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (kUnroll - 1) * stride < vectors; i += kUnroll * stride) {
        int4 values[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) values[u] = source[i + u * stride];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) destination[i + u * stride] = values[u];
    }
    for (; i < vectors; i += stride) destination[i] = source[i];
}

// Bulk path: thread 0 of each block keeps kStages chunks in flight (load into a stage, then store
// it out once loaded; a stage is reloaded once the store issued one step earlier has read it).
__global__ void copy_bulk(const uint8_t* source, uint8_t* destination, int64_t bytes) {
    extern __shared__ __align__(128) uint8_t stages[];
    __shared__ __align__(8) uint64_t loaded[kStages];
    if (threadIdx.x != 0) return;
    const int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
    auto chunk_bytes = [&](int64_t c) {
        const int64_t left = bytes - c * kChunkBytes;
        return uint32_t(left < kChunkBytes ? left : kChunkBytes);
    };
    for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(&loaded[s], 1);
    ptx::fence_mbarrier_init();
    // Chunk j of this block is global chunk blockIdx.x + j * gridDim.x.
    const int64_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
    auto load = [&](int64_t j) {
        const int64_t c = blockIdx.x + j * gridDim.x;
        const int s = int(j % kStages);
        ptx::mbarrier_arrive_expect_tx(&loaded[s], chunk_bytes(c));
        ptx::bulk_load(stages + s * kChunkBytes, source + c * kChunkBytes, chunk_bytes(c), &loaded[s]);
    };
    for (int64_t j = 0; j < mine && j < kStages; ++j) load(j);
    for (int64_t j = 0; j < mine; ++j) {
        const int s = int(j % kStages);
        while (!ptx::mbarrier_try_wait_parity(&loaded[s], uint32_t((j / kStages) & 1))) {
        }
        const int64_t c = blockIdx.x + j * gridDim.x;
        ptx::bulk_store(destination + c * kChunkBytes, stages + s * kChunkBytes, chunk_bytes(c));
        ptx::bulk_commit();
        // The store of step j - 1 has read its stage: reload that stage with chunk j - 1 + kStages.
        if (j >= 1 && j - 1 + kStages < mine) {
            ptx::bulk_wait_read<1>();
            load(j - 1 + kStages);
        }
    }
    ptx::bulk_wait<0>();
}

struct Gpu {
    int device = 0;
    uint8_t* source = nullptr;       // local payload
    uint8_t* destination = nullptr;  // where the peer's payload lands (push) or this GPU pulls to
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
};

int main(int argc, char** argv) {
    const int64_t bytes = argc > 1 ? std::atoll(argv[1]) : 58720256;  // 4096 bf16 rows of 7168
    const int iters = argc > 2 ? std::atoi(argv[2]) : 10;
    int count = 0;
    CHECK(cudaGetDeviceCount(&count));
    if (count < 1) {
        std::printf("transfer_paths: no CUDA GPU\n");
        return 0;
    }
    const int num_gpus = std::min(count, 2);
    std::vector<Gpu> gpus(num_gpus);
    int* gate = nullptr;
    CHECK(cudaHostAlloc(&gate, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    int sms = 0;
    for (int g = 0; g < num_gpus; ++g) {
        Gpu& gpu = gpus[g];
        gpu.device = g;
        CHECK(cudaSetDevice(g));
        if (num_gpus == 2) CHECK(cudaDeviceEnablePeerAccess(1 - g, 0));
        CHECK(cudaMalloc(&gpu.source, bytes));
        CHECK(cudaMalloc(&gpu.destination, bytes));
        std::vector<uint8_t> pattern(bytes);
        for (int64_t i = 0; i < bytes; ++i) pattern[i] = uint8_t((i * 131 + g * 17 + (i >> 12)) & 0xff);
        CHECK(cudaMemcpy(gpu.source, pattern.data(), bytes, cudaMemcpyHostToDevice));
        CHECK(cudaStreamCreateWithFlags(&gpu.stream, cudaStreamNonBlocking));
        CHECK(cudaEventCreate(&gpu.start));
        CHECK(cudaEventCreate(&gpu.stop));
        CHECK(cudaFuncSetAttribute(copy_bulk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   kStages * kChunkBytes));
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g));
    }
    std::printf("transfer_paths: %d GPU(s), %lld bytes per direction, %d iterations, %d SMs per GPU\n",
                num_gpus, (long long)bytes, iters, sms);
    std::printf("%-10s %5s %10s %12s %s\n", "mode", "sms", "median_us", "GB/s_per_dir", "check");

    for (int mode : {kCopyEngine, kPushStores, kPullLoads, kPullBulk, kPushBulk}) {
        std::vector<int> grids =
            mode == kCopyEngine ? std::vector<int>{0} : std::vector<int>{4, 8, 16, 24, 32, 64};
        for (int grid : grids) {
            std::vector<double> times;
            for (int it = 0; it < iters + 1; ++it) {
                *reinterpret_cast<volatile int*>(gate) = 0;
                for (int g = 0; g < num_gpus; ++g) {
                    Gpu& gpu = gpus[g];
                    Gpu& peer = gpus[(g + 1) % num_gpus];
                    CHECK(cudaSetDevice(g));
                    int* gate_device = nullptr;
                    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&gate_device), gate, 0));
                    gate_kernel<<<1, 1, 0, gpu.stream>>>(gate_device);
                    CHECK(cudaEventRecord(gpu.start, gpu.stream));
                    // Push: this GPU's source into the peer's destination. Pull: the peer's source
                    // into this GPU's destination. Either way each destination gets one payload.
                    const bool pull = mode == kPullLoads || mode == kPullBulk;
                    const uint8_t* from = pull ? peer.source : gpu.source;
                    uint8_t* to = pull ? gpu.destination : peer.destination;
                    if (mode == kCopyEngine)
                        CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, gpu.stream));
                    else if (mode == kPushStores || mode == kPullLoads)
                        copy_registers<<<grid, kStoreThreads, 0, gpu.stream>>>(
                            reinterpret_cast<const int4*>(from), reinterpret_cast<int4*>(to), bytes / 16);
                    else
                        copy_bulk<<<grid, 32, kStages * kChunkBytes, gpu.stream>>>(from, to, bytes);
                    CHECK(cudaGetLastError());
                    CHECK(cudaEventRecord(gpu.stop, gpu.stream));
                }
                *reinterpret_cast<volatile int*>(gate) = 1;
                double slowest = 0;
                for (Gpu& gpu : gpus) {
                    CHECK(cudaSetDevice(gpu.device));
                    CHECK(cudaStreamSynchronize(gpu.stream));
                    float ms = 0;
                    CHECK(cudaEventElapsedTime(&ms, gpu.start, gpu.stop));
                    slowest = std::max(slowest, double(ms) * 1e3);
                }
                if (it > 0) times.push_back(slowest);  // the first run warms up
            }
            std::sort(times.begin(), times.end());
            const double median = times[times.size() / 2];
            // Check: every destination holds its peer's source.
            bool ok = true;
            std::vector<uint8_t> a(bytes), b(bytes);
            for (int g = 0; g < num_gpus; ++g) {
                CHECK(cudaSetDevice(g));
                CHECK(cudaMemcpy(a.data(), gpus[g].destination, bytes, cudaMemcpyDeviceToHost));
                CHECK(cudaMemcpy(b.data(), gpus[(g + 1) % num_gpus].source, bytes, cudaMemcpyDeviceToHost));
                ok = ok && std::memcmp(a.data(), b.data(), bytes) == 0;
                CHECK(cudaMemset(gpus[g].destination, 0, bytes));
            }
            std::printf("%-10s %5d %10.1f %12.1f %s\n", kModeNames[mode], grid, median,
                        double(bytes) / median / 1e3, ok ? "ok" : "MISMATCH");
            std::fflush(stdout);
        }
    }
    return 0;
}
