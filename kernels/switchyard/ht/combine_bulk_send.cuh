// High-throughput combine, rank-major rows: an opt-in sending side (SWITCHYARD_HT_COMBINE_BULK_SEND=1)
// as one warp per block that drives bulk (TMA) copies. Row i of the block's rows is loaded from y
// into a shared-memory stage, its weights are written behind it, and the whole record is
// bulk-stored to its home; a stage is reloaded once the store of the row before has read it.
//
// The idea: the register senders fence once per group of rows, and that fence waits until the
// warp's stores have crossed the link behind every other warp's, so all senders stall and reload
// from HBM together (16 SMs move ~200 GB/s where plain SM stores of a contiguous payload reach
// ~330 GB/s, bench/micro/transfer_paths.cu). Bulk stores complete in order per thread, so rows are
// published kBulkPublishLag rows behind the newest store while newer ones are in flight.
//
// Measured (2 x H200, EP2, 4096 tokens, hidden 7168, 71320ca): correct (gpu_test_ht, graph soak),
// but slower: 747 / 415 / 257 us at 8 / 16 / 40 SMs against 452 / 287 / 236 us for the register
// senders. Each block spends ~1.5 us per row whatever the SM count; neither the publication lag
// (6 or 10 rows), the proxy fence per row, the weights' loads (now a window ahead) nor the
// reducers' polling changed that (design notes §3). It stays opt-in until that is understood.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ht/ht_args.cuh"

