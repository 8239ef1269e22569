// High-throughput receive (after the dispatch kernel, on the rank's SMs several blocks deep): for
// every rank-major row that landed in the receive region, record what combine needs (source
// token, combine slot, the dispatch weights) and, for the expert-major layouts, copy the row to
// each local expert's row:
//   row = expert start + rows of earlier sources for that expert + the row's position among its
//   source's rows for that expert (all deterministic, from the dispatch's counts).
// Padding rows of the contiguous layout are zeroed when asked. Its roles, one per layout:
//   record_rows         rank-major: the rows stay where they landed, only their metadata is copied;
//   expand_rows         expert-major: metadata, and each row copied to its experts' rows;
//   zero_padding_rows   contiguous layout: the padding rows of each expert's segment.
//
// Template arguments (src/launch/ht_receive_launch.cpp): kThreads per block, the records' shape
// (hidden, top-k, scale kind) and the receive layout (HtRecvLayout).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

// The records a receive kernel reads: the dispatch's, of this hidden size, top-k and scale kind.
template <int kHidden_, int kTopk_, int kScaleKind_>
struct HtRecordShape {
    static constexpr int kHidden = kHidden_;
    static constexpr int kTopk = kTopk_;
    static constexpr int kScaleKind = kScaleKind_;
    static_assert(kTopk >= 1 && kTopk <= 32, "one lane per top-k slot");
    SY_HOST_DEVICE static RecordLayout record() {
        return RecordLayout::dispatch(kHidden, kScaleKind == kScaleNone ? kPayloadBf16 : kPayloadFp8,
                                      kScaleKind, kTopk);
    }
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Warp copy of `bytes` (a multiple of 16) with 16-byte accesses.
SY_DEVICE void warp_copy(uint8_t* destination, const uint8_t* source, int64_t bytes) {
    for (int64_t offset = int64_t(ptx::lane_id()) * 16; offset < bytes; offset += 32 * 16)
        *reinterpret_cast<uint4*>(destination + offset) = *reinterpret_cast<const uint4*>(source + offset);
}

SY_DEVICE void warp_zero(uint8_t* destination, int64_t bytes) {
    for (int64_t offset = int64_t(ptx::lane_id()) * 16; offset < bytes; offset += 32 * 16)
        *reinterpret_cast<uint4*>(destination + offset) = make_uint4(0, 0, 0, 0);
}

// This warp's place in the grid: rows are spread over all the grid's warps.
struct GridWarp {
    int64_t index, count;
};

// Rank-major: the rows stay where they landed; only what combine needs is recorded. A warp takes
// kRows consecutive rows and loads all their metadata before any store: one row at a time put a
// memory round trip per row on each warp.
template <typename Shape>
SY_DEVICE void record_rows(const HtReceiveArgs& args, const uint8_t* region, int32_t rows, GridWarp warp) {
    constexpr int kTopk = Shape::kTopk;
    constexpr int kRows = 8;
    const RecordLayout r = Shape::record();
    const uint32_t lane = ptx::lane_id();
    for (int64_t first = warp.index * kRows; first < rows; first += warp.count * kRows) {
        int32_t token[kRows], slot[kRows], weight[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const int32_t* meta =
                reinterpret_cast<const int32_t*>(region + (first + i) * r.total_bytes + r.meta_offset);
            const bool inside = first + i < rows;
            token[i] = inside && lane == 0 ? meta[0] : 0;
            slot[i] = inside && lane == 0 ? meta[1] : 0;
            weight[i] = inside && int(lane) < kTopk ? meta[2 + kTopk + lane] : 0;
        }
#pragma unroll
        for (int i = 0; i < kRows; ++i) {
            const int64_t row = first + i;
            if (row >= rows) break;
            if (lane == 0) {
                args.row_src_token[row] = token[i];
                args.row_combine_slot[row] = slot[i];
            }
            if (int(lane) < kTopk) {
                args.row_weights[row * kTopk + lane] = __int_as_float(weight[i]);
                args.row_expert_row[row * kTopk + lane] = -1;
            }
        }
    }
}

// Expert-major: each row is also copied to the rows of the local experts it names. Lane k works
// out slot k's expert row once; the warp's copies then take the rows from the lanes.
template <typename Shape>
SY_DEVICE void expand_rows(const HtReceiveArgs& args, const uint8_t* region, int32_t rows, GridWarp warp) {
    constexpr int kTopk = Shape::kTopk;
    const HtCommon& c = args.common;
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    const int32_t* recv_info = args.recv_info;
    const RecordLayout r = Shape::record();
    const uint32_t lane = ptx::lane_id();
    const int scale_words = int(r.scale_bytes / 4);
    for (int64_t row = warp.index; row < rows; row += warp.count) {
        int source = 0;
        while (source + 1 < c.num_ranks && recv_info[info.row_offsets() + source + 1] <= row) ++source;
        const uint8_t* record = region + row * r.total_bytes;
        const int32_t* meta = reinterpret_cast<const int32_t*>(record + r.meta_offset);
        if (lane == 0) {
            args.row_src_token[row] = meta[0];
            args.row_combine_slot[row] = meta[1];
        }
        int32_t expert_row = -1, weight_bits = 0;
        if (int(lane) < kTopk) {
            weight_bits = meta[2 + kTopk + lane];
            args.row_weights[row * kTopk + lane] = __int_as_float(weight_bits);
            const int32_t expert = meta[2 + lane];
            if (expert >= 0)
                expert_row = recv_info[info.expert_offsets() + expert] +
                             recv_info[info.source_expert_offsets() + source * c.local_experts + expert] +
                             meta[2 + 2 * kTopk + lane];
            args.row_expert_row[row * kTopk + lane] = expert_row;
        }
        for (uint32_t rest = __ballot_sync(0xffffffffu, expert_row >= 0); rest != 0; rest &= rest - 1) {
            const int k = __ffs(rest) - 1;  // slots in ascending order
            const int64_t target = __shfl_sync(0xffffffffu, expert_row, k);
            const int32_t weight = __shfl_sync(0xffffffffu, weight_bits, k);
            warp_copy(args.out_x + target * r.payload_bytes, record, r.payload_bytes);  // scales: per word
            const uint32_t* scales = reinterpret_cast<const uint32_t*>(record + r.scale_offset);
            for (int w = lane; w < scale_words; w += 32)
                args.out_scales[target * scale_words + w] = scales[w];
            if (lane == 0 && args.out_weights)
                args.out_weights[target] = args.has_weights ? __int_as_float(weight) : 0.0f;
        }
    }
}

// Contiguous layout: padding rows between an expert's last row and the next segment.
template <typename Shape>
SY_DEVICE void zero_padding_rows(const HtReceiveArgs& args, GridWarp warp) {
    const HtCommon& c = args.common;
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    const int32_t* recv_info = args.recv_info;
    const RecordLayout r = Shape::record();
    const uint32_t lane = ptx::lane_id();
    const int scale_words = int(r.scale_bytes / 4);
    const int64_t padded_rows = recv_info[info.expert_offsets() + c.local_experts];
    for (int64_t row = warp.index; row < padded_rows; row += warp.count) {
        int expert = 0;
        while (expert + 1 < c.local_experts && recv_info[info.expert_offsets() + expert + 1] <= row) ++expert;
        if (row - recv_info[info.expert_offsets() + expert] < recv_info[info.expert_counts() + expert])
            continue;
        warp_zero(args.out_x + row * r.payload_bytes, r.payload_bytes);
        for (int w = lane; w < scale_words; w += 32) args.out_scales[row * scale_words + w] = 0u;
        if (lane == 0 && args.out_weights) args.out_weights[row] = 0.0f;
    }
}

}  // namespace ht_detail

