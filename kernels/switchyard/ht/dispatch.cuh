// High-throughput dispatch, direct topology (one NVLink domain). One kernel, three roles in order:
//
//  notify_peers     every peer gets this rank's row counts (per destination rank and, for the
//                   peer's local experts, per expert), each count in a 64-bit word tagged with the
//                   op's sequence, so no fence orders them (transport/counts_exchange.cuh): sent by the
//                   layout kernel as soon as it has the totals, or here by block 0 when no layout
//                   kernel ran (cached dispatch); every block waits until all peers' words carry
//                   this op's tag, which also proves each destination has entered this op (its
//                   region is free);
//  send_tokens      each warp claims tokens one at a time (WarpTokens); a token is staged once in shared
//                   memory (bulk load, or quantized by the warp) and stored to every destination
//                   rank at its final rank-major row: sum of earlier sources' rows plus the token's
//                   slot (a deterministic prefix sum from the layout kernel); per-destination
//                   metadata is written by the lanes;
//  finish           the last block to finish publishes "done" to every destination; the op ends
//                   when every source's "done" has arrived here.
//
// Rows land in the receive region in final rank-major order, so the rank-major output is a view
// of the buffer; the receive kernel expands expert-major layouts from it.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/block_scan.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/transport/counts_exchange.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/transport/completion.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/trace_marks.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

SY_DEVICE HtNotifyView notify_entry(const HtCommon& c, uint8_t* base, int32_t source) {
    return ht_notify_view(c.layout.workspace, base, source, c.num_ranks);
}

// A count of an arrived entry (after wait_for_counts): the low half of its tagged word.
SY_DEVICE int32_t tagged_count(const uint64_t* word) {
    return HtNotifyView::count_of(ptx::ld_relaxed_sys(word));
}

// Block 0 (all threads), when the layout kernel has not notified (a cached dispatch): publish this
// rank's counts, from the handle, to every peer.
SY_DEVICE void notify_peers(const HtDispatchArgs& args, uint64_t sequence) {
    const HtCommon& c = args.common;
    const HtNotifyTarget target{c.peer_bases, c.layout.workspace, nullptr,
                                c.rank,       c.num_ranks,        c.local_experts};
    ht_notify_peers(
        target, sequence, [&](int32_t rank) { return args.num_tokens_per_rank[rank]; },
        [&](int32_t expert) { return args.num_tokens_per_expert[expert]; });
}

// Waits until *word carries this op's tag (the sequence's low 32 bits) and checks that it is not a
// later op's (lock step); `value` gets the word the wait's acquire load saw (no second load).
// Returns false on timeout or mismatch (reported).
template <typename Details>
SY_DEVICE bool wait_for_tag(const uint64_t* word, uint64_t sequence, const Diagnostics& diagnostics,
                            int32_t peer, Details details, uint64_t& value) {
    if (!wait_until(
            word,
            [sequence, &value](uint64_t seen) {
                value = seen;
                return HtNotifyView::reached(seen, sequence);
            },
            diagnostics, kPhaseHtNotify, peer, sequence, details))
        return false;
    if (HtNotifyView::written_by(value, sequence)) return true;
    report_error(diagnostics, kErrorSequenceMismatch, kPhaseHtNotify, peer, sequence,
                 HtNotifyView::tag_of(value), 0);
    return false;
}

