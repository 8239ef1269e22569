// Test kernel: one thread per peer stores a 64-bit value into that peer's buffer at a fixed
// offset plus 8 * rank (plain SM stores, as the communication kernels write peers).
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

struct PeerStoreArgs {
    uint8_t* const* peer_bases;  // [R], device array
    int64_t offset;
    int32_t rank;
    int32_t num_ranks;
    uint64_t value;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

__global__ void peer_store_kernel(const __grid_constant__ PeerStoreArgs args) {
    for (int peer = threadIdx.x; peer < args.num_ranks; peer += blockDim.x)
        *reinterpret_cast<volatile uint64_t*>(args.peer_bases[peer] + args.offset + 8 * int64_t(args.rank)) =
            args.value;
}

#endif

}  // namespace switchyard::device
