// HT combine, the sending role (ht/combine.cuh composes the roles):
//
//  send_rows   each sender warp claims groups of kSendGroup consecutive received rows and writes
//              them back to the token's home rank, into slot (rank ordinal | top-k index) x token
//              of the home's combine region (rank-major rows whose home is this rank stay where
//              they are, in y): rank-major rows as they are, expert-major rows per k (flat) or
//              reduced over this rank's k first and rounded to bf16 once (hierarchical); each group
//              is then queued for the block's publisher warp (ht/combine_publish.cuh), which makes
//              the rows visible and raises the homes' arrival counters.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/claim_ahead.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/combine_publish.cuh"
#include "switchyard/ht/combine_reduce.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Fourteen 16-byte loads in flight per lane before their stores (7 KB per warp): a row copy is
// latency-bound otherwise. A 7168-channel bf16 row takes two rounds.
template <typename Shape>
SY_DEVICE void copy_row_to(uint8_t* destination, const uint8_t* source) {
    constexpr int64_t kBytes = int64_t(Shape::kHidden) * 2;
    constexpr int kUnroll = 14;
    for (int64_t base = int64_t(ptx::lane_id()) * 16; base < kBytes; base += kUnroll * 512) {
        uint4 v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (base + u * 512 < kBytes) v[u] = *reinterpret_cast<const uint4*>(source + base + u * 512);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
            if (base + u * 512 < kBytes) *reinterpret_cast<uint4*>(destination + base + u * 512) = v[u];
    }
}

// Hierarchical: this rank's rows of one home token (k ascending) reduced in fp32 and rounded once
// into `destination`, weighted with the dispatch's weights when asked.
template <typename Shape>
SY_DEVICE void reduce_own_rows_to(const HtCombineArgs& args, int64_t row, uint8_t* destination) {
    constexpr int kTopk = Shape::kTopk;
    const uint32_t lane = ptx::lane_id();
    for (int channel = int(lane) * 8; channel < Shape::kHidden; channel += 256) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int k = 0; k < kTopk; ++k) {
            const int32_t expert_row = args.row_expert_row[row * kTopk + k];
            if (expert_row < 0) continue;
            float v[8];
            unpack8(*reinterpret_cast<const uint4*>(args.y + int64_t(expert_row) * args.y_row_stride_bytes +
                                                    channel * 2),
                    v);
            const float w = args.dispatch_row_weights[row * kTopk + k];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[i] = args.weighted ? fmaf(w, v[i], acc[i]) : acc[i] + v[i];
        }
        *reinterpret_cast<uint4*>(destination + channel * 2) = pack8(acc);
    }
}

// send_rows for one rank-major row `row` received from home rank `home`, token `token` there.
// Returns the number of records written (the home's arrival count for them).
template <typename Shape>
SY_DEVICE int send_row(const HtCombineArgs& args, int64_t row, int home, int token) {
    constexpr int kTopk = Shape::kTopk;
    const RecordLayout r = Shape::record();
    const uint32_t lane = ptx::lane_id();
    uint8_t* home_base = args.common.peer_bases[home];
    if constexpr (Shape::kMode == kHtCombineRankMajor) {
        uint8_t* destination = combine_record<Shape>(args, home_base, args.row_combine_slot[row], token);
        copy_row_to<Shape>(destination, args.y + row * args.y_row_stride_bytes);
        float* meta = reinterpret_cast<float*>(destination + r.meta_offset);
        if (int(lane) < kTopk)
            meta[lane] = args.row_weights ? args.row_weights[row * args.row_weights_stride + lane] : 0.0f;
        return 1;
    } else if constexpr (Shape::kMode == kHtCombineExpertFlat) {
        int written = 0;
        for (int k = 0; k < kTopk; ++k) {
            const int32_t expert_row = args.row_expert_row[row * kTopk + k];
            if (expert_row < 0) continue;
            uint8_t* destination = combine_record<Shape>(args, home_base, k, token);
            copy_row_to<Shape>(destination, args.y + int64_t(expert_row) * args.y_row_stride_bytes);
            float* meta = reinterpret_cast<float*>(destination + r.meta_offset);
            if (int(lane) < kTopk)
                meta[lane] = (int(lane) == k && args.row_weights)
                                 ? args.row_weights[int64_t(expert_row) * args.row_weights_stride]
                                 : 0.0f;
            ++written;
        }
        return written;
    } else {
        uint8_t* destination = combine_record<Shape>(args, home_base, args.row_combine_slot[row], token);
        reduce_own_rows_to<Shape>(args, row, destination);
        float* meta = reinterpret_cast<float*>(destination + r.meta_offset);
        if (int(lane) < kTopk) {
            const int32_t expert_row = args.row_expert_row[row * kTopk + lane];
            meta[lane] = (expert_row >= 0 && args.row_weights)
                             ? args.row_weights[int64_t(expert_row) * args.row_weights_stride]
                             : 0.0f;
        }
        return 1;
    }
}

