// The LL combine's reductions (flat receive, hierarchical send and receive) share one inner loop:
// a warp sums the rows its lanes offer, each in fp32 in a fixed order, and rounds to bf16 once.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/fp8.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ll_combine_detail {

// Eight fp32 channels rounded to bf16 (round to nearest even), as one 16-byte store.
SY_DEVICE uint4 pack_bf16x8(const float (&acc)[8]) {
    uint4 packed;
    packed.x = fp8::bf16x2(acc[0], acc[1]);
    packed.y = fp8::bf16x2(acc[2], acc[3]);
    packed.z = fp8::bf16x2(acc[4], acc[5]);
    packed.w = fp8::bf16x2(acc[6], acc[7]);
    return packed;
}

template <int kSteps>
struct ReduceItem {
    int channel[kSteps];  // lane's first channel of each step
    bool in_range[kSteps];
};

template <int kHidden, int kSteps>
SY_DEVICE ReduceItem<kSteps> reduce_item(int part) {
    ReduceItem<kSteps> item;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) {
        item.channel[i] = (part * kSteps + i) * 256 + int(ptx::lane_id()) * 8;
        item.in_range[i] = item.channel[i] < kHidden;
    }
    return item;
}

// acc = fma(weight, row, acc) over the warp's selected rows, in `position` order (0 .. count - 1):
// lane l offers one row (`row`, `weight`) when `selected`. With weight 1 the fma is the rounded
// sum acc + row. The order is what makes the result match the reference bit for bit.
template <int kBatch, int kSteps>
SY_DEVICE void accumulate_rows(const uint8_t* row, float weight, bool selected, int position, int count,
                               const ReduceItem<kSteps>& item, float (&acc)[kSteps][8]) {
    for (int first = 0; first < count; first += kBatch) {
        uint4 chunks[kBatch][kSteps];
        float weights[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            const uint32_t offering = __ballot_sync(0xffffffffu, selected && position == first + j);
            const int from_lane = offering != 0 ? __ffs(offering) - 1 : 0;
            weights[j] = __shfl_sync(0xffffffffu, weight, from_lane);
            const auto* from = reinterpret_cast<const uint8_t*>(
                __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(row), from_lane));
            if (offering == 0) continue;
#pragma unroll
            for (int i = 0; i < kSteps; ++i)
                if (item.in_range[i])
                    chunks[j][i] = *reinterpret_cast<const uint4*>(from + int64_t(item.channel[i]) * 2);
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
            if (first + j >= count) continue;
#pragma unroll
            for (int i = 0; i < kSteps; ++i) {
                if (!item.in_range[i]) continue;
                const uint32_t words[4] = {chunks[j][i].x, chunks[j][i].y, chunks[j][i].z, chunks[j][i].w};
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    acc[i][2 * w] = fp8::fma_rn(weights[j], fp8::bf16_low(words[w]), acc[i][2 * w]);
                    acc[i][2 * w + 1] = fp8::fma_rn(weights[j], fp8::bf16_high(words[w]), acc[i][2 * w + 1]);
                }
            }
        }
    }
}

// A reduction item: the selected rows summed as accumulate_rows says, from zero, rounded to bf16
// once and stored to the row at `to`.
template <int kTopk, int kSteps, int kMaxBatch = 8>
SY_DEVICE void reduce_rows_to(uint8_t* to, const uint8_t* row, float weight, bool selected, int position,
                              const ReduceItem<kSteps>& item) {
    float acc[kSteps][8];
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[i][c] = 0.0f;
    const int count = __popc(__ballot_sync(0xffffffffu, selected));
    accumulate_rows<(kTopk < kMaxBatch ? kTopk : kMaxBatch), kSteps>(row, weight, selected, position, count,
                                                                     item, acc);
#pragma unroll
    for (int i = 0; i < kSteps; ++i)
        if (item.in_range[i])
            *reinterpret_cast<uint4*>(to + int64_t(item.channel[i]) * 2) = pack_bf16x8(acc[i]);
}

}  // namespace ll_combine_detail

#endif

}  // namespace switchyard::device
