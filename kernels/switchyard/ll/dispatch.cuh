// Low-latency dispatch (DESIGN.md §2 masked layout, §5 LL): one kernel, send and receive halves.
//
// Send (every warp, one token at a time): read the token's top-k ids, find the ranks it goes to,
// its slot at each (its rank among this rank's tokens to that destination) and its position in
// each expert's rows (its rank among this rank's tokens to that expert) by counting the earlier
// tokens, then quantize the token once (or pass bf16 through) and store the record straight into
// each destination's receive area [source][slot]. A token crosses to a rank once. One block first
// writes, per destination, a header {tokens, rows per local expert}; the last block to finish
// raises the sequence-tagged flag (release, system scope), which publishes records and headers.
//
// Receive (every block): wait for every source's flag; from the headers compute where each
// source's rows of each local expert start (sources ascending, so rows are ordered by source then
// token, bit-reproducibly); then warps copy each arrived record into the rows of the experts it
// names, scales column-major, and note (source, token, k) of every row for the combine.
//
// Invalid expert ids (outside [-1, E)) are reported as invalid routing and treated as -1, and a
// repeated expert within one token counts once, so every rank still finishes the op.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/ll/ll_sync.cuh"

namespace switchyard::device {

enum LlPhases : int32_t { kLlSendHalf = 1, kLlRecvHalf = 2, kLlBothHalves = 3 };

struct LlDispatchArgs {
    LlBufferArgs buffer;
    const void* x;                                // bf16 [T, H]
    int64_t x_row_stride;                         // elements
    const void* topk_idx;                         // [T, K] int32 or int64 (template IndexT)
    int64_t topk_row_stride;                      // elements
    int32_t num_tokens;                           // T of this rank
    int32_t num_experts;                          // E
    int32_t local_experts;                        // L = E / R
    void* recv_x;                                 // [L, R*T_ll, H] fp8 or bf16
    uint32_t* recv_scales;                        // [L, words, R*T_ll] (column-major scales per expert)
    int32_t* recv_count;                          // [L]
    int32_t* recv_source;                         // [L, R*T_ll]: ll_pack_source(s, t, k) of each valid row
    int32_t* cumulative_local_expert_recv_stats;  // optional [L]
    int64_t* wait_time_stats;                     // optional [R]
};

// Dynamic shared memory of the dispatch kernel (int32 words).
SY_HOST_DEVICE int64_t ll_dispatch_shared_bytes(int32_t num_ranks, int32_t num_experts) {
    return 4 * (3 * int64_t(num_ranks) + 1 + max64(int64_t(num_experts) + num_ranks, num_experts)) + 64;
}

// A token is sent, and a record received, in slices that separate warps move in parallel: one
// warp walking a whole 7168-channel row keeps too few loads in flight (ncu, EP1 on H200: the
// kernel took ~70 us for 128 tokens with a warp per token). Send slices are 256-channel steps,
// receive slices 512-byte steps.
constexpr int kLlSendStepsPerSlice = 4;
constexpr int kLlRecvStepsPerSlice = 4;
SY_HOST_DEVICE constexpr int ll_send_slices(int hidden) {
    return ((hidden + 255) / 256 + kLlSendStepsPerSlice - 1) / kLlSendStepsPerSlice;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_dispatch_detail {

// Expert id of slot `k` of token `t`, or -1 for an empty/invalid slot (invalid ones are reported).
template <typename IndexT>
SY_DEVICE int32_t load_expert(const LlDispatchArgs& args, int32_t t, int32_t k, bool report) {
    const int64_t raw = static_cast<const IndexT*>(args.topk_idx)[int64_t(t) * args.topk_row_stride + k];
    if (raw < -1 || raw >= args.num_experts) {
        if (report)
            report_error(args.buffer.diagnostics, kErrorInvalidRouting, kPhaseLlDispatch, -1,
                         uint64_t(args.num_experts), uint64_t(raw), 0, t, k);
        return -1;
    }
    return int32_t(raw);
}

// Lane k < K: the expert of slot k after dropping repeats of an earlier slot (-1 otherwise).
template <int kTopk, typename IndexT>
SY_DEVICE int32_t token_expert(const LlDispatchArgs& args, int32_t t) {
    const uint32_t lane = ptx::lane_id();
    int32_t expert = int(lane) < kTopk ? load_expert<IndexT>(args, t, lane, true) : -1;
    const uint32_t same = __match_any_sync(0xffffffffu, expert);
    if (expert >= 0 && (same & ptx::lanemask_lt()) != 0) expert = -1;
    return expert;
}

// For lane k's expert e_k (rank r_k): how many tokens t' < t name e_k (`position`) and how many
// go to rank r_k (`slot`). Lanes scan 32 earlier tokens per step; the counts are ballots.
template <int kTopk, typename IndexT>
SY_DEVICE void count_earlier(const LlDispatchArgs& args, int32_t t, int32_t expert, int32_t rank,
                             int32_t& position, int32_t& slot) {
    const uint32_t lane = ptx::lane_id();
    position = 0;
    slot = 0;
    for (int32_t base = 0; base < t; base += 32) {
        const int32_t other = base + int32_t(lane);
        const bool active = other < t;
        int32_t ids[kTopk], ranks[kTopk];
#pragma unroll
        for (int k = 0; k < kTopk; ++k) {
            ids[k] = active ? load_expert<IndexT>(args, other, k, false) : -1;
            ranks[k] = ids[k] >= 0 ? ids[k] / args.local_experts : -1;
        }
#pragma unroll
        for (int j = 0; j < kTopk; ++j) {
            const int32_t e = __shfl_sync(0xffffffffu, expert, j);
            const int32_t r = __shfl_sync(0xffffffffu, rank, j);
            bool hit_expert = false, hit_rank = false;
#pragma unroll
            for (int k = 0; k < kTopk; ++k) {
                hit_expert |= ids[k] == e;
                hit_rank |= ranks[k] == r;
            }
            const uint32_t experts = __ballot_sync(0xffffffffu, e >= 0 && hit_expert);
            const uint32_t ranks_hit = __ballot_sync(0xffffffffu, r >= 0 && hit_rank);
            if (int(lane) == j) {
                position += __popc(experts);
                slot += __popc(ranks_hit);
            }
        }
    }
}

// Writes one token's payload and scales into every destination record of `destinations` (lanes
// whose bit is set hold their record address in `record`).
template <int kHidden, int kTopk, int kScaleKind>
SY_DEVICE void store_payload(const LlDispatchArgs& args, int32_t t, int slice, uint32_t destinations,
                             uint8_t* record) {
    const uint32_t lane = ptx::lane_id();
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const uint8_t* x_row = static_cast<const uint8_t*>(args.x) + int64_t(t) * args.x_row_stride * 2;
    constexpr int kChannelsPerStep = 256;  // 8 channels (16 bytes of bf16) per lane
    constexpr int kSteps = int((kHidden + kChannelsPerStep - 1) / kChannelsPerStep);
    const int first_step = slice * kLlSendStepsPerSlice;
    const int last_step =
        first_step + kLlSendStepsPerSlice < kSteps ? first_step + kLlSendStepsPerSlice : kSteps;
#pragma unroll 2
    for (int step = first_step; step < last_step; ++step) {
        const int channel = step * kChannelsPerStep + int(lane) * 8;
        const bool in_range = channel < kHidden;
        uint4 raw;
        raw.x = raw.y = raw.z = raw.w = 0;
        if (in_range) raw = *reinterpret_cast<const uint4*>(x_row + int64_t(channel) * 2);
        if constexpr (kScaleKind == kScaleNone) {
            for (uint32_t rest = destinations; rest != 0; rest &= rest - 1) {
                uint8_t* dst = reinterpret_cast<uint8_t*>(
                    __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), __ffs(rest) - 1));
                if (in_range)
                    *reinterpret_cast<uint4*>(dst + layout.payload_offset + int64_t(channel) * 2) = raw;
            }
        } else {
            // Lanes 0-15 hold block 2*step, lanes 16-31 block 2*step + 1.
            float amax = fp8::amax8(raw, fp8::kAmaxFloor);
#pragma unroll
            for (int offset = 8; offset >= 1; offset /= 2)
                amax = fp8::max_f32(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
            const int block = 2 * step + int(lane >= 16);
            uint2 quantized;
            uint32_t scale_word;
            if constexpr (kScaleKind == kScaleFloat32) {
                quantized = fp8::quantize8<false>(raw, fp8::div_rn(fp8::kE4m3Max, amax));
                scale_word = fp8::float_to_bits(fp8::div_rn(amax, fp8::kE4m3Max));
            } else {
                scale_word = fp8::ue8m0_byte(fp8::div_rn(amax, fp8::kE4m3Max));
                quantized = fp8::quantize8<true>(raw, fp8::ue8m0_scale(scale_word));
            }
            const bool writes_scale = (lane & 15u) == 0 && block * 128 < kHidden;
            for (uint32_t rest = destinations; rest != 0; rest &= rest - 1) {
                uint8_t* dst = reinterpret_cast<uint8_t*>(
                    __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), __ffs(rest) - 1));
                if (in_range) *reinterpret_cast<uint2*>(dst + layout.payload_offset + channel) = quantized;
                if (writes_scale) {
                    if constexpr (kScaleKind == kScaleFloat32)
                        reinterpret_cast<uint32_t*>(dst + layout.scale_offset)[block] = scale_word;
                    else
                        (dst + layout.scale_offset)[block] = uint8_t(scale_word);
                }
            }
        }
    }
    if constexpr (kScaleKind == kScaleUe8m0) {
        // Unused exponent bytes of the last packed word are zero (as the reference writes them).
        constexpr int kBlocks = (kHidden + 127) / 128;
        constexpr int kPadBytes = int((kHidden + 511) / 512) * 4 - kBlocks;
        if (kPadBytes > 0 && slice == 0) {
            for (uint32_t rest = destinations; rest != 0; rest &= rest - 1) {
                uint8_t* dst = reinterpret_cast<uint8_t*>(
                    __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), __ffs(rest) - 1));
                if (int(lane) < kPadBytes) (dst + layout.scale_offset)[kBlocks + lane] = 0;
            }
        }
    }
}

