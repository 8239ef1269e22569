// Low-latency combine across nodes (DESIGN.md §2 several nodes, §4, §5 LL): one kernel, send and
// receive halves, the one-node combine (ll/combine.cuh) with the network in it. ll/net_layout.cuh
// says who writes what where; send half in ll/net_combine_send.cuh, receive half in
// ll/net_combine_receive.cuh.
//
// Send (expert rank): rows (flat) or partials (hierarchical) of this node's homes as on one node,
// of other nodes' homes into their forwarders' forward areas on this node; arrivals at this node's
// ranks. Then, as the forwarder of each other node's rail peer, this rank puts that home's rows from
// its node's contributing ranks (hierarchical: reduced per token over them, DESIGN.md §2) and the
// op's signal. The send half waits for its node-mates (their rows in its forward area), never for
// another node. Receive (home): this node's rows as on one node, each other node's from its
// forwarder (this rank's rail peer there), reduced in the documented order:
//   flat:          out[t] = bf16(fma over k ascending of w[t][k] * y(t, k))    (as on one node)
//   hierarchical:  out[t] = bf16(sum over nodes m ascending of float(P_m(t))),
//                  P_m(t) = bf16(sum over m's ranks q ascending of float(p_q(t))),
//                  p_q(t) = bf16(fma over q's k ascending of w[t][k] * y(t, k))
// which is reference::combine with CombineOptions::num_nodes = N (hierarchical) and = 1 (flat).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/net_combine_receive.cuh"
#include "switchyard/ll/net_combine_send.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/ll_arrivals.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <class Backend, int kNumWarps, int kSendItemsPerWarp, int kHidden, int kTopk, typename IndexT, int kPhases,
          bool kHierarchical, bool kContiguousY>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_net_combine_kernel(const __grid_constant__ LlNetCombineArgs<Backend> args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 8 == 0, "rows are moved in 16-byte units");
    static_assert(kNumWarps >= 2, "warps 0 and 1 scan the row and record counts side by side");
    constexpr bool kSend = (kPhases & kLlSendHalf) != 0, kRecv = (kPhases & kLlRecvHalf) != 0;
    const LlCombineArgs& base = args.base;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t sequences[2];  // this op's send and receive sequence (ll_prologue)
    const LlNetCombineShared shared =
        LlNetCombineShared::carve(shared_words, base.buffer.num_ranks, base.local_experts);
    if (threadIdx.x == 0) trace_mark(base.buffer.trace, kLlCombineStart, true);

    ll_combine_detail::SendPrefetch prefetch{};
    if constexpr (kSend) prefetch = ll_combine_detail::prefetch_send<kHierarchical, kContiguousY>(base);
    bool healthy = ll_prologue<kLlCombine, kSend, kRecv>(base.buffer, sequences, shared.base.mask);
    if (healthy) {
        if (threadIdx.x == 0) trace_mark(base.buffer.trace, kLlCombineEntered);
        if constexpr (kSend) {
            healthy = ll_net_combine_detail::claim_forward_areas(args, sequences[0], shared.base.mask);
            if (healthy) {
                const ll_net_combine_detail::LlHomesAcrossNodes<Backend> homes{&args};
                ll_combine_detail::send_expert_outputs<kNumWarps, kSendItemsPerWarp, kHidden, kTopk, kHierarchical,
                                                       kContiguousY>(base, shared.base, prefetch, sequences[0],
                                                                     homes);
                __syncthreads();
                healthy = ll_net_combine_detail::forward_to_nodes<kNumWarps, kHidden, kTopk, kHierarchical>(
                    args, shared, sequences[0]);
            }
        }
    }
    ll_block_done<kLlCombine, kSend, kRecv>(base.buffer, sequences);
    if constexpr (kRecv)
        if (healthy)
            ll_net_combine_detail::reduce_home<kNumWarps, kHidden, kTopk, IndexT, kHierarchical>(args, shared,
                                                                                                sequences[1], kSend);
    trace_finish(base.buffer.trace, kLlCombineEnd, kLlCombineMarks, kLlCombineFirstMarks);
}

#endif

}  // namespace switchyard::device
