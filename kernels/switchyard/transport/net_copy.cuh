// The emulated network's copy kernel: the engine (src/net/emulated_network.cpp) moves one call's
// copies with one launch of it on its own stream, from a few SMs the ranks' budgets leave free
// (tuning::kEmulatedNetworkSmsPerRank). The copies of a call may run in any order and overlap in
// time (the executor's contract); the words after them (signals, counters) are written in stream
// order, once the kernel has ended.
//
// Why a kernel of our own: the driver ran the engine's cudaMemcpyBatchAsync copies between ranks of
// one GPU as its own kernels anyway (they stalled when the ranks' kernels held every SM), at ~7 us
// of host time per copy; one launch per call costs a few microseconds whatever the copies.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

// One copy: device addresses (any alignment) and its length.
struct NetCopyItem {
    uint64_t dst;
    uint64_t src;
    uint64_t bytes;
};

// Copies per launch: the arguments travel by value (12 KB of kernel parameters), so the engine
// needs no staging memory; a call with more copies takes several launches.
constexpr int32_t kNetCopyMaxItems = 512;

struct NetCopyArgs {
    int32_t count;
    int32_t pad;
    NetCopyItem items[kNetCopyMaxItems];
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace net_copy_detail {

// The part of `item` that block `part` of `parts` moves: 16-byte units when both ends allow them
// (four loads in flight per thread, read past L1: sources were written by other kernels), else 8-
// or 1-byte units; the bytes after the last whole unit go to part 0.
template <int kThreads, typename Unit>
SY_DEVICE void copy_units(const NetCopyItem& item, int32_t part, int32_t parts) {
    constexpr int kInFlight = 4;
    const uint64_t units = item.bytes / sizeof(Unit);
    Unit* dst = reinterpret_cast<Unit*>(item.dst);
    const Unit* src = reinterpret_cast<const Unit*>(item.src);
    const uint64_t stride = uint64_t(parts) * kThreads;
    uint64_t u = uint64_t(part) * kThreads + threadIdx.x;
    for (; u + (kInFlight - 1) * stride < units; u += kInFlight * stride) {
        Unit values[kInFlight];
#pragma unroll
        for (int i = 0; i < kInFlight; ++i) values[i] = __ldcg(src + u + i * stride);
#pragma unroll
        for (int i = 0; i < kInFlight; ++i) __stcg(dst + u + i * stride, values[i]);
    }
    for (; u < units; u += stride) __stcg(dst + u, __ldcg(src + u));
    if (part == 0) {
        const uint64_t tail = units * sizeof(Unit);
        for (uint64_t b = tail + threadIdx.x; b < item.bytes; b += kThreads)
            reinterpret_cast<uint8_t*>(item.dst)[b] =
                __ldcg(reinterpret_cast<const unsigned char*>(item.src) + b);
    }
}

}  // namespace net_copy_detail

// Every block takes a share of every copy; copy i starts at block i % gridDim.x, so a call of
// many small copies spreads over the blocks.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) net_copy_kernel(const __grid_constant__ NetCopyArgs args) {
    const int32_t parts = int32_t(gridDim.x);
    for (int32_t i = 0; i < args.count; ++i) {
        const NetCopyItem& item = args.items[i];
        const int32_t part = (int32_t(blockIdx.x) + parts - i % parts) % parts;
        const uint64_t alignment = item.dst | item.src;
        if ((alignment & 15) == 0)
            net_copy_detail::copy_units<kThreads, uint4>(item, part, parts);
        else if ((alignment & 7) == 0)
            net_copy_detail::copy_units<kThreads, unsigned long long>(item, part, parts);
        else
            net_copy_detail::copy_units<kThreads, unsigned char>(item, part, parts);
    }
}

#endif

}  // namespace switchyard::device