// Every block: wait for every word of all peers' entries; returns false on timeout. Also fills
// `dest_offset` [R] (shared): the rows that sources before this rank send to each rank q, where
// this rank's rows start at q. They are summed from the words as they arrive (integer adds, so
// the order does not matter): reading them again after the wait cost every block one more round
// trip before its first row.
SY_DEVICE bool wait_for_counts(const HtCommon& c, uint64_t sequence, int32_t* dest_offset) {
    __shared__ int ok;
    if (threadIdx.x == 0) ok = 1;
    for (int q = threadIdx.x; q < c.num_ranks; q += blockDim.x) dest_offset[q] = 0;
    __syncthreads();
    const int words = HtNotifyView::num_words(c.num_ranks, c.local_experts);
    for (int i = threadIdx.x; i < c.num_ranks * words; i += blockDim.x) {
        const int source = i / words, word = i % words;
        const HtNotifyView entry = notify_entry(c, c.local_base, source);
        uint64_t value = 0;
        const bool arrived = word == 0 ? wait_for_sequence(entry.sequence(), sequence, c.diagnostics,
                                                           kPhaseHtNotify, source, peer_details(c, source))
                                       : wait_for_tag(entry.words + word, sequence, c.diagnostics, source,
                                                      peer_details(c, source), value);
        if (!arrived) ok = 0;
        const bool rows_to_rank = word >= 1 && word < 1 + c.num_ranks;
        if (arrived && rows_to_rank && source < c.rank)
            atomicAdd(dest_offset + word - 1, HtNotifyView::count_of(value));
    }
    __syncthreads();
    return ok != 0;
}

// Rows of local expert `e` that sources 0..R-1 send here, eight sources' loads in flight at once.
// With `offsets`, also writes each source's first row within the expert.
SY_DEVICE int32_t expert_rows_from_sources(const HtCommon& c, int e, int32_t* offsets) {
    int32_t count = 0;
    for (int first = 0; first < c.num_ranks; first += 8) {
        int32_t rows[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            rows[i] = first + i < c.num_ranks
                          ? tagged_count(notify_entry(c, c.local_base, first + i).expert_rows_word(e))
                          : 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (offsets && first + i < c.num_ranks) offsets[(first + i) * c.local_experts + e] = count;
            count += rows[i];
        }
    }
    return count;
}

// Block 0 (all threads): the receiver-side summary (rows per source, expert counts and offsets)
// for the receive kernel, combine and the host. Experts are spread over the threads in contiguous
// runs; the expert-major offsets are a block-wide prefix sum over the runs.
SY_DEVICE void publish_recv_info(const HtDispatchArgs& args) {
    const HtCommon& c = args.common;
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    int32_t* out = args.recv_info;
    volatile int32_t* host = args.host_counts;  // mapped host memory: [0] ready, [1] rows, ...
    const int L = c.local_experts;
    if (threadIdx.x == 0) {
        int32_t rows = 0;
        for (int s = 0; s < c.num_ranks; ++s) {
            out[info.row_offsets() + s] = rows;
            rows += tagged_count(notify_entry(c, c.local_base, s).rows_to_word(c.rank));
        }
        out[info.row_offsets() + c.num_ranks] = rows;
        if (host) host[1] = rows;
    }
    const int per_thread = int(ceil_div(L, blockDim.x));
    const int first = int(threadIdx.x) * per_thread;
    const int last = int(min64(L, first + per_thread));
    int64_t run_rows = 0;  // rows of this thread's experts in the contiguous layout
    if (!args.masked_layout)
        for (int e = first; e < last; ++e)
            run_rows += align_up(expert_rows_from_sources(c, e, nullptr), args.expert_alignment);
    int64_t total_rows = 0;
    int64_t expert_rows = block_exclusive_sum(run_rows, total_rows);
    for (int e = first; e < last; ++e) {
        const int32_t count = expert_rows_from_sources(c, e, out + info.source_expert_offsets());
        out[info.expert_counts() + e] = count;
        out[info.expert_offsets() + e] =
            int32_t(args.masked_layout ? int64_t(e) * c.num_ranks * c.max_tokens : expert_rows);
        expert_rows += args.masked_layout ? 0 : align_up(count, args.expert_alignment);
        if (host) host[3 + e] = count;
    }
    const int32_t end = int32_t(args.masked_layout ? int64_t(L) * c.num_ranks * c.max_tokens : total_rows);
    if (threadIdx.x == 0) {
        out[info.expert_offsets() + L] = end;
        if (host) host[2] = end;
    }
    if (host) {
        // Every writer's fence, the barrier, then the flag after a fence of its own (cumulativity).
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence_system();
            host[0] = 1;
            __threadfence_system();
        }
    }
}