// send_rows, sender warp `warp` of its block. Rows leave in item order (home-token order) whoever
// sends them, so the homes' chunks complete one after another. The warp takes the next kSendGroup
// consecutive items from a counter, the claim for its next group issued before it sends this one,
// so warps that run faster send more (a fixed split left the grid waiting for its slowest SMs).
// Lane j of a group finds row j's home and token (so their loads overlap), the warp sends the
// rows, then queues them for the publisher, which fences once for everything queued.
template <typename Shape, int kSendWarps, int kSendGroup>
SY_DEVICE void send_rows(const HtCombineArgs& args, uint64_t* counters, const int32_t* row_offsets,
                         PublishQueues<kSendWarps>& queues, int warp) {
    static_assert(kSendGroup >= 1 && kSendGroup <= 32, "one lane per row of a group");
    const HtCommon& c = args.common;
    const int32_t rows = row_offsets[c.num_ranks];
    // Rows whose home is this rank stay in y when the home reads them there.
    const int64_t own_first = row_offsets[c.rank], own_last = row_offsets[c.rank + 1];
    const int64_t sent_rows = rows - (Shape::kReadsOwnRows ? own_last - own_first : 0);
    ClaimAhead claims{reinterpret_cast<unsigned long long*>(counters + kCounterHtNextSendItem),
                      (unsigned long long)kSendGroup};
    claims.issue();
    uint32_t queued = 0;  // rows queued for the publisher
    for (;;) {
        const int64_t base = claims.take(sent_rows);
        if (base >= sent_rows) break;
        const int64_t my_item = base + int64_t(ptx::lane_id());
        int64_t my_row = -1;
        int my_home = 0, my_token = 0;
        bool my_home_masked = false;  // (masking: the row stays here)
        if (int(ptx::lane_id()) < kSendGroup && my_item < sent_rows) {
            my_row =
                Shape::kReadsOwnRows && my_item >= own_first ? my_item + (own_last - own_first) : my_item;
            while (my_home + 1 < c.num_ranks && row_offsets[my_home + 1] <= my_row) ++my_home;
            my_token = args.row_src_token[my_row];
            my_home_masked = ht_peer_masked(c, my_home);
        }
        int my_written = 0;
#pragma unroll 1
        for (int j = 0; j < kSendGroup; ++j) {
            const int64_t row = __shfl_sync(0xffffffffu, my_row, j);
            if (row < 0) break;
            if (__shfl_sync(0xffffffffu, my_home_masked, j)) continue;
            const int written = send_row<Shape>(args, row, __shfl_sync(0xffffffffu, my_home, j),
                                                __shfl_sync(0xffffffffu, my_token, j));
            if (int(ptx::lane_id()) == j) my_written = written;
        }
        queue_rows(queues, warp, queued, kSendGroup, my_home, my_token, my_written);
    }
    finish_queueing(queues);
    if (ptx::lane_id() == 0) trace_mark(args.trace, kHtCombineSent);
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