// One token: routing, slots, record metadata and payload to every destination rank.
template <int kHidden, int kTopk, int kScaleKind, typename IndexT>
SY_DEVICE void send_token(const LlDispatchArgs& args, int32_t t, int slice, uint64_t sequence,
                          const uint32_t* shared_mask) {
    const uint32_t lane = ptx::lane_id();
    const LlBufferArgs& buffer = args.buffer;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int32_t expert = token_expert<kTopk, IndexT>(args, t);
    const int32_t rank = expert >= 0 ? expert / args.local_experts : -1;
    int32_t position, slot;
    count_earlier<kTopk, IndexT>(args, t, expert, rank, position, slot);

    // The lowest slot naming a rank leads it: it holds the token's record address there.
    const uint32_t same_rank = __match_any_sync(0xffffffffu, rank);
    const bool leader = rank >= 0 && int(lane) == __ffs(same_rank) - 1;
    const bool sends = leader && shared_mask[rank] == 0;
    const uint32_t destinations = __ballot_sync(0xffffffffu, sends);
    uint8_t* record = nullptr;
    if (sends)
        record = buffer.set_layout.record(buffer.set_base(buffer.peer_bases[rank], ll_set_of(sequence)),
                                          buffer.rank, slot, layout.total_bytes);

    // Metadata (the token's first slice only): lane k writes slot k's local expert id and
    // position as the destination sees them.
    for (uint32_t rest = slice == 0 ? destinations : 0u; rest != 0; rest &= rest - 1) {
        const int source_lane = __ffs(rest) - 1;
        const int32_t destination = __shfl_sync(0xffffffffu, rank, source_lane);
        int32_t* meta = reinterpret_cast<int32_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(record), source_lane) +
            layout.meta_offset);
        const bool mine = rank == destination && expert >= 0;
        if (lane == 0) {
            meta[0] = t;
            meta[1] = -1;
        }
        if (int(lane) < kTopk) {
            meta[2 + lane] = mine ? expert - destination * args.local_experts : -1;
            meta[2 + 2 * kTopk + lane] = mine ? position : -1;
        }
    }
    store_payload<kHidden, kTopk, kScaleKind>(args, t, slice, destinations, record);
}