// Starts the bulk load of token `token`'s payload into `stage` (lane 0).
SY_DEVICE void issue_load(const HtDispatchArgs& args, int token, uint8_t* stage, uint64_t* barrier) {
    const RecordLayout& r = args.record;
    ptx::mbarrier_arrive_expect_tx(barrier, uint32_t(r.payload_bytes));
    ptx::bulk_load(stage, args.x + int64_t(token) * args.x_row_stride_bytes, uint32_t(r.payload_bytes),
                   barrier);
}

// Loads (or quantizes) token `token` into `stage` (payload then scales, record layout). With
// `prefetched`, the bulk load was already issued (issue_load) and is only waited for here.
SY_DEVICE void stage_token(const HtDispatchArgs& args, int token, uint8_t* stage, uint64_t* barrier,
                           uint32_t& phase, bool prefetched) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    const RecordLayout& r = args.record;
    if (args.quantize) {
        // The FP8 quantizer every kernel shares (common/fp8.cuh, DESIGN.md §2): 8 channels per
        // lane per step, 16 lanes per 128-channel block, 2 blocks per warp step.
        const bool ue8m0 = args.scale_kind == kScaleUe8m0;
        const uint8_t* row = args.x + int64_t(token) * args.x_row_stride_bytes;
        uint32_t* scales = reinterpret_cast<uint32_t*>(stage + r.scale_offset);
        for (int base = 0; base < c.hidden; base += 256) {
            const int channel = base + int(lane) * 8;
            const bool inside = channel < c.hidden;
            const uint4 raw =
                inside ? *reinterpret_cast<const uint4*>(row + channel * 2) : make_uint4(0, 0, 0, 0);
            // Lanes 0-15 hold one block, lanes 16-31 the next; a lane past the row counts as the floor.
            float amax = fp8::amax8(raw, fp8::kAmaxFloor);
#pragma unroll
            for (int mask = 8; mask >= 1; mask >>= 1)
                amax = fp8::max_f32(amax, __shfl_xor_sync(0xffffffffu, amax, mask));
            uint2 quantized;
            uint32_t stored;  // fp32 bits of the scale, or the UE8M0 exponent byte
            if (ue8m0) {
                stored = fp8::ue8m0_byte(fp8::div_rn(amax, fp8::kE4m3Max));
                quantized = fp8::quantize8<true>(raw, fp8::ue8m0_scale(stored));
            } else {
                quantized = fp8::quantize8<false>(raw, fp8::div_rn(fp8::kE4m3Max, amax));
                stored = fp8::float_to_bits(fp8::div_rn(amax, fp8::kE4m3Max));
            }
            if (inside) {
                *reinterpret_cast<uint2*>(stage + channel) = quantized;
                if ((lane & 15u) == 0) {
                    const int block = channel / 128;
                    if (ue8m0)  // bytes of one word come from four blocks: stored as bytes
                        reinterpret_cast<uint8_t*>(scales)[block] = uint8_t(stored);
                    else
                        scales[block] = stored;
                }
            }
        }
        // Zero the unused bytes of the last UE8M0 word so records are deterministic.
        if (ue8m0 && lane == 0) {
            const int blocks = int(ceil_div(c.hidden, 128));
            for (int b = blocks; b < int(ceil_div(c.hidden, 512)) * 4; ++b)
                reinterpret_cast<uint8_t*>(scales)[b] = 0;
        }
        ptx::fence_proxy_async_shared();
        __syncwarp();
        return;
    }
    if (!prefetched && lane == 0) issue_load(args, token, stage, barrier);
    if (args.input_payload == kPayloadFp8) {
        uint32_t* scales = reinterpret_cast<uint32_t*>(stage + r.scale_offset);
        const int words = int(r.scale_bytes / 4);
        for (int w = lane; w < words; w += 32)
            scales[w] =
                args.x_scales[int64_t(token) * args.scale_row_stride + int64_t(w) * args.scale_col_stride];
        ptx::fence_proxy_async_shared();
    }
    while (!ptx::mbarrier_try_wait_parity(barrier, phase)) {
    }
    phase ^= 1u;
    __syncwarp();
}

