// The sizes the LL dispatch kernel and its launcher agree on: its work items (slices of a row),
// its shared memory, and the rows of its outputs.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/record_layout.cuh"

namespace switchyard::device {

// Words of one routing bit mask (a bit per token of the op).
SY_HOST_DEVICE int32_t ll_token_mask_words(int32_t num_tokens) {
    return num_tokens > 0 ? (num_tokens + 31) / 32 : 1;
}

// Dynamic shared memory of the dispatch kernel: mask, presence and record starts, then a scratch
// area that holds the routing masks [(E + R) masks] while sending and, after, the receive row
// offsets [R * L = E] followed by the experts' first rows [L + 1] and the padding rows before
// each expert [L + 1] (zero_padding).
SY_HOST_DEVICE int64_t ll_dispatch_shared_bytes(int32_t num_ranks, int32_t num_experts, int32_t num_tokens) {
    const int64_t masks = (int64_t(num_experts) + num_ranks) * ll_token_mask_words(num_tokens);
    const int64_t receive = int64_t(num_experts) + 2 * (int64_t(num_experts) / num_ranks + 1);
    return 4 * (3 * int64_t(num_ranks) + 1 + max64(masks, receive)) + 64;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// The dispatch kernel's dynamic shared memory as ll_dispatch_shared_bytes lays it out.
struct LlDispatchShared {
    uint32_t* mask;           // [R] the mask snapshot of the prologue
    uint32_t* present;        // [R] receive: 1 = the source's data of this op is here
    int32_t* record_starts;   // [R + 1] receive: the records of the sources before s, then of all
    int32_t* scratch;         // send: the routing masks; receive: the row offsets [R * L]
    int32_t* expert_starts;   // [L + 1] receive, after the row offsets: each expert's first output row
    int32_t* padding_starts;  // [L + 1] receive with zero_padding: the padding rows before each expert

    SY_DEVICE static LlDispatchShared carve(int32_t* words, int32_t num_ranks, int32_t local_experts) {
        LlDispatchShared shared;
        shared.mask = reinterpret_cast<uint32_t*>(words);
        shared.present = shared.mask + num_ranks;
        shared.record_starts = reinterpret_cast<int32_t*>(shared.present + num_ranks);
        shared.scratch = shared.record_starts + num_ranks + 1;
        shared.expert_starts = shared.scratch + num_ranks * local_experts;
        shared.padding_starts = shared.expert_starts + local_experts + 1;
        return shared;
    }
};

#endif

// Rows of an expert-major contiguous output on a buffer of T_ll tokens per rank: every source's
// tokens can land on up to min(K, L) local experts, and each expert's start is rounded up to
// `alignment` rows.
SY_HOST_DEVICE int64_t ll_contiguous_rows(int32_t num_ranks, int32_t max_tokens, int32_t topk,
                                          int32_t local_experts, int32_t alignment) {
    const int64_t per_token = topk < local_experts ? topk : local_experts;
    return int64_t(num_ranks) * max_tokens * per_token + int64_t(local_experts) * (alignment - 1);
}

// A token is sent, and a record received, in slices that separate warps move in parallel: one
// warp walking a whole row keeps too few loads in flight. Send slices are 256-channel steps,
// receive slices 512-byte steps.
constexpr int kLlSendStepsPerSlice = 4;
constexpr int kLlRecvStepsPerSlice = 4;
SY_HOST_DEVICE constexpr int ll_send_slices(int hidden) {
    return ((hidden + 255) / 256 + kLlSendStepsPerSlice - 1) / kLlSendStepsPerSlice;
}
// Bytes of a received row's payload (fp8, or bf16 without scales), its receive slices and its
// scale words (fp32, or UE8M0 bytes packed four per word).
SY_HOST_DEVICE constexpr int64_t ll_payload_bytes(int hidden, int scale_kind) {
    return scale_kind == kScaleNone ? int64_t(hidden) * 2 : hidden;
}
SY_HOST_DEVICE constexpr int ll_recv_slices(int hidden, int scale_kind) {
    return int(((ll_payload_bytes(hidden, scale_kind) + 511) / 512 + kLlRecvStepsPerSlice - 1) /
               kLlRecvStepsPerSlice);
}
SY_HOST_DEVICE constexpr int ll_scale_words(int hidden, int scale_kind) {
    return scale_kind == kScaleNone      ? 0
           : scale_kind == kScaleFloat32 ? (hidden + 127) / 128
                                         : (hidden + 511) / 512;
}

// Padding rows (zero_padding, contiguous layout): the rows of each expert's aligned segment past
// its count, numbered over all experts in order. `padding_starts` [L + 1]: the padding rows of the
// experts before e, then of all. The output row of padding row p: expert e's padding rows end its
// segment, at expert_starts[e + 1].
SY_HOST_DEVICE int64_t ll_padding_row(const int32_t* padding_starts, const int32_t* expert_starts, int32_t L,
                                      int32_t p) {
    const int32_t expert = last_start_at_or_below(padding_starts, L, p);  // the expert whose padding holds p
    return int64_t(expert_starts[expert + 1]) - (padding_starts[expert + 1] - p);
}

}  // namespace switchyard::device