namespace switchyard::device {

// Stages of the bulk sender: as many records as fit in kHtBulkSendBytes, at most kHtBulkMaxStages.
constexpr int64_t kHtBulkSendBytes = 200 * 1024;
constexpr int32_t kHtBulkMaxStages = 12;

// A stage's stride in shared memory: the record rounded up to 128 bytes (bulk copies to and from
// shared memory run on whole 128-byte lines).
SY_HOST_DEVICE int64_t ht_bulk_stage_bytes(int64_t record_bytes) {
    return align_up(record_bytes, 128);
}

SY_HOST_DEVICE int32_t ht_bulk_send_stages(int64_t record_bytes) {
    const int64_t fit = kHtBulkSendBytes / ht_bulk_stage_bytes(record_bytes);
    return int32_t(fit < kHtBulkMaxStages ? fit : kHtBulkMaxStages);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace ht_detail {

// Rows a store must be behind the newest before the driver waits for it and publishes it: the
// stores in flight per block (~140 KB at hidden 7168) keep the link busy meanwhile.
constexpr int kBulkPublishLag = 10;
// Rows published together (one fence and one arrival instruction for the warp).
constexpr int kBulkPublishGroup = 8;

// Rows whose home and token the driver remembers until they are published (a ring in shared
// memory): more than kBulkPublishLag + kBulkPublishGroup, the rows a row can wait to be published.
constexpr int kBulkInfoRing = 32;
static_assert(kBulkPublishLag + kBulkPublishGroup < kBulkInfoRing, "a row's info outlives its publication");

// Publishes rows [first, first + count) of the block (count < 32): their stores are complete
// (lane 0 waited); lane j + 1 raises row j's home arrival counter by one record. Lane 0, which
// issues the bulk copies, stays out of the system fences so it never waits for them.
SY_DEVICE void publish_bulk_rows(const HtCommon& c, int64_t first, int count, const int32_t* row_home,
                                 const int32_t* row_token) {
    const uint32_t lane = ptx::lane_id();
    if (lane == 0) ptx::fence_proxy_async_global();  // the bulk writes before later generic ones
    __syncwarp();
    if (lane >= 1 && int(lane) <= count) {
        const int k = int((first + lane - 1) % kBulkInfoRing);
        // Every signalling lane fences after the warp barrier: cumulative over lane 0's view.
        ptx::fence_acq_rel_sys();
        ptx::red_add_relaxed_sys(c.layout.workspace.ht_combine_arrival(
                                     c.peer_bases[row_home[k]], row_token[k] / kHtCombineChunkTokens, c.rank),
                                 1ull);
    }
    __syncwarp();
}

// The sending warp of a block (all lanes). `row_offsets`: the per-source first rows (shared).
// `stages`: `num_stages` records of shared memory; `loaded`: one mbarrier per stage; `row_home`,
// `row_token`: kBulkInfoRing entries of shared memory; `window_weights`: 2 x 32 x 32 floats of it.
SY_DEVICE void send_rows_bulk(const HtCombineArgs& args, const int32_t* row_offsets, uint8_t* stages,
                              uint64_t* loaded, int32_t* row_home, int32_t* row_token, float* window_weights,
                              int num_stages) {
    const HtCommon& c = args.common;
    const uint32_t lane = ptx::lane_id();
    const RecordLayout& r = args.record;
    const int64_t senders = gridDim.x;
    const int32_t rows = row_offsets[c.num_ranks];
    // Rows whose home is this rank stay in y (the home reads them there): skipped.
    const int64_t own_first = row_offsets[c.rank], own_last = row_offsets[c.rank + 1];
    const int64_t sent_rows = rows - (own_last - own_first);
    const int64_t count =
        sent_rows > int64_t(blockIdx.x) ? (sent_rows - blockIdx.x + senders - 1) / senders : 0;
    // The block's i-th row (consecutive rows go to consecutive blocks: homes fill in token order).
    auto row_of = [&](int64_t i) {
        const int64_t item = int64_t(blockIdx.x) + i * senders;
        return item >= own_first ? item + (own_last - own_first) : item;
    };
    auto issue_load = [&](int64_t i) {  // lane 0
        const int s = int(i % num_stages);
        ptx::mbarrier_arrive_expect_tx(&loaded[s], uint32_t(r.payload_bytes));
        ptx::bulk_load(stages + int64_t(s) * ht_bulk_stage_bytes(r.total_bytes),
                       args.y + row_of(i) * args.y_row_stride_bytes, uint32_t(r.payload_bytes), &loaded[s]);
    };
    if (lane == 0) {
        for (int s = 0; s < num_stages; ++s) ptx::mbarrier_init(&loaded[s], 1);
        ptx::fence_mbarrier_init();
        for (int64_t i = 0; i < count && i < num_stages; ++i) issue_load(i);
    }
    __syncwarp();

    // Lane j of a window holds row (window * 32 + j)'s home, token and combine slot; the next
    // window's are loaded a window ahead, so their latency is paid once per 32 rows.
    struct RowInfo {
        int32_t home = 0, token = 0, slot = 0;
    };
    auto load_info = [&](int64_t window) {
        RowInfo info;
        const int64_t i = window * 32 + lane;
        if (i < count) {
            const int64_t row = row_of(i);
            while (info.home + 1 < c.num_ranks && row_offsets[info.home + 1] <= row) ++info.home;
            info.token = args.row_src_token[row];
            info.slot = args.row_combine_slot[row];
        }
        return info;
    };
    RowInfo current = load_info(0), next = load_info(1);
    // The weights of a window's rows (lane k < K: slot k) are copied into `window_weights` [2][32
    // rows][32] asynchronously a window ahead: a load per row would put one memory latency on every
    // row of this single warp.
    auto load_weights = [&](int64_t window) {
        float* into = window_weights + (window & 1) * 32 * 32;
        for (int j = 0; j < 32; ++j) {
            const int64_t i = window * 32 + j;
            if (i < count && int(lane) < c.topk && args.row_weights)
                ptx::cp_async_4(into + j * 32 + lane,
                                args.row_weights + row_of(i) * args.row_weights_stride + lane);
            else
                into[j * 32 + lane] = 0.0f;
        }
        ptx::cp_async_commit();
    };
    load_weights(0);
    int64_t published = 0;
    for (int64_t i = 0; i < count; ++i) {
        if (i % 32 == 0) {
            if (i > 0) {
                current = next;
                next = load_info(i / 32 + 1);
            }
            ptx::cp_async_wait_all();  // this window's weights (issued a window ago)
            __syncwarp();
            load_weights(i / 32 + 1);
        }
        const int s = int(i % num_stages);
        uint8_t* stage = stages + int64_t(s) * ht_bulk_stage_bytes(r.total_bytes);
        // The record's weights (and zero padding) behind the payload, then the loaded payload.
        float* meta = reinterpret_cast<float*>(stage + r.meta_offset);
        if (int64_t(lane) * 4 < r.total_bytes - r.meta_offset)
            meta[lane] = window_weights[((i / 32) & 1) * 32 * 32 + (i % 32) * 32 + lane];
        ptx::fence_proxy_async_shared();
        __syncwarp();
        const int home = __shfl_sync(0xffffffffu, current.home, int(i % 32));
        const int token = __shfl_sync(0xffffffffu, current.token, int(i % 32));
        const int slot = __shfl_sync(0xffffffffu, current.slot, int(i % 32));
        if (lane == 0) {
            while (!ptx::mbarrier_try_wait_parity(&loaded[s], uint32_t((i / num_stages) & 1))) {
            }
            row_home[i % kBulkInfoRing] = home;
            row_token[i % kBulkInfoRing] = token;
            uint8_t* destination = c.peer_bases[home] + c.layout.ht_combine_offset +
                                   (int64_t(slot) * c.max_tokens + token) * r.total_bytes;
            ptx::bulk_store(destination, stage, uint32_t(r.total_bytes));
            ptx::bulk_commit();
            // The store of row i - 1 has read its stage: reload that stage with row i - 1 + stages.
            if (i >= 1 && i - 1 + num_stages < count) {
                ptx::bulk_wait_read<1>();
                issue_load(i - 1 + num_stages);
            }
            // Rows up to i - kBulkPublishLag have landed at their homes.
            ptx::bulk_wait<kBulkPublishLag>();
        }
        __syncwarp();
        const int64_t landed = i + 1 - kBulkPublishLag;
        if (landed - published >= kBulkPublishGroup) {
            publish_bulk_rows(c, published, kBulkPublishGroup, row_home, row_token);
            published += kBulkPublishGroup;
        }
    }
    if (lane == 0) ptx::bulk_wait<0>();
    __syncwarp();
    while (published < count) {
        const int n = int(count - published < 31 ? count - published : 31);  // < kBulkInfoRing left
        publish_bulk_rows(c, published, n, row_home, row_token);
        published += n;
    }
}

}  // namespace ht_detail

#endif

}  // namespace switchyard::device