// A token's routing as send_token needs it: lanes < K hold its expert, its position among the
// expert's rows and its weight; lane q < 32 holds its slot at rank q (-1: not sent there). The
// main loop loads the next token's route while this token is sent (with its payload's bulk load):
// loaded at the start of send_token, these loads put one memory latency per token on every warp's
// path.
struct TokenRoute {
    int32_t expert = -1, position = -1;
    float weight = 0.0f;
    int32_t first_group_slot = -1;
};

SY_DEVICE TokenRoute load_route(const HtDispatchArgs& args, int token) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    TokenRoute route;
    if (int(lane) < c.topk) {
        route.expert = args.topk_idx[int64_t(token) * c.topk + lane];
        route.position = args.token_expert_pos[int64_t(token) * c.topk + lane];
        if (args.topk_weights)
            route.weight = args.topk_weights[int64_t(token) * args.weights_row_stride + lane];
    }
    if (int(lane) < c.num_ranks)
        route.first_group_slot = args.token_rank_slot[int64_t(token) * c.num_ranks + lane];
    return route;
}

// Sends one staged token to every destination rank it goes to, with its route (load_route; the
// slots of ranks past the first 32 are loaded here, all of a group's together).
SY_DEVICE void send_token(const HtDispatchArgs& args, int token, const TokenRoute& route,
                          const uint8_t* stage, const int32_t* dest_offset) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    const RecordLayout& r = args.record;
    const int32_t expert = route.expert, position = route.position;
    const float weight = route.weight;
    int ordinal = 0;  // this destination's position among the token's destinations (combine slot)
    for (int group = 0; group < c.num_ranks; group += 32) {
        const int my_rank = group + int(lane);
        const int32_t my_slot = group == 0 ? route.first_group_slot
                                : my_rank < c.num_ranks
                                    ? args.token_rank_slot[int64_t(token) * c.num_ranks + my_rank]
                                    : -1;
        for (uint32_t rest = __ballot_sync(0xffffffffu, my_slot >= 0); rest != 0; rest &= rest - 1) {
            const int source_lane = __ffs(rest) - 1;
            const int q = group + source_lane;
            const int32_t slot = __shfl_sync(0xffffffffu, my_slot, source_lane);
            const int64_t row = int64_t(dest_offset[q]) + slot;
            uint8_t* record = c.peer_bases[q] + c.layout.ht_dispatch_offset + row * r.total_bytes;
            int32_t* meta = reinterpret_cast<int32_t*>(record + r.meta_offset);
            if (int(lane) < c.topk) {
                const bool owned = expert >= q * c.local_experts && expert < (q + 1) * c.local_experts;
                meta[2 + lane] = owned ? expert - q * c.local_experts : -1;
                meta[2 + c.topk + lane] = __float_as_int(owned ? weight : 0.0f);
                meta[2 + 2 * c.topk + lane] = owned ? position : -1;
            }
            // Own rows may leave through a bulk store even when the peers' do not: nothing outside
            // this GPU reads them before the kernel ends, and the copy then costs no lane stores.
            const bool bulk = !args.generic_stores || (args.self_bulk && q == c.rank);
            if (lane == 0) {
                meta[0] = token;
                meta[1] = ordinal;
                if (bulk) ptx::bulk_store(record, stage, uint32_t(r.meta_offset));
            }
            if (!bulk)
                for (int64_t offset = int64_t(lane) * 16; offset < r.meta_offset; offset += 32 * 16)
                    *reinterpret_cast<uint4*>(record + offset) =
                        *reinterpret_cast<const uint4*>(stage + offset);
            ++ordinal;
        }
    }
    if (lane == 0) ptx::bulk_commit();
    __syncwarp();
}

