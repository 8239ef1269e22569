// What the hierarchical HT GPU tests (test_hier_ht.cpp) share: a case (shape, payload, layout,
// count mode), every rank's inputs built from one seed, their upload, and bit-exact comparisons of
// the device's dispatch and combine outputs with the CPU reference (reference::dispatch, and
// reference::combine with CombineOptions::num_nodes). A comparison that fails says which rank, op,
// row or token and channel differed, and how many did.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/network.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::testing::hier {

namespace ref = switchyard::reference;

enum class Payload { kBf16, kFp8Fp32, kFp8Ue8m0, kQuantizeFp32, kQuantizeUe8m0 };

struct Case {
    int hidden = 256, topk = 4, experts_per_rank = 4, max_tokens = 48;
    Payload payload = Payload::kBf16;
    RecvLayout layout = RecvLayout::kRankMajor;
    int alignment = 1;
    bool zero_padding = false;
    CountMode counts = CountMode::kHostSynced;
    bool weights = true;
    bool one_expert = false;  // every token to the last expert only
    int num_sms = 0;          // 0: the SM model's choice
    uint32_t seed = 1;

    bool fp8_input() const { return payload == Payload::kFp8Fp32 || payload == Payload::kFp8Ue8m0; }
    bool quantize() const { return payload == Payload::kQuantizeFp32 || payload == Payload::kQuantizeUe8m0; }
    ref::ScaleFormat scales() const {
        switch (payload) {
            case Payload::kFp8Fp32:
            case Payload::kQuantizeFp32:
                return ref::ScaleFormat::kFloat32;
            case Payload::kFp8Ue8m0:
            case Payload::kQuantizeUe8m0:
                return ref::ScaleFormat::kUE8M0;
            default:
                return ref::ScaleFormat::kNone;
        }
    }
    std::string name() const {
        static const char* layouts[] = {"rank-major", "expert-contiguous", "expert-masked"};
        static const char* payloads[] = {"bf16", "fp8/fp32", "fp8/ue8m0", "bf16->fp8/fp32", "bf16->fp8/ue8m0"};
        return std::string(layouts[int(layout)]) + " " + payloads[int(payload)] +
               (counts == CountMode::kHostSynced ? " host-synced" : " device-counts") +
               (one_expert ? " one-expert" : "") + " T" + std::to_string(max_tokens) +
               (num_sms ? " on " + std::to_string(num_sms) + " SM(s)" : "") + " seed " + std::to_string(seed);
    }
};

inline uint16_t random_bf16(std::mt19937& rng) {
    // Small values with few mantissa bits: sums expose order errors without overflowing.
    return ref::float_to_bf16(float(int(rng() % 2048) - 1024) / 256.0f);
}

inline ref::Problem make_problem(const Case& c, int ranks) {
    ref::Problem problem;
    problem.num_ranks = ranks;
    problem.num_experts = ranks * c.experts_per_rank;
    problem.hidden = c.hidden;
    problem.topk = c.topk;
    problem.max_tokens_per_rank = c.max_tokens;
    return problem;
}

// x (and scales) and the weights of `in` from `rng`: a dispatch's data apart from its routing.
inline void fill_data(const Case& c, ref::DispatchInput& in, std::mt19937& rng) {
    const int T = in.num_tokens, H = c.hidden, K = c.topk;
    if (!c.fp8_input()) {
        in.payload = ref::Payload::kBF16;
        in.x_bf16.resize(size_t(T) * H);
        for (auto& v : in.x_bf16) v = random_bf16(rng);
    } else {
        in.payload = ref::Payload::kFP8;
        in.scale_format = c.scales();
        const int words = ref::num_scale_words(H, c.scales());
        std::vector<uint16_t> row(size_t(H), 0);
        in.x_fp8.resize(size_t(T) * H);
        in.scales.resize(size_t(T) * words);
        for (int t = 0; t < T; ++t) {
            for (auto& v : row) v = random_bf16(rng);
            ref::quantize_token(row.data(), H, c.scales(), &in.x_fp8[size_t(t) * H], &in.scales[size_t(t) * words]);
        }
    }
    in.topk_weights.clear();
    if (c.weights) {
        in.topk_weights.resize(size_t(T) * K);
        for (auto& w : in.topk_weights) w = float(int(rng() % 64)) / 64.0f;
    }
}

