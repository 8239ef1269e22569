// The record format: one token as it travels (DESIGN.md §3). payload | scales | metadata, each
// section 32-byte aligned, so a whole token moves with one bulk copy and host sizing and device
// addressing agree.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

enum PayloadKind : int32_t { kPayloadBf16 = 0, kPayloadFp8 = 1 };
enum ScaleKind : int32_t { kScaleNone = 0, kScaleFloat32 = 1, kScaleUe8m0 = 2 };

struct RecordLayout {
    static constexpr int64_t kSectionAlignment = 32;

    int64_t payload_bytes = 0;  // hidden * element size
    int64_t scale_bytes = 0;    // scale words * 4
    int64_t meta_bytes = 0;     // metadata words * 4
    int64_t payload_offset = 0;
    int64_t scale_offset = 0;
    int64_t meta_offset = 0;
    int64_t total_bytes = 0;

    SY_HOST_DEVICE static constexpr int64_t scale_words(int64_t hidden, int32_t scale_kind) {
        return scale_kind == kScaleFloat32 ? ceil_div(hidden, 128)
                                           : (scale_kind == kScaleUe8m0 ? ceil_div(hidden, 512) : 0);
    }

    SY_HOST_DEVICE static constexpr RecordLayout make(int64_t payload_bytes, int64_t scale_words,
                                                      int64_t meta_words) {
        RecordLayout layout;
        layout.payload_bytes = payload_bytes;
        layout.scale_bytes = scale_words * 4;
        layout.meta_bytes = meta_words * 4;
        layout.payload_offset = 0;
        layout.scale_offset = align_up(layout.payload_bytes, kSectionAlignment);
        layout.meta_offset = layout.scale_offset + align_up(layout.scale_bytes, kSectionAlignment);
        layout.total_bytes = layout.meta_offset + align_up(layout.meta_bytes, kSectionAlignment);
        return layout;
    }

    // Dispatch record: payload, scales, and metadata {source token, combine slot, K local expert
    // ids, K weights, K positions within the expert}.
    SY_HOST_DEVICE static constexpr int64_t dispatch_meta_words(int32_t topk) {
        return 2 + 3 * int64_t(topk);
    }
    SY_HOST_DEVICE static constexpr RecordLayout dispatch(int64_t hidden, int32_t payload_kind,
                                                          int32_t scale_kind, int32_t topk) {
        const int64_t element = payload_kind == kPayloadFp8 ? 1 : 2;
        return make(hidden * element, scale_words(hidden, scale_kind), dispatch_meta_words(topk));
    }

    // Combine record: bf16 payload and K weights sent back (combined_topk_weights). Records are
    // whole 128-byte lines apart, so every row written to a home starts on a line (a bulk copy or a
    // warp's 512-byte store then covers whole lines instead of straddling one more).
    SY_HOST_DEVICE static constexpr RecordLayout combine(int64_t hidden, int32_t topk) {
        RecordLayout layout = make(hidden * 2, 0, topk);
        layout.total_bytes = align_up(layout.total_bytes, 128);
        return layout;
    }

    // The largest dispatch record any call on a buffer of this capacity can produce: a bf16
    // payload, or an fp8 payload with fp32 scales, whichever is larger.
    SY_HOST_DEVICE static constexpr int64_t max_dispatch_bytes(int64_t max_hidden, int32_t max_topk) {
        return max64(dispatch(max_hidden, kPayloadBf16, kScaleNone, max_topk).total_bytes,
                     dispatch(max_hidden, kPayloadFp8, kScaleFloat32, max_topk).total_bytes);
    }
};

}  // namespace switchyard::device