// The tokens one warp sends, in order. Static (chunk == 0): warp w of W owns [T * w / W,
// T * (w + 1) / W). Claimed (chunk > 0): warp w starts with tokens [w * chunk, (w + 1) * chunk) and
// then takes chunks of `chunk` tokens from a counter of this rank's workspace, so warps that run
// faster send more (with static ranges at 4,096 tokens the first warp finished 60 us before the
// last). Each claim is issued one chunk ahead, so its latency hides behind the chunk before it.
// Which warp sends a token does not change where its rows land. Warp-collective.
struct WarpTokens {
    int32_t num_tokens, total_warps, chunk;
    ClaimAhead claims;  // tokens claimed past the first chunks, `chunk` per claim
    int32_t end = 0;    // end of the current range

    SY_DEVICE int begin(int global_warp) {
        int first;
        if (chunk == 0) {
            first = int(int64_t(num_tokens) * global_warp / total_warps);
            end = int(int64_t(num_tokens) * (global_warp + 1) / total_warps);
        } else {
            first = int(min64(int64_t(global_warp) * chunk, num_tokens));
            end = int(min64(int64_t(first) + chunk, num_tokens));
            if (first < end) claims.issue();
        }
        return first < end ? first : -1;
    }
    // The token after `token`, or -1 when the warp is done.
    SY_DEVICE int after(int token) {
        if (token + 1 < end) return token + 1;
        if (chunk == 0) return -1;
        const int64_t claimed_before = int64_t(total_warps) * chunk;  // the first chunks, not claimed
        const int64_t first = claimed_before + claims.take(num_tokens - claimed_before);
        if (first >= num_tokens) return -1;
        end = int(min64(first + chunk, num_tokens));
        return int(first);
    }
};

}  // namespace ht_detail