// Every rank's inputs: uneven token counts (T_max, 0, 1, odd), empty slots, tokens routed nowhere.
inline std::vector<ref::DispatchInput> make_inputs(const Case& c, const ref::Problem& problem) {
    std::vector<ref::DispatchInput> inputs(size_t(problem.num_ranks));
    const int choices[] = {c.max_tokens, 0, 1, c.max_tokens - 5, 7, c.max_tokens - 1};
    for (int s = 0; s < problem.num_ranks; ++s) {
        std::mt19937 rng(c.seed * 1000003u + uint32_t(s));
        ref::DispatchInput& in = inputs[size_t(s)];
        in.num_tokens = std::max(0, choices[s % 6]);
        const int K = c.topk;
        in.topk_idx.assign(size_t(in.num_tokens) * K, -1);
        for (int t = 0; t < in.num_tokens; ++t) {
            if (t % 11 == 5) continue;  // routed nowhere
            std::vector<int64_t> chosen;
            for (int k = 0; k < K; ++k) {
                if (c.one_expert) {
                    in.topk_idx[size_t(t) * K + k] = k == 0 ? problem.num_experts - 1 : -1;
                    continue;
                }
                if (rng() % 6 == 0) continue;  // empty slot
                int64_t expert;
                do expert = int64_t(rng() % uint32_t(problem.num_experts));
                while (std::find(chosen.begin(), chosen.end(), expert) != chosen.end());
                chosen.push_back(expert);
                in.topk_idx[size_t(t) * K + k] = expert;
            }
        }
        fill_data(c, in, rng);
    }
    return inputs;
}

inline std::vector<ref::DispatchInput> with_new_data(const Case& c, std::vector<ref::DispatchInput> inputs) {
    for (size_t s = 0; s < inputs.size(); ++s) {
        std::mt19937 rng(c.seed * 7777u + uint32_t(s));
        fill_data(c, inputs[s], rng);
    }
    return inputs;
}

inline ref::DispatchOptions dispatch_options(const Case& c) {
    ref::DispatchOptions options;
    options.layout = c.layout;
    options.expert_alignment = c.alignment;
    options.zero_padding = c.zero_padding;
    options.quantize = c.quantize();
    options.quantize_format = c.scales() == ref::ScaleFormat::kUE8M0 ? ref::ScaleFormat::kUE8M0
                                                                      : ref::ScaleFormat::kFloat32;
    return options;
}

// One rank's inputs on the device (allocate between host barriers: it may synchronize).
struct RankData {
    harness::DeviceArray<uint8_t> x;
    harness::DeviceArray<uint32_t> scales;
    harness::DeviceArray<int64_t> idx;
    harness::DeviceArray<float> weights;
};

inline DispatchArgs upload(const Case& c, const ref::DispatchInput& in, int experts, RankData& data, int device) {
    const int T = in.num_tokens, H = c.hidden, K = c.topk;
    const Device dev = Device::cuda(device);
    DispatchArgs args;
    const bool fp8 = c.fp8_input();
    std::vector<uint8_t> x(size_t(T) * H * (fp8 ? 1 : 2) + 16, 0);
    std::memcpy(x.data(), fp8 ? static_cast<const void*>(in.x_fp8.data()) : static_cast<const void*>(in.x_bf16.data()),
                size_t(T) * H * (fp8 ? 1 : 2));
    data.x = harness::DeviceArray<uint8_t>(x);
    args.x = TensorView::contiguous(data.x.data(), fp8 ? DType::kFloat8E4M3 : DType::kBFloat16, {T, H}, dev);
    if (fp8) {
        const int words = ref::num_scale_words(H, c.scales());
        std::vector<uint32_t> scales(in.scales);
        scales.push_back(0);
        data.scales = harness::DeviceArray<uint32_t>(scales);
        args.x_scales = TensorView::contiguous(
            data.scales.data(), c.scales() == ref::ScaleFormat::kUE8M0 ? DType::kInt32 : DType::kFloat32, {T, words}, dev);
    }
    std::vector<int64_t> idx(in.topk_idx);
    idx.push_back(-1);
    data.idx = harness::DeviceArray<int64_t>(idx);
    args.topk_idx = TensorView::contiguous(data.idx.data(), DType::kInt64, {T, K}, dev);
    if (c.weights) {
        std::vector<float> weights(in.topk_weights);
        weights.push_back(0.0f);
        data.weights = harness::DeviceArray<float>(weights);
        args.topk_weights = TensorView::contiguous(data.weights.data(), DType::kFloat32, {T, K}, dev);
    }
    args.num_experts = experts;
    args.layout = c.layout;
    args.expert_alignment = c.alignment;
    args.zero_padding = c.zero_padding;
    args.quantize_fp8 = c.quantize();
    args.quantize_format = c.scales() == ref::ScaleFormat::kUE8M0 ? ScaleFormat::kUE8M0 : ScaleFormat::kFloat32;
    args.counts = c.counts;
    args.num_sms = c.num_sms;
    return args;
}

inline std::vector<uint8_t> download_rows(const TensorView& view, int64_t rows, int64_t row_bytes) {
    std::vector<uint8_t> out(size_t(std::max<int64_t>(rows, 0)) * size_t(row_bytes));
    const int64_t stride = (view.ndim == 3 ? view.strides[1] : view.strides[0]) * int64_t(view.element_size());
    if (rows > 0 && row_bytes > 0)
        SY_CUDA_CHECK(cudaMemcpy2D(out.data(), size_t(row_bytes), view.ptr(), size_t(stride), size_t(row_bytes),
                                   size_t(rows), cudaMemcpyDeviceToHost));
    return out;
}

