// The GIN set-up's own kernels (src/net/gin_network.cpp), compiled by nvcc against the NCCL headers
// like every NetGin kernel:
//   gin_lsa_pointers_kernel  each rank of this node's window as mapped here, through the device
//                            API's ncclGetLsaPointer (the buffer's CUDA-IPC-free peer table)
//   gin_reset_kernel         zeroes every signal and counter of every context (Buffer::reset())
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/transport/net.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

struct GinSetupArgs {
    GinNetContext net;
    void** lsa_pointers;  // [ranks_per_node] (gin_lsa_pointers_kernel)
};

#if defined(SY_NET_WITH_NCCL)

__global__ void gin_lsa_pointers_kernel(const __grid_constant__ GinSetupArgs args) {
    for (int32_t peer = threadIdx.x; peer < args.net.ranks_per_node; peer += blockDim.x)
        args.lsa_pointers[peer] = ncclGetLsaPointer(net_gin::window(args.net), 0, peer);
}

// One block per context; no request may be in flight (between the ranks' host barriers).
__global__ void gin_reset_kernel(const __grid_constant__ GinSetupArgs args) {
    const ncclGin gin(net_gin::dev_comm(args.net), int(blockIdx.x));
    for (uint32_t id = threadIdx.x; id < uint32_t(kNetNumSignals); id += blockDim.x) gin.resetSignal(id);
    for (uint32_t id = threadIdx.x; id < uint32_t(kNetNumCounters); id += blockDim.x) gin.resetCounter(id);
}

#endif

}  // namespace switchyard::device