// One block, before its sends: per destination, the header {tokens, rows per local expert}. Lanes
// take (token, k) entries, 32 / K tokens per warp step; a repeated expert (rank) within a token
// counts once (first slot in k order, by a match mask). The headers are written like the records:
// the flag that the last block raises (after every block's fence) publishes them.
template <int kTopk, typename IndexT>
SY_DEVICE void write_headers(const LlDispatchArgs& args, uint64_t sequence, const uint32_t* shared_mask,
                             int32_t* shared_counts) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, E = args.num_experts, L = args.local_experts;
    int32_t* expert_counts = shared_counts;    // [E]
    int32_t* rank_counts = shared_counts + E;  // [R]
    for (int i = threadIdx.x; i < E + R; i += blockDim.x) shared_counts[i] = 0;
    __syncthreads();
    constexpr int kTokensPerStep = 32 / kTopk;
    const int lane = int(ptx::lane_id());
    const int sub = lane / kTopk, k = lane % kTopk;
    const uint32_t lower = ptx::lanemask_lt();
    const int warp = int(threadIdx.x / 32), warps = int(blockDim.x / 32);
    for (int first = warp * kTokensPerStep; first < args.num_tokens; first += warps * kTokensPerStep) {
        const int t = first + sub;
        const int32_t expert =
            sub < kTokensPerStep && t < args.num_tokens ? load_expert<IndexT>(args, t, k, false) : -1;
        const int32_t rank = expert >= 0 ? expert / L : -1;
        const uint32_t same_expert = __match_any_sync(0xffffffffu, expert >= 0 ? sub * E + expert : -1);
        const uint32_t same_rank = __match_any_sync(0xffffffffu, rank >= 0 ? sub * R + rank : -1);
        if (expert >= 0 && (same_expert & lower) == 0) atomicAdd(expert_counts + expert, 1);
        if (rank >= 0 && (same_rank & lower) == 0) atomicAdd(rank_counts + rank, 1);
    }
    __syncthreads();
    const int32_t set = ll_set_of(sequence);
    for (int i = threadIdx.x; i < R * (L + 1); i += blockDim.x) {
        const int32_t q = i / (L + 1), e = i % (L + 1);
        if (shared_mask[q]) continue;
        int32_t* header = buffer.set_layout.header(buffer.set_base(buffer.peer_bases[q], set), buffer.rank);
        header[e] = e == 0 ? rank_counts[q] : expert_counts[q * L + e - 1];
    }
    __syncthreads();
}

