// Microbenchmark: how fast the emulated network's copy kernel (transport/net_copy.cuh) moves one
// engine call on its own, by grid size, on an idle GPU. It decides how many blocks the engine
// launches and how much a piece carries. (Holding SMs with a spinning kernel launched first does
// not work as a load: its blocks that wait for an SM can keep the copy kernel's blocks from being
// scheduled at all.)
//
// A call is what HT-shaped records give the engine: `copies` copies of `copy_bytes` (default 25 of
// 197 KiB, about 5 MB), cut into 32 KiB pieces as the engine cuts them. Cases:
//   product    net_copy_kernel as the engine launches it, grid = min(pieces, blocks)
//   units<N>   the same piece loop with N 16-byte loads per thread in flight (pieces of N * 8 KiB)
// Each case: event-timed launches (median of `iters`), then the destination compared with the source.
// Last, the engine's stream at the wire's pace (1 MB a call, each with its signal word): the word
// as a stream memory operation after the launch, or written by the launch's last block.
//
// Build and run (sm_90a; not part of the library build):
//   nvcc -O3 -std=c++20 -arch=sm_90a -Ikernels bench/micro/net_copy.cu -lcuda -o net_copy
//   ./net_copy [copies=25] [copy_bytes=201728] [iters=20]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_common.cuh"
#include "switchyard/transport/net_copy.cuh"

namespace {

using switchyard::device::NetCopyArgs;
using switchyard::device::NetCopyItem;

// The product's piece copy with `kUnits` 16-byte loads per thread in flight (pieces of
// kUnits * 8 KiB), block b moving pieces b, b + grid, ...
template <int kUnits>
__global__ void __launch_bounds__(switchyard::device::kNetCopyThreads)
    units_kernel(const __grid_constant__ NetCopyArgs args) {
    for (int32_t i = int32_t(blockIdx.x); i < args.count; i += int32_t(gridDim.x))
        switchyard::device::net_copy_detail::copy_aligned_piece<kUnits>(args.items[i]);
}

// The call's pieces of `piece_bytes` (copies back to back in both buffers).
std::vector<NetCopyItem> pieces(uint8_t* dst, const uint8_t* src, int copies, uint64_t copy_bytes,
                                uint64_t piece_bytes) {
    std::vector<NetCopyItem> out;
    for (int c = 0; c < copies; ++c)
        for (uint64_t at = 0; at < copy_bytes; at += piece_bytes)
            out.push_back({reinterpret_cast<uint64_t>(dst + c * copy_bytes + at),
                           reinterpret_cast<uint64_t>(src + c * copy_bytes + at),
                           std::min(piece_bytes, copy_bytes - at)});
    return out;
}

template <typename Launch>
float median_us(int iters, cudaStream_t stream, Launch launch) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<float> times;
    for (int i = 0; i < iters + 2; ++i) {
        CHECK(cudaEventRecord(start, stream));
        launch();
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (i >= 2) times.push_back(ms * 1000.0f);
    }
    std::sort(times.begin(), times.end());
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int copies = argc > 1 ? std::atoi(argv[1]) : 25;
    const uint64_t copy_bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 201728;
    const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
    const uint64_t total = uint64_t(copies) * copy_bytes;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    uint8_t *src = nullptr, *dst = nullptr;
    CHECK(cudaMalloc(&src, total));
    CHECK(cudaMalloc(&dst, total));
    std::vector<uint8_t> host(total);
    for (uint64_t i = 0; i < total; ++i) host[i] = uint8_t(i * 2654435761u >> 13);
    CHECK(cudaMemcpy(src, host.data(), total, cudaMemcpyHostToDevice));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    std::printf("call: %d copies of %llu bytes (%.2f MB), %d SMs\n", copies, (unsigned long long)copy_bytes,
                total / 1e6, sms);
    std::fflush(stdout);

