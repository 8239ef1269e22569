// Microbenchmark: what the synchronisation steps of an LL kernel cost on their own, so the LL
// kernels' fixed cost can be split into launch, fences, arrivals and waits.
//
// Each case is one kernel (grid G x 256 threads) run on one GPU (the "peer" is the GPU itself) or
// on two GPUs at once (each GPU's peer is the other), timed with events around a single launch
// behind a device-side gate (so both GPUs start together), median of the iterations:
//   empty        nothing
//   elect_gpu    thread 0 of each block: fence.acq_rel.gpu + atomicAdd on one local counter
//   elect_sys    fence.acq_rel.sys + atomicAdd; the last block fences again and raises the peer's flag
//   chain        elect_sys, then every block waits (ld.acquire.sys) for its own flag from the peer
//   chain_data   chain, after every warp stored `bytes` to the peer
//   arrive       every block fences (sys) and adds 1 to a counter at the peer (a relaxed red.sys after
//                the fence, as the LL kernels arrive since dbf0b71);
//                every block then waits until its own counter has all G arrivals of the peer
//   arrive_data  arrive, after every warp stored `bytes` to the peer
//   warp_arrive_data  as arrive_data, but every warp fences and arrives itself (no __syncthreads)
//
// Build and run (sm_90a; not part of the library build, which needs no nvcc):
//   nvcc -O3 -std=c++20 -arch=sm_90a -Ikernels bench/micro/sync_costs.cu -o sync_costs && ./sync_costs
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_common.cuh"
#include "switchyard/common/ptx.cuh"

namespace ptx = switchyard::device::ptx;

enum Mode : int { kEmpty, kElectGpu, kElectSys, kChain, kChainData, kArrive, kArriveData, kWarpArriveData };
const char* const kModeNames[] = {"empty",      "elect_gpu", "elect_sys",   "chain",
                                  "chain_data", "arrive",    "arrive_data", "warp_arrive_data"};

struct Params {
    int mode;
    uint64_t sequence;    // 1, 2, ... per launch of one case
    uint64_t* counter;    // local election counter
    uint64_t* peer_flag;  // the peer's flag / arrival counter that this GPU raises
    uint64_t* own_flag;   // this GPU's flag / arrival counter that the peer raises
    uint8_t* peer_data;   // stores go here
    int bytes_per_warp;
};

__device__ void wait_at_least(const uint64_t* address, uint64_t target) {
    const uint64_t start = ptx::globaltimer_ns();
    while (ptx::ld_acquire_sys(address) < target) {
        if (ptx::globaltimer_ns() - start > 2000000000ull) {
            printf("sync_costs: wait timed out (block %d)\n", blockIdx.x);
            __trap();
        }
    }
}

__global__ void __launch_bounds__(256, 1) case_kernel(const __grid_constant__ Params p) {
    __shared__ int last;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (p.mode == kEmpty) return;
    const bool data = p.mode == kChainData || p.mode == kArriveData || p.mode == kWarpArriveData;
    if (data) {
        uint8_t* to = p.peer_data + (int64_t(blockIdx.x) * 8 + warp) * p.bytes_per_warp;
        for (int offset = lane * 16; offset < p.bytes_per_warp; offset += 512)
            *reinterpret_cast<uint4*>(to + offset) = make_uint4(offset, 1, 2, 3);
    }
    if (p.mode == kWarpArriveData) {
        __syncwarp();
        if (lane == 0) {
            ptx::fence_acq_rel_sys();
            ptx::red_add_relaxed_sys(p.peer_flag, 1);
        }
        if (threadIdx.x == 0) wait_at_least(p.own_flag, p.sequence * gridDim.x * 8);
        __syncthreads();
        return;
    }
    __syncthreads();
    if (p.mode == kArrive || p.mode == kArriveData) {
        if (threadIdx.x == 0) {
            ptx::fence_acq_rel_sys();
            ptx::red_add_relaxed_sys(p.peer_flag, 1);
            wait_at_least(p.own_flag, p.sequence * gridDim.x);
        }
        __syncthreads();
        return;
    }
    if (threadIdx.x == 0) {
        if (p.mode == kElectGpu)
            ptx::fence_acq_rel_gpu();
        else
            ptx::fence_acq_rel_sys();
        last =
            atomicAdd(reinterpret_cast<unsigned long long*>(p.counter), 1ull) == p.sequence * gridDim.x - 1;
        if (last && p.mode != kElectGpu) {
            ptx::fence_acq_rel_sys();
            ptx::st_release_sys(p.peer_flag, p.sequence);
        }
    }
    __syncthreads();
    if (p.mode == kChain || p.mode == kChainData) {
        if (threadIdx.x == 0) wait_at_least(p.own_flag, p.sequence);
        __syncthreads();
    }
}