__global__ void __launch_bounds__(512, 1) ht_dispatch_kernel(const __grid_constant__ HtDispatchArgs args) {
    extern __shared__ __align__(128) uint8_t dynamic_smem[];
    __shared__ int32_t dest_offset[kHtMaxRanks];
    __shared__ __align__(8) uint64_t stage_barriers[16][2];
    const HtCommon& c = args.common;
    uint64_t* counters = c.layout.workspace.counters(c.local_base);
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchStart, true);
    // The op's sequence: the counter was last written by the previous op's kernels, which ended
    // before the layout kernel began, so it is read before the wait below (one round trip less
    // after it).
    const uint64_t sequence = counters[kCounterHt] + 1;
    // With programmatic dependent launch this grid is resident before the layout kernel ends:
    // wait for it before reading anything it wrote (the routing, the poison word); then let the
    // receive kernel be scheduled, to wait in turn at its start.
    ptx::grid_dependency_wait();
    ptx::launch_dependents();
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchRoutingDone);
    if (blockIdx.x == 0 && threadIdx.x == 0) mark_kernel_start(counters, kHtStartSlots, sequence);
    const int warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
    const uint32_t lane = ptx::lane_id();

    if (threadIdx.x < 32 && lane < 2 * 16 && lane / 2 < num_warps) {
        ptx::mbarrier_init(&stage_barriers[lane / 2][lane % 2], 1);
        ptx::fence_mbarrier_init();
    }
    // Block 0 decides once whether to announce this op (a poisoned buffer announces nothing, and
    // the layout kernel may have announced it); the notify step synchronizes the block, so every
    // thread must take the same branch.
    __shared__ int announce;
    if (threadIdx.x == 0) announce = blockIdx.x == 0 && !args.counts_notified && !is_poisoned(c.diagnostics);
    __syncthreads();
    if (announce) ht_detail::notify_peers(args, sequence);
    if (announce && threadIdx.x == 0) trace_mark(args.trace, kHtDispatchNotified);
    bool ok = ht_detail::wait_for_counts(c, sequence, dest_offset);
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchCounts);
    // (dest_offset is complete after the wait's closing barrier: the sends need no other.)
    if (ok && blockIdx.x == 0) ht_detail::publish_recv_info(args);

    // send_tokens: each warp walks its tokens (WarpTokens) through two shared-memory stages.
    if (ok) {
        const int global_warp = blockIdx.x * num_warps + warp, total_warps = gridDim.x * num_warps;
        ht_detail::WarpTokens tokens{
            c.num_tokens, total_warps, args.claim_tokens,
            ClaimAhead{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextItem),
                       (unsigned long long)max(args.claim_tokens, 0)}};
        uint8_t* stages = dynamic_smem + int64_t(warp) * 2 * args.stage_bytes;
        uint32_t phases[2] = {0u, 0u};
        // Without quantization the next token's bulk load is issued before this token is sent,
        // so its latency hides behind the sends.
        const bool prefetch = !args.quantize;
        int token = tokens.begin(global_warp);
        ht_detail::TokenRoute route{};
        if (token >= 0) route = ht_detail::load_route(args, token);
        for (int index = 0; token >= 0; ++index) {
            const int stage = index & 1;
            if (!prefetch || index == 0) {
                // The stores issued from this stage two tokens ago must have read it.
                if (lane == 0) ptx::bulk_wait_read<1>();
                __syncwarp();
            }
            ht_detail::stage_token(args, token, stages + int64_t(stage) * args.stage_bytes,
                                   &stage_barriers[warp][stage], phases[stage], prefetch && index != 0);
            const int next = tokens.after(token);
            if (prefetch && next >= 0) {
                const int next_stage = stage ^ 1;
                // The next stage was last read by the stores of the previous token: let them finish reading.
                if (lane == 0) {
                    ptx::bulk_wait_read<0>();
                    ht_detail::issue_load(args, next, stages + int64_t(next_stage) * args.stage_bytes,
                                          &stage_barriers[warp][next_stage]);
                }
                __syncwarp();
            }
            const ht_detail::TokenRoute next_route =
                next >= 0 ? ht_detail::load_route(args, next) : ht_detail::TokenRoute{};
            ht_detail::send_token(args, token, route, stages + int64_t(stage) * args.stage_bytes,
                                  dest_offset);
            token = next;
            route = next_route;
        }
        if (lane == 0) {
            ptx::bulk_wait<0>();
            trace_mark(args.trace, kHtDispatchSent);
            trace_mark(args.trace, kHtDispatchFirstSent, true);
        }
        __syncwarp();
    }

    // finish: bulk writes are ordered with generic ones first, then the last block signals.
    ptx::fence_proxy_async_global();
    ht_detail::finish_and_signal(c, counters, c.layout.workspace.ht_dispatch_done_offset, sequence,
                                 kCounterHtLastDispatch);
    if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchSignalled);

    // The op is complete here once every source's rows have landed.
    if (blockIdx.x == 0 && ok) {
        for (int source = threadIdx.x; source < c.num_ranks; source += blockDim.x) {
            wait_for_sequence(c.layout.workspace.ht_dispatch_done(c.local_base) + source, sequence,
                              c.diagnostics, kPhaseHtData, source, ht_detail::peer_details(c, source));
            trace_mark(args.trace, kHtDispatchArrived);
        }
    }
    if (args.trace.slots != nullptr) {
        __syncthreads();
        if (threadIdx.x == 0) trace_mark(args.trace, kHtDispatchEnd);
    }
}

#endif

}  // namespace switchyard::device