// Last block to finish its sends: raise this rank's flag at every unmasked destination.
SY_DEVICE void publish_flags(const LlDispatchArgs& args, uint64_t sequence, const uint32_t* shared_mask) {
    const LlBufferArgs& buffer = args.buffer;
    const int32_t set = ll_set_of(sequence);
    for (int q = threadIdx.x; q < buffer.num_ranks; q += blockDim.x) {
        if (shared_mask[q]) continue;
        ptx::fence_acq_rel_sys();
        uint64_t* flags =
            buffer.signals.flags(buffer.workspace.ll_signals(buffer.peer_bases[q]), kLlDispatch, set);
        ptx::st_release_sys(flags + buffer.rank, sequence);
    }
}

// One arrived record (source s, slot i): copy it into the rows of the local experts it names.
template <int kHidden, int kTopk, int kScaleKind>
SY_DEVICE void receive_record(const LlDispatchArgs& args, uint8_t* set_base, int32_t source, int32_t slot,
                              int slice, const int32_t* row_offsets) {
    const uint32_t lane = ptx::lane_id();
    const LlBufferArgs& buffer = args.buffer;
    const RecordLayout layout = ll_dispatch_record(kHidden, kScaleKind, kTopk);
    const int64_t rows_per_expert = int64_t(buffer.num_ranks) * buffer.set_layout.max_tokens;
    const uint8_t* record = buffer.set_layout.record(set_base, source, slot, layout.total_bytes);
    const int32_t* meta = reinterpret_cast<const int32_t*>(record + layout.meta_offset);
    const int32_t token = meta[0];
    int32_t local = -1;
    int64_t row = 0;
    if (int(lane) < kTopk) {
        local = meta[2 + lane];
        if (local >= 0) {
            row = row_offsets[source * args.local_experts + local] + meta[2 + 2 * kTopk + lane];
            if (slice == 0)
                args.recv_source[local * rows_per_expert + row] =
                    ll_pack_source(source, token, int32_t(lane), buffer.set_layout.max_tokens);
        }
    }
    const uint32_t experts = __ballot_sync(0xffffffffu, local >= 0);
    // Global row index (expert-major) of each expert this token lands in, held by lane k.
    const int64_t flat_row = local >= 0 ? local * rows_per_expert + row : 0;

    constexpr int64_t kPayloadBytes = kScaleKind == kScaleNone ? int64_t(kHidden) * 2 : kHidden;
    constexpr int kSteps = int((kPayloadBytes + 511) / 512);
    uint8_t* recv_x = static_cast<uint8_t*>(args.recv_x);
    const int first_step = slice * kLlRecvStepsPerSlice;
    const int last_step =
        first_step + kLlRecvStepsPerSlice < kSteps ? first_step + kLlRecvStepsPerSlice : kSteps;
#pragma unroll 4
    for (int step = first_step; step < last_step; ++step) {
        const int64_t offset = int64_t(step) * 512 + lane * 16;
        const bool active = offset < kPayloadBytes;
        uint4 chunk;
        chunk.x = chunk.y = chunk.z = chunk.w = 0;
        if (active) chunk = *reinterpret_cast<const uint4*>(record + layout.payload_offset + offset);
        for (uint32_t rest = experts; rest != 0; rest &= rest - 1) {
            const int64_t target = __shfl_sync(0xffffffffu, flat_row, __ffs(rest) - 1);
            if (active) *reinterpret_cast<uint4*>(recv_x + target * kPayloadBytes + offset) = chunk;
        }
    }
    __syncwarp();
    if (slice != 0) return;
    if constexpr (kScaleKind != kScaleNone) {
        constexpr int kWords = kScaleKind == kScaleFloat32 ? (kHidden + 127) / 128 : (kHidden + 511) / 512;
        const uint32_t* scales = reinterpret_cast<const uint32_t*>(record + layout.scale_offset);
        for (int word = int(lane); word - int(lane) < kWords; word += 32) {
            const bool active = word < kWords;
            const uint32_t value = active ? scales[word] : 0u;
            for (uint32_t rest = experts; rest != 0; rest &= rest - 1) {
                const int64_t target = __shfl_sync(0xffffffffu, flat_row, __ffs(rest) - 1);
                const int64_t expert_index = target / rows_per_expert, expert_row = target % rows_per_expert;
                if (active)
                    args.recv_scales[(expert_index * kWords + word) * rows_per_expert + expert_row] = value;
            }
        }
    }
}

}  // namespace ll_dispatch_detail

