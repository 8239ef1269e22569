// Low-latency dispatch (DESIGN.md §2 masked layout, §5 LL): one kernel, send and receive halves.
//
// Send (the first S blocks, a work item per warp at a time; ll/dispatch_send.cuh): every sending block first
// loads the whole top-k table once and builds, in shared memory, one bit mask of tokens per expert and per
// rank (a repeated expert within a token sets its bit once). A token's slot at a rank (its rank
// among this rank's tokens to that destination) and its position in an expert's rows (its rank
// among this rank's tokens to that expert) are then the popcounts of the mask bits below it. A
// warp quantizes its slice of the token once (or passes bf16 through) and stores it straight into
// each destination's receive area [source][slot]: a token crosses to a rank once. Block 0 writes,
// per destination, a header {tokens, rows per local expert} from the masks. Each sending block
// then raises this rank's arrival counter at every destination (ll_arrive), which publishes its
// records and headers.
//
// Receive (every block; ll/dispatch_receive.cuh): wait for every source's arrivals; from the headers compute
// where each source's rows of each local expert start (sources ascending, so rows are ordered by source then
// token, bit-reproducibly); then warps copy each arrived record into the rows of the experts it
// names, scales column-major, and note (source, token, k) of every row for the combine. With
// zero_padding (contiguous layout), the same warps also zero the padding rows of every expert's
// aligned segment, from the offsets every block computes: no extra synchronization.
//
// Invalid expert ids (outside [-1, E)) are treated as -1 and reported as invalid routing by block 0
// after its arrivals; its headers announce the failure instead of counts, so every destination's
// receive half stops at once and names this rank (kErrorPeerFailed) instead of using the op. A
// repeated expert within one token counts once.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/dispatch_receive.cuh"
#include "switchyard/ll/dispatch_send.cuh"
#include "switchyard/ll/dispatch_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The launcher fixes the block's warps and the send items per warp (src/core/tuning.hpp) and the
// op's shape. kContiguous: the expert-major contiguous layout (expert_alignment > 0, optional zero
// padding), else the masked one; a template argument, not a run-time test, so that the masked
// kernel does not carry the contiguous layout's scans and padding code (code a kernel never runs
// still costs it instruction fetch).
template <int kNumWarps, int kSendItemsPerWarp, int kHidden, int kTopk, int kScaleKind, typename IndexT,
          int kPhases, bool kContiguous>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_dispatch_kernel(const __grid_constant__ LlDispatchArgs args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 16 == 0, "rows are moved in 16-byte units");
    constexpr bool kSend = (kPhases & kLlSendHalf) != 0, kRecv = (kPhases & kLlRecvHalf) != 0;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t sequences[2];  // this op's send and receive sequence (ll_prologue)
    __shared__ int32_t first_invalid;  // the first invalid top-k entry a sending block found
    const LlDispatchShared shared =
        LlDispatchShared::carve(shared_words, args.buffer.num_ranks, args.local_experts);
    if (threadIdx.x == 0) trace_mark(args.buffer.trace, kLlDispatchStart, true);

    const int32_t sending_blocks = kSend
                                       ? ll_sending_blocks(int64_t(args.num_tokens) * ll_send_slices(kHidden),
                                                           kNumWarps, kSendItemsPerWarp)
                                       : 0;
    const bool sends = int32_t(blockIdx.x) < sending_blocks;
    ll_dispatch_detail::SendPrefetch<IndexT> prefetch{};
    if (sends)
        prefetch = ll_dispatch_detail::prefetch_send<kNumWarps, kHidden, kTopk, IndexT>(args, shared,
                                                                                        &first_invalid);
    // A block of an op queued behind a failed one (a poisoned buffer) neither sends nor receives,
    // but still accounts for itself (ll_block_done) and ends its trace.
    const bool healthy = ll_prologue<kLlDispatch, kSend, kRecv>(args.buffer, sequences, shared.mask);
    if (healthy) {
        if (threadIdx.x == 0) trace_mark(args.buffer.trace, kLlDispatchEntered);
        if constexpr (kSend) {
            if (sends)
                ll_dispatch_detail::send_tokens<kNumWarps, kHidden, kTopk, kScaleKind, IndexT>(
                    args, shared, prefetch, sequences[0], sending_blocks, &first_invalid);
            __syncthreads();  // the receive half reuses the masks' shared memory
        }
    }
    // Here the block waits anyway: for its peers' arrivals, or (send half only) for its end.
    ll_block_done<kLlDispatch, kSend, kRecv>(args.buffer, sequences);
    if constexpr (kRecv)
        if (healthy)
            ll_dispatch_detail::receive_tokens<kNumWarps, kHidden, kTopk, kScaleKind, kContiguous>(
                args, shared, sequences[1]);
    trace_finish(args.buffer.trace, kLlDispatchEnd, kLlDispatchMarks, kLlDispatchFirstMarks);
}

#endif

}  // namespace switchyard::device