template <int kThreads, int kHidden, int kTopk, int kScaleKind, int kLayout>
__global__ void __launch_bounds__(kThreads, 1) ht_receive_kernel(const __grid_constant__ HtReceiveArgs args) {
    using Shape = HtRecordShape<kHidden, kTopk, kScaleKind>;
    static_assert(kThreads % 32 == 0, "whole warps");
    static_assert(kLayout == kHtRankMajor || kLayout == kHtExpertContiguous || kLayout == kHtExpertMasked);
    const HtCommon& c = args.common;
    ptx::grid_dependency_wait();  // the dispatch kernel's results (programmatic dependent launch)
    const HtRecvInfoLayout info{c.num_ranks, c.local_experts};
    const int32_t rows = args.recv_info[info.row_offsets() + c.num_ranks];  // loaded beside the poison check
    if (is_poisoned(c.diagnostics)) return;  // the dispatch failed: its rows are not all there
    if (threadIdx.x == 0) trace_mark(args.trace, kHtReceiveStart, true);
    const uint8_t* region = c.local_base + c.layout.ht_dispatch_offset;
    constexpr int kWarpsPerBlock = kThreads / 32;
    const ht_detail::GridWarp warp{int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32,
                                   int64_t(gridDim.x) * kWarpsPerBlock};
    if (warp.index == 0 && ptx::lane_id() == 0)
        args.out_num_rows[0] =
            kLayout == kHtRankMajor ? rows : args.recv_info[info.expert_offsets() + c.local_experts];
    if constexpr (kLayout == kHtRankMajor) {
        ht_detail::record_rows<Shape>(args, region, rows, warp);
    } else {
        ht_detail::expand_rows<Shape>(args, region, rows, warp);
        if (kLayout == kHtExpertContiguous && args.zero_padding)
            ht_detail::zero_padding_rows<Shape>(args, warp);
    }
    trace_finish(args.trace, kHtReceiveEnd, kHtDispatchMarks, kHtDispatchFirstMarks);
}

#endif

}  // namespace switchyard::device
