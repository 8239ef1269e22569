// Low-latency combine (DESIGN.md §2, expert-major layouts, weighted; flat or hierarchical): one
// kernel, send and receive halves.
//
// Flat. Send (expert rank): every valid row (expert e, row < count[e]) of y goes back to its home
// rank's combine area slot [k][t] (the dispatch noted (source, token, k) of each row). Receive
// (home rank): wait for every source's arrivals, then
//     out[t] = bf16( fma over k ascending: acc = fma(w[t][k], y(t, k), acc), acc = 0 )
// skipping empty slots, slots whose owner is masked, and repeats of an expert within a token.
//
// Hierarchical (template argument kHierarchical). Send (expert rank q): per received token (the
// dispatch noted each record's rows and the weights that travelled with it), the partial
//     p_q(t) = bf16( fma over q's k ascending: acc = fma(w[t][k], y(t, k), acc), acc = 0 )
// goes back as one row, to slot [first k owned by q][t]: a token's bytes on the way home shrink
// from one row per (token, k) to one per (token, rank). Receive (home rank):
//     out[t] = bf16( sum over ranks q ascending: acc = acc + float(p_q(t)), acc = 0 ).
//
// Send half in ll/combine_send.cuh, receive half in ll/combine_receive.cuh. Both: the first S
// blocks send (S from the work, which every block reads); each then raises this
// rank's arrival counter at every home rank (ll_arrive), rows or not. The reduction orders are
// fixed and match the CPU reference (reference::combine) bit for bit.
//
// The reduction is a template argument, not a run-time flag, so that each kernel holds only its
// own code: a kernel that carried both reductions ran the flat one slower, without any change on
// its path (code a kernel never runs still costs it instruction fetch). The same holds for the
// layout of y (kContiguousY).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/combine_receive.cuh"
#include "switchyard/ll/combine_send.cuh"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The launcher fixes the block's warps and the send items per warp (src/core/tuning.hpp) and the
// op's shape.
template <int kNumWarps, int kSendItemsPerWarp, int kHidden, int kTopk, typename IndexT, int kPhases,
          bool kHierarchical, bool kContiguousY>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_combine_kernel(const __grid_constant__ LlCombineArgs args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 8 == 0, "rows are moved in 16-byte units");
    static_assert(kNumWarps >= 2, "warps 0 and 1 scan the row and record counts side by side");
    constexpr bool kSend = (kPhases & kLlSendHalf) != 0, kRecv = (kPhases & kLlRecvHalf) != 0;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t sequences[2];  // this op's send and receive sequence (ll_prologue)
    const LlCombineShared shared =
        LlCombineShared::carve(shared_words, args.buffer.num_ranks, args.local_experts);
    if (threadIdx.x == 0) trace_mark(args.buffer.trace, kLlCombineStart, true);

    ll_combine_detail::SendPrefetch prefetch{};
    if constexpr (kSend) prefetch = ll_combine_detail::prefetch_send<kHierarchical, kContiguousY>(args);
    // A block of an op queued behind a failed one (a poisoned buffer) neither sends nor receives,
    // but still accounts for itself (ll_block_done) and ends its trace.
    const bool healthy = ll_prologue<kLlCombine, kSend, kRecv>(args.buffer, sequences, shared.mask);
    if (healthy) {
        if (threadIdx.x == 0) trace_mark(args.buffer.trace, kLlCombineEntered);
        if constexpr (kSend) {
            ll_combine_detail::send_expert_outputs<kNumWarps, kSendItemsPerWarp, kHidden, kTopk,
                                                   kHierarchical, kContiguousY>(args, shared, prefetch,
                                                                                sequences[0]);
            __syncthreads();
        }
    }
    // Here the block waits anyway: for its peers' arrivals, or (send half only) for its end.
    ll_block_done<kLlCombine, kSend, kRecv>(args.buffer, sequences);
    if constexpr (kRecv)
        if (healthy)
            ll_combine_detail::reduce_home<kNumWarps, kHidden, kTopk, IndexT, kHierarchical>(args, shared,
                                                                                             sequences[1]);
    trace_finish(args.buffer.trace, kLlCombineEnd, kLlCombineMarks, kLlCombineFirstMarks);
}

#endif

}  // namespace switchyard::device
