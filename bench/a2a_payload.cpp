#include "a2a_payload.hpp"

#include <algorithm>

#include "routing.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

const char* payload_name(PayloadType type) {
    return type == PayloadType::kFP8 ? "fp8" : "bf16";
}

int64_t dispatch_row_bytes(PayloadType type, int hidden) {
    if (type == PayloadType::kBF16) return 2 * static_cast<int64_t>(hidden);
    const int64_t scale_blocks = (hidden + 127) / 128;
    return hidden + scale_blocks * 4;
}

A2aPayload::A2aPayload(const A2aShape& shape) : shape_(shape) {
    const int R = shape.ranks;
    if (R <= 0 || shape.experts <= 0 || shape.experts % R != 0) {
        throw InvalidArgument("A2aPayload: experts (" + std::to_string(shape.experts) +
                              ") must be a positive multiple of ranks (" + std::to_string(R) + ")");
    }
    const int experts_per_rank = shape.experts / R;
    rows_.assign(static_cast<size_t>(R) * R, 0);
    std::vector<char> reaches(R);
    for (int src = 0; src < R; ++src) {
        const std::vector<int64_t> topk_idx =
            random_topk_routing(shape.tokens_per_rank, shape.topk, shape.experts, rank_seed(shape.seed, src));
        for (int t = 0; t < shape.tokens_per_rank; ++t) {
            std::fill(reaches.begin(), reaches.end(), 0);
            for (int k = 0; k < shape.topk; ++k) {
                reaches[topk_idx[static_cast<size_t>(t) * shape.topk + k] / experts_per_rank] = 1;
            }
            for (int dst = 0; dst < R; ++dst) rows_[static_cast<size_t>(src) * R + dst] += reaches[dst];
        }
    }
}

int64_t A2aPayload::bytes(A2aPhase phase, int src, int dst) const {
    if (phase == A2aPhase::kDispatch)
        return rows(src, dst) * dispatch_row_bytes(shape_.dispatch_type, shape_.hidden);
    // Combine: dst dispatched these rows to src, src returns them.
    return rows(dst, src) * combine_row_bytes(shape_.hidden);
}

int64_t A2aPayload::bytes_sent(A2aPhase phase, int rank, bool remote_only) const {
    int64_t total = 0;
    for (int dst = 0; dst < ranks(); ++dst) {
        if (!(remote_only && dst == rank)) total += bytes(phase, rank, dst);
    }
    return total;
}

int64_t A2aPayload::bytes_received(A2aPhase phase, int rank, bool remote_only) const {
    int64_t total = 0;
    for (int src = 0; src < ranks(); ++src) {
        if (!(remote_only && src == rank)) total += bytes(phase, src, rank);
    }
    return total;
}

int64_t A2aPayload::max_buffer_bytes() const {
    int64_t most = 0;
    for (const A2aPhase phase : {A2aPhase::kDispatch, A2aPhase::kCombine}) {
        for (int rank = 0; rank < ranks(); ++rank) {
            most = std::max({most, bytes_sent(phase, rank, false), bytes_received(phase, rank, false)});
        }
    }
    return most;
}

}  // namespace switchyard::bench