// Rows of `got` (row_bytes each) against `want` where `checked(row)`: fails naming the first
// differing row and how many differ.
template <typename Checked>
void compare_rows(const std::string& what, const std::vector<uint8_t>& got, const uint8_t* want, int64_t rows,
                  int64_t row_bytes, Checked checked) {
    int64_t differing = 0, first = -1;
    for (int64_t row = 0; row < rows; ++row) {
        if (!checked(row)) continue;
        if (std::memcmp(&got[size_t(row * row_bytes)], want + row * row_bytes, size_t(row_bytes)) != 0) {
            if (first < 0) first = row;
            ++differing;
        }
    }
    SY_CHECK_MSG(differing == 0, what << ": " << differing << " of " << rows << " rows differ, first row " << first);
}

// This rank's dispatch result against the reference output, every output the layout has.
inline void check_dispatch(const std::string& what, const Case& c, const ref::DispatchOutput& expected,
                           const DispatchResult& result) {
    const int H = c.hidden, K = c.topk;
    const bool fp8 = expected.payload == ref::Payload::kFP8;
    const int64_t row_bytes = int64_t(H) * (fp8 ? 1 : 2);
    const int words = fp8 ? ref::num_scale_words(H, expected.scale_format) : 0;
    std::vector<int32_t> counts(expected.num_tokens_per_expert.size());
    SY_CUDA_CHECK(cudaMemcpy(counts.data(), result.num_recv_tokens_per_expert.view().ptr(), counts.size() * 4,
                             cudaMemcpyDeviceToHost));
    SY_CHECK_MSG(counts == expected.num_tokens_per_expert, what << ": per-expert counts differ");
    const int64_t rows = c.layout == RecvLayout::kExpertContiguous ? expected.expert_offsets.back() : expected.num_rows;
    int32_t device_rows = 0;
    SY_CUDA_CHECK(cudaMemcpy(&device_rows, result.num_recv_rows.view().ptr(), 4, cudaMemcpyDeviceToHost));
    if (c.layout != RecvLayout::kExpertMasked)
        SY_CHECK_MSG(device_rows == rows, what << ": " << device_rows << " rows received, the reference has " << rows);
    if (c.counts == CountMode::kHostSynced) {
        if (c.layout != RecvLayout::kExpertMasked) SY_CHECK_EQ(result.host_num_recv_rows, rows);
        SY_CHECK_MSG(result.host_num_recv_tokens_per_expert == expected.num_tokens_per_expert,
                     what << ": host-synced per-expert counts differ");
    }
    auto valid = [&](int64_t row) {
        return expected.sources[size_t(row)].rank >= 0 || (c.layout == RecvLayout::kExpertContiguous && c.zero_padding);
    };
    const uint8_t* want_x = fp8 ? expected.x_fp8.data() : reinterpret_cast<const uint8_t*>(expected.x_bf16.data());
    compare_rows(what + " payload", download_rows(result.recv_x.view(), rows, row_bytes), want_x, rows, row_bytes, valid);
    if (words)
        compare_rows(what + " scales", download_rows(result.recv_scales.view(), rows, words * 4),
                     reinterpret_cast<const uint8_t*>(expected.scales.data()), rows, words * 4, valid);
    if (c.layout == RecvLayout::kRankMajor) {
        compare_rows(what + " recv_topk_idx", download_rows(result.recv_topk_idx.view(), rows, K * 4),
                     reinterpret_cast<const uint8_t*>(expected.topk_idx.data()), rows, K * 4, valid);
        if (c.weights)
            compare_rows(what + " recv_topk_weights", download_rows(result.recv_topk_weights.view(), rows, K * 4),
                         reinterpret_cast<const uint8_t*>(expected.topk_weights.data()), rows, K * 4, valid);
    } else if (c.weights) {
        std::vector<uint8_t> got(size_t(rows) * 4);
        if (rows) SY_CUDA_CHECK(cudaMemcpy(got.data(), result.recv_topk_weights.view().ptr(), got.size(), cudaMemcpyDeviceToHost));
        compare_rows(what + " recv_topk_weights", got, reinterpret_cast<const uint8_t*>(expected.topk_weights.data()),
                     rows, 4, valid);
    }
}

// The network bytes this rank put since `before` (after Buffer::synchronize) against the
// prediction from the routing (predict_ht_network_bytes).
inline void check_network_bytes(const std::string& what, const NetworkStats& before, const NetworkStats& after,
                                const std::vector<uint64_t>& predicted) {
    SY_CHECK(after.accounted);
    for (size_t rank = 0; rank < predicted.size(); ++rank) {
        const uint64_t sent = after.bytes_to_rank[rank] - before.bytes_to_rank[rank];
        SY_CHECK_MSG(sent == predicted[rank], what << ": " << sent << " bytes to rank " << rank
                                                   << " over the network, predicted " << predicted[rank]);
    }
    SY_CHECK_MSG(after.invalid_requests == before.invalid_requests, what << ": the network refused requests");
}

}  // namespace switchyard::testing::hier