template <int kNumWarps, int kHidden, int kTopk, int kScaleKind, typename IndexT, int kPhases>
__global__ void __launch_bounds__(kNumWarps * 32, 1)
    ll_dispatch_kernel(const __grid_constant__ LlDispatchArgs args) {
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    static_assert(kHidden % 16 == 0, "rows are moved in 16-byte units");
    constexpr bool kSend = (kPhases & kLlSendHalf) != 0, kRecv = (kPhases & kLlRecvHalf) != 0;
    extern __shared__ __align__(16) int32_t shared_words[];
    __shared__ uint64_t shared_sequences[2];
    __shared__ uint32_t shared_flag;
    const LlBufferArgs& buffer = args.buffer;
    const int32_t R = buffer.num_ranks, L = args.local_experts;
    uint32_t* shared_mask = reinterpret_cast<uint32_t*>(shared_words);      // [R]
    uint32_t* shared_present = shared_mask + R;                             // [R]
    int32_t* item_starts = reinterpret_cast<int32_t*>(shared_present + R);  // [R + 1]
    int32_t* scratch = item_starts + R + 1;                                 // [max(E + R, R * L)]
    const int warp = int(threadIdx.x / 32);
    const int global_warp = int(blockIdx.x) * kNumWarps + warp, num_warps = int(gridDim.x) * kNumWarps;

    if (!ll_prologue<kSend, kRecv>(buffer, shared_sequences, shared_mask)) return;
    __syncthreads();

    if constexpr (kSend) {
        const uint64_t sequence = shared_sequences[0];
        constexpr int kSlices = ll_send_slices(kHidden);
        // The grid's last block has the fewest items (warps take items in grid order), so it
        // counts and writes the headers first; the flag at the end covers them.
        if (blockIdx.x == gridDim.x - 1)
            ll_dispatch_detail::write_headers<kTopk, IndexT>(args, sequence, shared_mask, scratch);
        for (int32_t item = global_warp; item < args.num_tokens * kSlices; item += num_warps)
            ll_dispatch_detail::send_token<kHidden, kTopk, kScaleKind, IndexT>(
                args, item / kSlices, item % kSlices, sequence, shared_mask);
        if (ll_last_block_arrives(buffer.workspace.counters(buffer.local_base), &shared_flag))
            ll_dispatch_detail::publish_flags(args, sequence, shared_mask);
        __syncthreads();
    }

    if constexpr (kRecv) {
        const uint64_t sequence = shared_sequences[1];
        if (!ll_wait_sources(buffer, kLlDispatch, sequence, shared_mask, shared_present,
                             args.wait_time_stats))
            return;
        uint8_t* set_base = buffer.set_base(buffer.local_base, ll_set_of(sequence));
        // Row offsets: source s's rows of local expert e start after those of sources < s.
        for (int e = threadIdx.x; e < L; e += blockDim.x) {
            int32_t running = 0;
            for (int s = 0; s < R; ++s) {
                scratch[s * L + e] = running;
                if (shared_present[s]) running += buffer.set_layout.header(set_base, s)[1 + e];
            }
            if (blockIdx.x == 0) {
                args.recv_count[e] = running;
                if (args.cumulative_local_expert_recv_stats)
                    args.cumulative_local_expert_recv_stats[e] += running;
            }
        }
        if (threadIdx.x == 0) {
            int32_t running = 0;
            for (int s = 0; s < R; ++s) {
                item_starts[s] = running;
                if (shared_present[s]) running += buffer.set_layout.header(set_base, s)[0];
            }
            item_starts[R] = running;
        }
        __syncthreads();
        constexpr int64_t kPayloadBytes = kScaleKind == kScaleNone ? int64_t(kHidden) * 2 : kHidden;
        constexpr int kRecvSlices =
            int(((kPayloadBytes + 511) / 512 + kLlRecvStepsPerSlice - 1) / kLlRecvStepsPerSlice);
        for (int32_t item = global_warp; item < item_starts[R] * kRecvSlices; item += num_warps) {
            const int32_t record = item / kRecvSlices;
            int32_t source = 0;
            while (item_starts[source + 1] <= record) ++source;
            ll_dispatch_detail::receive_record<kHidden, kTopk, kScaleKind>(
                args, set_base, source, record - item_starts[source], item % kRecvSlices, scratch);
        }
    }
}

#endif

}  // namespace switchyard::device
