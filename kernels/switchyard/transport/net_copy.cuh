// The emulated network's copy kernel: the engine (src/net/emulated_network.cpp) moves one call's
// copies with one launch of it on its own stream, from a few SMs the ranks' budgets leave free
// (tuning::kEmulatedNetworkSmsPerRank). The copies of a call may run in any order and overlap in
// time (the executor's contract); the words after them (signals, counters, flush reports) ride in
// the same launch and are written by its last block once every block's pieces have landed, so a
// call is one launch, not a launch and a stream memory operation: on one H200 with four ranks the
// stream spent more time between the two than in the copy (decision of 2026-12-02).
//
// Why a kernel of our own: the engine's cudaMemcpyBatchAsync work between ranks of one GPU needed
// SMs anyway (it stalled while the ranks' kernels held every SM and ran once 4 SMs per rank were
// left free), at ~7 us of host time per copy; one launch per call costs a few microseconds whatever
// the copies, and its SM needs are known.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

// One piece of a copy: device addresses (any alignment) and its length, at most
// kNetCopyPieceBytes (the engine cuts its copies into pieces).
struct NetCopyItem {
    uint64_t dst;
    uint64_t src;
    uint64_t bytes;
};

// A piece is what one block moves with one load per thread in flight per 16 bytes: 32 KiB over 512
// threads, four 16-byte loads each, then four stores.
constexpr int32_t kNetCopyThreads = 512;
constexpr int32_t kNetCopyUnitsPerThread = 4;
constexpr uint64_t kNetCopyPieceBytes = uint64_t(kNetCopyThreads) * kNetCopyUnitsPerThread * 16;
// Blocks the kernel is built to fit on one SM (registers): the engine's launches are sized by it.
constexpr int32_t kNetCopyBlocksPerSm = 4;

// Pieces per launch: the arguments travel by value, so the engine needs no staging memory; a call
// with more pieces (2 MiB) takes several launches. 64 pieces (2.6 KB of parameters with the words)
// against 512 (13 KB): the HT combine across nodes and the LL combines measured 1-8% faster, the
// engine's host time per call the same (decision of 2026-12-02).
constexpr int32_t kNetCopyMaxItems = 64;

// A word the launch writes after its pieces: a device address (a signal of a rail peer, a counter
// or flush report of this rank) and its new value.
struct NetCopyWord {
    uint64_t address;
    uint64_t value;
};
constexpr int32_t kNetCopyMaxWords = 64;

// The longest the last block holds a launch's words for their time: the engine hands calls over
// at most ~100 us ahead, so a longer wait means its estimate of the GPU's clock is wrong; the words
// then go after this rather than stalling the engine's stream.
constexpr uint64_t kNetCopyMaxHoldNs = 1'000'000;

struct NetCopyArgs {
    int32_t count;          // pieces
    int32_t num_words;      // words written once every piece of the launch has landed
    uint32_t* blocks_done;  // device counter of blocks past their pieces, zero between launches
    // The words are not written before the globaltimer reads this (0: as soon as the pieces
    // landed): the end of their wire slot, when the engine handed the call over ahead of it.
    uint64_t words_not_before;
    NetCopyItem items[kNetCopyMaxItems];
    NetCopyWord words[kNetCopyMaxWords];
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace net_copy_detail {

// One piece of at most kUnits * kNetCopyThreads * 16 bytes by one block, both ends 16-byte
// aligned: every thread's loads in flight (read past L1: sources were written by other kernels)
// before its stores; the bytes after the last whole unit by the first threads. (kUnits other than
// kNetCopyUnitsPerThread: bench/micro/net_copy.cu's larger pieces.)
template <int kUnits = kNetCopyUnitsPerThread>
SY_DEVICE void copy_aligned_piece(const NetCopyItem& item) {
    const uint32_t units = uint32_t(item.bytes / 16);
    uint4* dst = reinterpret_cast<uint4*>(item.dst);
    const uint4* src = reinterpret_cast<const uint4*>(item.src);
    uint4 values[kUnits];
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
        const uint32_t u = uint32_t(i) * kNetCopyThreads + threadIdx.x;
        if (u < units) values[i] = __ldcg(src + u);
    }
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
        const uint32_t u = uint32_t(i) * kNetCopyThreads + threadIdx.x;
        if (u < units) __stcg(dst + u, values[i]);
    }
    const uint32_t tail = units * 16 + threadIdx.x;
    if (tail < item.bytes)
        reinterpret_cast<uint8_t*>(item.dst)[tail] =
            __ldcg(reinterpret_cast<const unsigned char*>(item.src) + tail);
}

