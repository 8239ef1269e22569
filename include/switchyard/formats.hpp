// The enums the ops (ops.hpp) and the CPU reference (reference.hpp) share: one type each, so a
// layout or a scale format passes between them without conversion. No CUDA header is needed.
#pragma once

#include <cstdint>

namespace switchyard {

// How received rows are laid out (DESIGN.md §2).
enum class RecvLayout : uint8_t {
    kRankMajor,         // one row per (source rank, token), ordered by source then token
    kExpertContiguous,  // one row per (source, token, k), grouped by local expert, aligned segments
    kExpertMasked,      // [L, R*T_max, H]: expert e's first count[e] rows are valid
};

// Scales that travel with an FP8 payload, one per 128 channels.
enum class ScaleFormat : uint8_t {
    kNone,     // bf16 payload, no scales
    kFloat32,  // fp32 [T, ceil(H/128)]
    kUE8M0,    // exponent bytes packed four per int32: [T, ceil(H/512)]
};

// Host-synced: the call returns exact counts on the host and sizes outputs exactly (not
// graph-capturable). Device: outputs sized for the worst case, true counts stay on the GPU.
enum class CountMode : uint8_t { kHostSynced, kDevice };

const char* recv_layout_name(RecvLayout layout);    // "rank-major", "expert-contiguous", "expert-masked"
const char* scale_format_name(ScaleFormat format);  // "none", "fp32", "ue8m0"

}  // namespace switchyard
