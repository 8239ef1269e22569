// Helpers of the LL GPU tests: all ranks' inputs built from one seed (so every rank can run the
// CPU reference itself), uploads, and comparisons of the LL outputs with the reference.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "core/ll_handle.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/ll/dispatch.cuh"
#include "switchyard/reference.hpp"

namespace switchyard::testing::ll {

enum class Routing { kRandom, kOneExpert };

struct Case {
    int hidden = 2048;
    int topk = 4;
    int experts = 32;
    int max_tokens = 32;      // T_ll of the buffer
    std::vector<int> tokens;  // per rank (cycled); empty = T_ll everywhere
    bool use_fp8 = true;
    ScaleFormat format = ScaleFormat::kFloat32;
    bool index_int64 = true;
    Routing routing = Routing::kRandom;
    int empty_slot_per_mille = 150;  // probability of a -1 slot
    uint64_t seed = 1;
    std::vector<bool> absent;  // ranks treated as absent by the reference (masking)
};

inline uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A bf16 value of varied magnitude per 128-channel block (some blocks all zero), from a hash.
inline uint16_t test_value(uint64_t seed, uint64_t a, uint64_t b, int channel) {
    const uint64_t h = mix(seed * 0x100000001b3ull ^ mix(a * 1000003 + b) ^ uint64_t(channel) * 0x51ed27);
    const int block = channel / 128;
    if ((a + b + block) % 13 == 5) return 0;
    const float unit = float(int64_t(h >> 40) - (int64_t(1) << 23)) / float(1 << 23);  // [-1, 1)
    const float scale = std::ldexp(1.0f, int((a + block) % 9) - 4);
    return reference::float_to_bf16(unit * scale);
}

inline reference::ScaleFormat to_reference(ScaleFormat format) {
    return format == ScaleFormat::kUE8M0 ? reference::ScaleFormat::kUE8M0
                                         : (format == ScaleFormat::kFloat32 ? reference::ScaleFormat::kFloat32
                                                                            : reference::ScaleFormat::kNone);
}

// Every rank's inputs and the reference outputs (dispatch, then a weighted combine of y).
struct Scenario {
    Case c;
    int num_ranks = 1;
    reference::Problem problem;
    std::vector<reference::DispatchInput> inputs;  // [R]
    reference::DispatchResult dispatched;
    std::vector<reference::CombineInput> expert_outputs;  // [R]: y of every rank (masked layout)
    std::vector<reference::CombineHomeInput> home;        // [R]: combine weights
    std::vector<reference::CombineOutput> combined;       // [R]