// A piece with an end off 16-byte alignment (rare: the kernels' requests are 16-byte aligned but
// for a few words): 8-byte units where both ends allow them, else bytes.
template <typename Unit>
SY_DEVICE void copy_unaligned_piece(const NetCopyItem& item) {
    const uint32_t units = uint32_t(item.bytes / sizeof(Unit));
    for (uint32_t u = threadIdx.x; u < units; u += kNetCopyThreads)
        reinterpret_cast<Unit*>(item.dst)[u] = __ldcg(reinterpret_cast<const Unit*>(item.src) + u);
    const uint32_t tail = units * uint32_t(sizeof(Unit)) + threadIdx.x;
    if (tail < item.bytes)
        reinterpret_cast<uint8_t*>(item.dst)[tail] =
            __ldcg(reinterpret_cast<const unsigned char*>(item.src) + tail);
}

}  // namespace net_copy_detail

// Block b moves pieces b, b + gridDim.x, ...; pieces are independent (the executor's contract), so
// a call's bytes spread over as many blocks as the GPU has room for. Then, if the launch carries
// words, each block counts itself done (thread 0, after the block barrier and a system fence: the
// fence is cumulative over the stores its thread observed through the barrier), and the last one
// waits for the words' time, writes them after a fence of its own (every block's pieces, seen
// through the count, before every word) and rearms the counter for the stream's next launch.
__global__ void __launch_bounds__(kNetCopyThreads, kNetCopyBlocksPerSm)
    net_copy_kernel(const __grid_constant__ NetCopyArgs args) {
    for (int32_t i = int32_t(blockIdx.x); i < args.count; i += int32_t(gridDim.x)) {
        const NetCopyItem& item = args.items[i];
        const uint64_t alignment = item.dst | item.src;
        if ((alignment & 15) == 0)
            net_copy_detail::copy_aligned_piece<>(item);
        else if ((alignment & 7) == 0)
            net_copy_detail::copy_unaligned_piece<unsigned long long>(item);
        else
            net_copy_detail::copy_unaligned_piece<unsigned char>(item);
    }
    if (args.num_words == 0) return;
    __shared__ uint32_t last_block;
    __syncthreads();
    if (threadIdx.x == 0) {
        ptx::fence_acq_rel_sys();  // the block's stores, before it is counted
        last_block = atomicAdd(args.blocks_done, 1u) + 1u == gridDim.x;
        if (last_block) {
            ptx::fence_acq_rel_sys();  // every block's pieces before the words
            const uint64_t start = ptx::globaltimer_ns();
            for (uint64_t now = start; now < args.words_not_before && now - start < kNetCopyMaxHoldNs;
                 now = ptx::globaltimer_ns())
                __nanosleep(256);
        }
    }
    __syncthreads();
    if (!last_block) return;
    for (int32_t w = int32_t(threadIdx.x); w < args.num_words; w += kNetCopyThreads)
        ptx::st_relaxed_sys(reinterpret_cast<uint64_t*>(args.words[w].address), args.words[w].value);
    if (threadIdx.x == 0) *args.blocks_done = 0;  // the stream's next launch starts after this one ends
}

#endif

}  // namespace switchyard::device
