// Low-latency dispatch across nodes (DESIGN.md §2, §4, §5 LL): one kernel, send and receive halves,
// the one-node dispatch (ll/dispatch.cuh) with the network in it. ll/net_layout.cuh says who writes
// what where; send half in ll/net_dispatch_send.cuh, receive half in ll/net_dispatch_receive.cuh.
//
// Send: tokens go to the ranks of this node over NVLink, as on one node, and once per other node
// into this rank's staging; the last sending block puts each node's records and header to this
// rank's rail peer there, the header with the op's network signal. Receive: as a gateway, relay each
// other node's signal to the ranks of this node its header names; wait for every source; place and
// copy the records (a source of another node's where they landed, at its gateway); note the
// forwarding routing for the combine. Outputs are byte-identical to the one-node dispatch of the
// same global ranks.
//
// The backend of the network (NetEmulated: NVRTC; NetGin: nvcc against the NCCL headers) is the
// first template argument; the rest are the one-node dispatch's.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/dispatch_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/net_dispatch_receive.cuh"
#include "switchyard/ll/net_dispatch_send.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <class Backend, int kNumWarps, int kSendItemsPerWarp, int kHidden, int kTopk, int kScaleKind,
          typename IndexT, int kPhases, bool kContiguous>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_net_dispatch_kernel(const __grid_constant__ LlNetDispatchArgs<Backend> args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 16 == 0, "rows are moved in 16-byte units");
    static_assert(kNumWarps >= 2, "block 0's last warp relays while the others wait");
    constexpr bool kSend = (kPhases & kLlSendHalf) != 0, kRecv = (kPhases & kLlRecvHalf) != 0;
    const LlDispatchArgs& base = args.base;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t sequences[2];  // this op's send and receive sequence (ll_prologue)
    __shared__ int32_t first_invalid;  // the first invalid top-k entry a sending block found
    const LlDispatchShared shared = LlDispatchShared::carve(shared_words, base.buffer.num_ranks, base.local_experts);
    if (threadIdx.x == 0) trace_mark(base.buffer.trace, kLlDispatchStart, true);

    const int32_t sending_blocks =
        kSend ? ll_sending_blocks(int64_t(base.num_tokens) * ll_send_slices(kHidden), kNumWarps, kSendItemsPerWarp)
              : 0;
    const bool sends = int32_t(blockIdx.x) < sending_blocks;
    ll_dispatch_detail::SendPrefetch<IndexT> prefetch{};
    if (sends)
        prefetch = ll_dispatch_detail::prefetch_send<kNumWarps, kHidden, kTopk, IndexT>(base, shared, &first_invalid);
    const bool healthy = ll_prologue<kLlDispatch, kSend, kRecv>(base.buffer, sequences, shared.mask);
    if (healthy) {
        if (threadIdx.x == 0) trace_mark(base.buffer.trace, kLlDispatchEntered);
        if constexpr (kSend) {
            if (sends)
                ll_net_dispatch_detail::send_tokens<kNumWarps, kHidden, kTopk, kScaleKind, IndexT>(
                    args, shared, prefetch, sequences[0], sending_blocks, &first_invalid);
            __syncthreads();  // the receive half reuses the masks' shared memory
        }
    }
    ll_block_done<kLlDispatch, kSend, kRecv>(base.buffer, sequences);
    if constexpr (kRecv)
        if (healthy)
            ll_net_dispatch_detail::receive_tokens<kNumWarps, kHidden, kTopk, kScaleKind, kContiguous>(
                args, shared, sequences[1]);
    trace_finish(base.buffer.trace, kLlDispatchEnd, kLlDispatchMarks, kLlDispatchFirstMarks);
}

#endif

}  // namespace switchyard::device