    auto run_case = [&](const char* name, uint64_t piece_bytes, int blocks, auto kernel) {
        const auto items = pieces(dst, src, copies, copy_bytes, piece_bytes);
        std::vector<NetCopyArgs> launches;
        for (size_t first = 0; first < items.size(); first += switchyard::device::kNetCopyMaxItems) {
            NetCopyArgs args{};
            args.count =
                int32_t(std::min<size_t>(switchyard::device::kNetCopyMaxItems, items.size() - first));
            std::copy(items.begin() + first, items.begin() + first + args.count, args.items);
            launches.push_back(args);
        }
        CHECK(cudaMemset(dst, 0, total));
        const float us = median_us(iters, stream, [&] {
            for (const NetCopyArgs& args : launches)
                kernel<<<std::min(args.count, blocks), switchyard::device::kNetCopyThreads, 0, stream>>>(
                    args);
        });
        CHECK(cudaDeviceSynchronize());
        std::vector<uint8_t> back(total);
        CHECK(cudaMemcpy(back.data(), dst, total, cudaMemcpyDeviceToHost));
        const bool same = back == host;
        std::printf("%-10s piece %6llu B  blocks %4d: %8.1f us  %7.1f GB/s  %s\n", name,
                    (unsigned long long)piece_bytes, blocks, us, total / (us * 1e3),
                    same ? "ok" : "MISMATCH");
        std::fflush(stdout);
        if (!same) std::exit(1);
    };
    for (const int blocks : {8, 16, 32, 64, 160})
        run_case("product", switchyard::device::kNetCopyPieceBytes, blocks,
                 switchyard::device::net_copy_kernel);
    for (const int blocks : {8, 16, 32}) {
        run_case("units8", 8 * 8192, blocks, units_kernel<8>);
        run_case("units16", 16 * 8192, blocks, units_kernel<16>);
    }

    // The engine's stream under the wire's pace: `steps` calls of one batch (1 MB) each, every call
    // followed by its signal word, back to back on one stream at 16 blocks: the signal as a stream
    // memory operation after the launch (memop) or written by the launch's last block (fused).
    // GPU time per step (events around all steps) and host time per step (the calls themselves).
    const int steps = 32;
    const uint64_t step_bytes = uint64_t(1) << 20;
    if (total >= step_bytes) {
        uint64_t* words = nullptr;
        uint32_t* blocks_done = nullptr;
        CHECK(cudaMalloc(&words, sizeof(uint64_t)));
        CHECK(cudaMalloc(&blocks_done, sizeof(uint32_t)));
        CHECK(cudaMemset(blocks_done, 0, sizeof(uint32_t)));
        NetCopyArgs args{};
        const auto items = pieces(dst, src, 1, step_bytes, switchyard::device::kNetCopyPieceBytes);
        args.count = int32_t(items.size());
        std::copy(items.begin(), items.end(), args.items);
        args.blocks_done = blocks_done;
        for (const bool fused : {false, true}) {
            double host_us = 0;
            const float us = median_us(iters, stream, [&] {
                const auto start = std::chrono::steady_clock::now();
                for (int step = 0; step < steps; ++step) {
                    args.num_words = fused ? 1 : 0;
                    args.words[0] = {reinterpret_cast<uint64_t>(words), uint64_t(step + 1)};
                    switchyard::device::net_copy_kernel<<<std::min(args.count, 16),
                                                          switchyard::device::kNetCopyThreads, 0, stream>>>(args);
                    if (!fused && cuStreamWriteValue64(stream, reinterpret_cast<CUdeviceptr>(words),
                                                       uint64_t(step + 1), CU_STREAM_WRITE_VALUE_DEFAULT) !=
                                      CUDA_SUCCESS) {
                        std::fprintf(stderr, "cuStreamWriteValue64 failed\n");
                        std::exit(1);
                    }
                }
                host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                              .count();
            });
            uint64_t last = 0;
            CHECK(cudaMemcpy(&last, words, sizeof last, cudaMemcpyDeviceToHost));
            std::printf("steps %-6s %d x %llu B, 16 blocks: %6.2f us a step on the GPU (%5.1f GB/s), %5.2f us a "
                        "step on the host, last word %llu %s\n",
                        fused ? "fused" : "memop", steps, (unsigned long long)step_bytes, us / steps,
                        steps * step_bytes / (us * 1e3), host_us / steps, (unsigned long long)last,
                        last == uint64_t(steps) ? "ok" : "WRONG");
            std::fflush(stdout);
            if (last != uint64_t(steps)) std::exit(1);
        }
    }
    return 0;
}