int main(int argc, char** argv) {
    const int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices));
    if (devices < 1) {
        std::printf("sync_costs: no GPU\n");
        return 0;
    }
    const int bytes_per_warp = 1024;
    const int grids[] = {1, 8, 32, 132};
    int* open = nullptr;
    CHECK(cudaHostAlloc(&open, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    std::printf("%-18s %5s %5s %12s %12s\n", "case", "gpus", "grid", "median_us", "min_us");
    for (int gpus = 1; gpus <= std::min(devices, 2); ++gpus) {
        struct PerGpu {
            cudaStream_t stream;
            uint64_t* words;  // [0] counter, [1] flag
            uint8_t* data;
            cudaEvent_t start, stop;
        };
        std::vector<PerGpu> g(gpus);
        for (int d = 0; d < gpus; ++d) {
            CHECK(cudaSetDevice(d));
            if (gpus == 2) {
                const int peer = 1 - d;
                cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
                if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
                cudaGetLastError();
            }
            CHECK(cudaStreamCreateWithFlags(&g[d].stream, cudaStreamNonBlocking));
            CHECK(cudaMalloc(&g[d].words, 256));
            CHECK(cudaMalloc(&g[d].data, size_t(132) * 8 * bytes_per_warp));
            CHECK(cudaEventCreate(&g[d].start));
            CHECK(cudaEventCreate(&g[d].stop));
        }
        for (int mode = kEmpty; mode <= kWarpArriveData; ++mode) {
            for (int grid : grids) {
                for (int d = 0; d < gpus; ++d) {
                    CHECK(cudaSetDevice(d));
                    CHECK(cudaMemset(g[d].words, 0, 256));
                    CHECK(cudaDeviceSynchronize());
                }
                std::vector<double> samples;
                for (int it = 0; it <= iterations; ++it) {
                    *reinterpret_cast<volatile int*>(open) = 0;
                    for (int d = 0; d < gpus; ++d) {
                        const int peer = gpus == 2 ? 1 - d : d;
                        Params p{mode,           uint64_t(it + 1), g[d].words,    g[peer].words + 1,
                                 g[d].words + 1, g[peer].data,     bytes_per_warp};
                        CHECK(cudaSetDevice(d));
                        gate_kernel<<<1, 1, 0, g[d].stream>>>(open);
                        CHECK(cudaEventRecord(g[d].start, g[d].stream));
                        case_kernel<<<grid, 256, 0, g[d].stream>>>(p);
                        CHECK(cudaEventRecord(g[d].stop, g[d].stream));
                    }
                    *reinterpret_cast<volatile int*>(open) = 1;
                    double worst = 0;
                    for (int d = 0; d < gpus; ++d) {
                        CHECK(cudaSetDevice(d));
                        CHECK(cudaEventSynchronize(g[d].stop));
                        float ms = 0;
                        CHECK(cudaEventElapsedTime(&ms, g[d].start, g[d].stop));
                        worst = std::max(worst, double(ms) * 1000.0);
                    }
                    if (it > 0) samples.push_back(worst);  // the first launch loads the module
                }
                std::sort(samples.begin(), samples.end());
                std::printf("%-18s %5d %5d %12.2f %12.2f\n", kModeNames[mode], gpus, grid,
                            samples[samples.size() / 2], samples.front());
            }
        }
    }
    return 0;
}