    int local_experts() const { return problem.local_experts(); }
    int64_t rows_per_expert() const { return int64_t(num_ranks) * c.max_tokens; }
};

inline std::vector<int64_t> make_routing(std::mt19937_64& rng, const Case& c, int tokens) {
    std::vector<int64_t> idx(size_t(tokens) * c.topk, -1);
    const int64_t favourite = int64_t(rng() % c.experts);
    for (int t = 0; t < tokens; ++t) {
        std::vector<int64_t> chosen;
        for (int k = 0; k < c.topk; ++k) {
            int64_t expert;
            if (c.routing == Routing::kOneExpert && k == 0) {
                expert = favourite;
            } else {
                if (int(rng() % 1000) < c.empty_slot_per_mille) continue;
                do expert = int64_t(rng() % c.experts);
                while (std::find(chosen.begin(), chosen.end(), expert) != chosen.end() ||
                       (c.routing == Routing::kOneExpert && expert == favourite));
            }
            chosen.push_back(expert);
            idx[size_t(t) * c.topk + k] = expert;
        }
    }
    return idx;
}

inline Scenario make_scenario(const Case& c, int num_ranks) {
    Scenario sc;
    sc.c = c;
    sc.num_ranks = num_ranks;
    sc.problem.num_ranks = num_ranks;
    sc.problem.num_experts = c.experts;
    sc.problem.hidden = c.hidden;
    sc.problem.topk = c.topk;
    sc.problem.max_tokens_per_rank = c.max_tokens;
    std::mt19937_64 rng(c.seed);
    sc.inputs.resize(num_ranks);
    for (int s = 0; s < num_ranks; ++s) {
        reference::DispatchInput& in = sc.inputs[s];
        in.num_tokens = c.tokens.empty() ? c.max_tokens : c.tokens[s % c.tokens.size()];
        in.payload = reference::Payload::kBF16;
        in.x_bf16.resize(size_t(in.num_tokens) * c.hidden);
        for (int t = 0; t < in.num_tokens; ++t)
            for (int h = 0; h < c.hidden; ++h)
                in.x_bf16[size_t(t) * c.hidden + h] = test_value(c.seed, s, t, h);
        in.topk_idx = make_routing(rng, c, in.num_tokens);
    }
    reference::DispatchOptions options;
    options.layout = reference::Layout::kExpertMasked;
    options.quantize = c.use_fp8;
    options.quantize_format = to_reference(c.format);
    options.absent_ranks = c.absent;
    sc.dispatched = reference::dispatch(sc.problem, sc.inputs, options);

    // Expert outputs y of every rank: values in every row (the kernel must ignore invalid rows).
    const int64_t rows = int64_t(sc.local_experts()) * sc.rows_per_expert();
    sc.expert_outputs.resize(num_ranks);
    sc.home.resize(num_ranks);
    for (int q = 0; q < num_ranks; ++q) {
        auto& y = sc.expert_outputs[q].y;
        y.resize(size_t(rows) * c.hidden);
        for (int64_t r = 0; r < rows; ++r)
            for (int h = 0; h < c.hidden; ++h)
                y[size_t(r) * c.hidden + h] = test_value(c.seed + 7, 100 + q, r, h);
        auto& w = sc.home[q].topk_weights;
        w.resize(size_t(sc.inputs[q].num_tokens) * c.topk);
        for (size_t i = 0; i < w.size(); ++i)
            w[i] = float(int64_t(mix(c.seed * 31 + q * 977 + i) % 2001) - 1000) / 997.0f;
    }
    reference::CombineOptions combine_options;
    combine_options.weighted = true;
    combine_options.absent_ranks = c.absent;
    sc.combined = reference::combine(sc.dispatched.routing, sc.expert_outputs, sc.home, combine_options);
    return sc;
}

inline BufferConfig ll_config(const Case& c, int max_experts = 64) {
    BufferConfig config;
    config.enable_high_throughput = false;
    config.enable_low_latency = true;
    config.ll_max_tokens_per_rank = c.max_tokens;
    config.max_hidden = std::max(c.hidden, 2048);
    config.max_topk = std::max(c.topk, 9);
    config.max_experts = std::max(c.experts, max_experts);
    config.timeout_seconds = 20;
    return config;
}

template <typename T>
std::vector<T> download(const void* device, size_t count, cudaStream_t stream) {
    std::vector<T> host(count);
    if (count) {
        // Drain the stream first, so that this pageable copy never waits behind a kernel that
        // waits for a co-located peer (while holding the driver's staging buffers).
        SY_CUDA_OK(cudaStreamSynchronize(stream));
        SY_CUDA_OK(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
        SY_CUDA_OK(cudaStreamSynchronize(stream));
    }
    return host;
}

template <typename T>
void upload(void* device, const std::vector<T>& host, cudaStream_t stream) {
    if (host.empty()) return;
    SY_CUDA_OK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    SY_CUDA_OK(cudaStreamSynchronize(stream));
}

// One rank's device inputs (allocated for the capacity, so new data can reuse them in a graph).
struct RankInputs {
    DeviceArray<uint16_t> x;
    DeviceArray<int64_t> idx64;
    DeviceArray<int32_t> idx32;
    DeviceArray<float> weights;
    DeviceArray<uint16_t> y;
    int tokens = 0;
    Case c;
    int device = 0;

    RankInputs(const Case& cs, int num_ranks, int dev)
        : x(size_t(cs.max_tokens) * cs.hidden + 8),
          idx64(size_t(cs.max_tokens) * cs.topk + 1),
          idx32(size_t(cs.max_tokens) * cs.topk + 1),
          weights(size_t(cs.max_tokens) * cs.topk + 1),
          y(size_t(cs.experts / num_ranks) * num_ranks * cs.max_tokens * cs.hidden),
          c(cs),
          device(dev) {}

    void load(const Scenario& sc, int rank, cudaStream_t stream) {
        const auto& in = sc.inputs[rank];
        tokens = in.num_tokens;
        upload(x.data(), in.x_bf16, stream);
        upload(idx64.data(), in.topk_idx, stream);
        upload(idx32.data(), std::vector<int32_t>(in.topk_idx.begin(), in.topk_idx.end()), stream);
        upload(weights.data(), sc.home[rank].topk_weights, stream);
        upload(y.data(), sc.expert_outputs[rank].y, stream);
    }
    TensorView x_view() const {
        return TensorView::contiguous(x.data(), DType::kBFloat16, {tokens, c.hidden}, Device::cuda(device));
    }
    TensorView idx_view() const {
        return c.index_int64 ? TensorView::contiguous(idx64.data(), DType::kInt64, {tokens, c.topk},
                                                      Device::cuda(device))
                             : TensorView::contiguous(idx32.data(), DType::kInt32, {tokens, c.topk},
                                                      Device::cuda(device));
    }
    TensorView weights_view() const {
        return TensorView::contiguous(weights.data(), DType::kFloat32, {tokens, c.topk},
                                      Device::cuda(device));
    }
    TensorView y_view(int num_ranks) const {
        const int64_t L = c.experts / num_ranks, rows = int64_t(num_ranks) * c.max_tokens;
        return TensorView::contiguous(y.data(), DType::kBFloat16, {L, rows, c.hidden}, Device::cuda(device));
    }
    LowLatencyDispatchArgs dispatch_args() const {
        LowLatencyDispatchArgs args;
        args.x = x_view();
        args.topk_idx = idx_view();
        args.num_experts = c.experts;
        args.use_fp8 = c.use_fp8;
        args.scale_format = c.format;
        return args;
    }
    LowLatencyCombineArgs combine_args(int num_ranks) const {
        LowLatencyCombineArgs args;
        args.y = y_view(num_ranks);
        args.topk_idx = idx_view();
        args.topk_weights = weights_view();
        return args;
    }
};

// Where each local expert's rows start in the output of `rank` (and, at [L], the rows used): e * R*T_ll
// in the masked layout (`contiguous_alignment` 0), else the prefix of the counts rounded up.
inline std::vector<int32_t> expected_expert_offsets(const Scenario& sc, int rank, int contiguous_alignment) {
    const auto& counts = sc.dispatched.outputs[rank].num_tokens_per_expert;
    const int L = sc.local_experts();
    std::vector<int32_t> offsets(L + 1, 0);
    for (int e = 0; e < L; ++e) {
        const int64_t rows = contiguous_alignment > 0 ? (counts[e] + contiguous_alignment - 1) /
                                                            contiguous_alignment * contiguous_alignment
                                                      : sc.rows_per_expert();
        offsets[e + 1] = int32_t(offsets[e] + rows);
    }
    return offsets;
}

// Rows of the contiguous output of a scenario's buffer (its capacity).
inline int64_t contiguous_rows(const Scenario& sc, int contiguous_alignment) {
    return device::ll_contiguous_rows(sc.num_ranks, sc.c.max_tokens, sc.c.topk, sc.local_experts(),
                                      contiguous_alignment);
}

// The dispatch outputs of `rank` against the reference: counts and expert offsets exactly, valid
// rows and scales bit for bit, in the masked or (`contiguous_alignment` > 0) contiguous layout.
inline void check_dispatch(const Scenario& sc, int rank, const LowLatencyDispatchResult& result,
                           cudaStream_t stream, const std::string& what, int contiguous_alignment = 0) {
    const auto& expected = sc.dispatched.outputs[rank];
    const int L = sc.local_experts(), H = sc.c.hidden;
    const int64_t rows = sc.rows_per_expert();
    const auto counts = download<int32_t>(result.recv_count.view().ptr(), L, stream);
    for (int e = 0; e < L; ++e)
        SY_CHECK_MSG(counts[e] == expected.num_tokens_per_expert[e],
                     what << ": rank " << rank << " expert " << e << " count " << counts[e] << " expected "
                          << expected.num_tokens_per_expert[e]);
    const auto offsets = download<int32_t>(result.recv_expert_offsets.view().ptr(), L + 1, stream);
    SY_CHECK_MSG(offsets == expected_expert_offsets(sc, rank, contiguous_alignment),
                 what << ": rank " << rank << " expert offsets differ (end " << offsets[L] << ")");
    // Output rows (capacity) and the stride between a row's scale words (column-major).
    const int64_t out_rows = contiguous_alignment > 0 ? contiguous_rows(sc, contiguous_alignment) : L * rows;
    const int64_t word_stride = contiguous_alignment > 0 ? out_rows : rows;
    const size_t element = sc.c.use_fp8 ? 1 : 2;
    const auto x = download<uint8_t>(result.recv_x.view().ptr(), size_t(out_rows) * H * element, stream);
    const size_t words = sc.c.use_fp8 ? reference::num_scale_words(H, to_reference(sc.c.format)) : 0;
    std::vector<uint32_t> scales;
    if (words) scales = download<uint32_t>(result.recv_scales.view().ptr(), size_t(out_rows) * words, stream);
    for (int e = 0; e < L; ++e) {
        for (int64_t r = 0; r < expected.num_tokens_per_expert[e]; ++r) {
            const int64_t row = e * rows + r;  // the reference's (masked) row
            const int64_t out_row = offsets[e] + r;
            // Scale word 0 of the row: masked [L][words][rows], contiguous [words][out_rows].
            const int64_t scale_base = contiguous_alignment > 0 ? out_row : int64_t(e) * words * rows + r;
            const uint8_t* got = x.data() + size_t(out_row) * H * element;
            const uint8_t* want =
                sc.c.use_fp8 ? expected.x_fp8.data() + size_t(row) * H
                             : reinterpret_cast<const uint8_t*>(expected.x_bf16.data() + size_t(row) * H);
            if (std::memcmp(got, want, size_t(H) * element) != 0) {
                size_t first = 0;
                while (got[first] == want[first]) ++first;
                SY_CHECK_MSG(false, what << ": rank " << rank << " expert " << e << " row " << r
                                         << " (from rank " << expected.sources[row].rank << " token "
                                         << expected.sources[row].token << ") differs at byte " << first
                                         << ": " << int(got[first]) << " vs " << int(want[first]));
            }
            for (size_t w = 0; w < words; ++w)
                SY_CHECK_MSG(
                    scales[scale_base + w * word_stride] == expected.scales[size_t(row) * words + w],
                    what << ": rank " << rank << " expert " << e << " row " << r << " scale word " << w);
        }
    }
}

inline void check_combine(const Scenario& sc, int rank, const DeviceTensor& out, cudaStream_t stream,
                          const std::string& what) {
    const auto& expected = sc.combined[rank].out;
    const auto got = download<uint16_t>(out.view().ptr(), expected.size(), stream);
    for (size_t i = 0; i < expected.size(); ++i)
        if (got[i] != expected[i])
            SY_CHECK_MSG(false, what << ": rank " << rank << " combine token " << i / sc.c.hidden
                                     << " channel " << i % sc.c.hidden << ": " << got[i] << " vs "
                                     << expected[i]);
}

inline std::string describe(const Case& c) {
    return "hidden " + std::to_string(c.hidden) + " top-" + std::to_string(c.topk) + " E " +
           std::to_string(c.experts) +
           (c.use_fp8 ? (c.format == ScaleFormat::kUE8M0 ? " fp8/ue8m0" : " fp8/fp32") : " bf16") +
           (c.index_int64 ? " int64" : " int32") + (c.routing == Routing::kOneExpert ? " one-expert" : "");
}

}  // namespace switchyard::testing::ll
