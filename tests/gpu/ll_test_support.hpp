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
    std::vector<bool> absent;      // ranks treated as absent by the reference (masking)
    int contiguous_alignment = 0;  // > 0: the expert-major contiguous layout with this alignment
    bool zero_padding = false;     // contiguous layout: padding rows zeroed, and checked to be zero
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

// Every rank's inputs and the reference outputs (dispatch, then a weighted combine of y).
struct Scenario {
    Case c;
    int num_ranks = 1;
    reference::Problem problem;
    std::vector<reference::DispatchInput> inputs;                 // [R]
    reference::GlobalDispatch dispatched;                         // masked layout
    std::vector<reference::CombineInput> expert_outputs;          // [R]: y of every rank (masked layout)
    std::vector<reference::CombineHomeInput> home;                // [R]: combine weights
    std::vector<reference::CombineOutput> combined;               // [R]
    std::vector<reference::CombineOutput> combined_hierarchical;  // [R]: the hierarchical reduction
    // Contiguous cases: the reference dispatch in that layout (same routing and data; its padding
    // rows are zero) and every rank's y in it (valid rows as in the masked y, other values in
    // the rest, which the combine must not read).
    std::vector<reference::DispatchOutput> contiguous;  // [R]
    std::vector<std::vector<uint16_t>> contiguous_y;    // [R][capacity rows * H]

    int local_experts() const { return problem.local_experts(); }
    int64_t rows_per_expert() const { return int64_t(num_ranks) * c.max_tokens; }
    bool is_contiguous() const { return c.contiguous_alignment > 0; }
    // Rows of the GPU's dispatch output (and of the combine's y): [L, R*T_ll] masked, or the
    // contiguous capacity.
    int64_t output_rows() const {
        return is_contiguous() ? device::ll_contiguous_rows(num_ranks, c.max_tokens, c.topk, local_experts(),
                                                            c.contiguous_alignment)
                               : int64_t(local_experts()) * rows_per_expert();
    }
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

// The contiguous layout of the scenario's dispatch: the reference in that layout, and y moved from
// each valid masked row to its contiguous row (rows of both layouts are ordered by source, token).
inline void add_contiguous_layout(Scenario& sc, const reference::DispatchOptions& masked_options) {
    reference::DispatchOptions options = masked_options;
    options.layout = RecvLayout::kExpertContiguous;
    options.expert_alignment = sc.c.contiguous_alignment;
    options.zero_padding = sc.c.zero_padding;
    sc.contiguous = reference::dispatch(sc.problem, sc.inputs, options).outputs;
    const size_t H = sc.c.hidden;
    const int64_t y_rows = sc.output_rows();
    sc.contiguous_y.resize(sc.num_ranks);
    for (int q = 0; q < sc.num_ranks; ++q) {
        std::vector<uint16_t>& y = sc.contiguous_y[q];
        y.resize(size_t(y_rows) * H);
        for (size_t i = 0; i < y.size(); ++i) y[i] = test_value(sc.c.seed + 3, 7, i / H, int(i % H));
        const auto& offsets = sc.contiguous[q].expert_offsets;
        const auto& counts = sc.contiguous[q].num_tokens_per_expert;
        const auto& masked_y = sc.expert_outputs[q].y;
        for (int e = 0; e < sc.local_experts(); ++e)
            for (int64_t r = 0; r < counts[e]; ++r)
                std::memcpy(y.data() + size_t(offsets[e] + r) * H,
                            masked_y.data() + size_t(e * sc.rows_per_expert() + r) * H, sizeof(uint16_t) * H);
    }
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
    options.layout = RecvLayout::kExpertMasked;
    options.quantize = c.use_fp8;
    options.quantize_format = c.format;
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
    combine_options.hierarchical = true;  // the same weights, given to the dispatch
    sc.combined_hierarchical =
        reference::combine(sc.dispatched.routing, sc.expert_outputs, sc.home, combine_options);
    if (sc.is_contiguous()) add_contiguous_layout(sc, options);
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
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
        SY_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    return host;
}

template <typename T>
void upload(void* device, const std::vector<T>& host, cudaStream_t stream) {
    if (host.empty()) return;
    SY_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
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
          y(size_t(y_rows(cs, num_ranks)) * cs.hidden),
          c(cs),
          device(dev) {}

    // Rows of y: the masked [L, R*T_ll], or the contiguous capacity.
    static int64_t y_rows(const Case& cs, int num_ranks) {
        const int32_t L = cs.experts / num_ranks;
        return cs.contiguous_alignment > 0
                   ? device::ll_contiguous_rows(num_ranks, cs.max_tokens, cs.topk, L, cs.contiguous_alignment)
                   : int64_t(L) * num_ranks * cs.max_tokens;
    }

    void load(const Scenario& sc, int rank, cudaStream_t stream) {
        const auto& in = sc.inputs[rank];
        tokens = in.num_tokens;
        upload(x.data(), in.x_bf16, stream);
        upload(idx64.data(), in.topk_idx, stream);
        upload(idx32.data(), std::vector<int32_t>(in.topk_idx.begin(), in.topk_idx.end()), stream);
        upload(weights.data(), sc.home[rank].topk_weights, stream);
        upload(y.data(), sc.is_contiguous() ? sc.contiguous_y[rank] : sc.expert_outputs[rank].y, stream);
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
    // y in the dispatch's layout: [L, R*T_ll, H] masked, [capacity rows, H] contiguous.
    TensorView y_view(int num_ranks) const {
        if (c.contiguous_alignment > 0)
            return TensorView::contiguous(y.data(), DType::kBFloat16, {y_rows(c, num_ranks), c.hidden},
                                          Device::cuda(device));
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
        if (c.contiguous_alignment > 0) {
            args.layout = RecvLayout::kExpertContiguous;
            args.expert_alignment = c.contiguous_alignment;
            args.zero_padding = c.zero_padding;
        }
        return args;
    }
    LowLatencyCombineArgs combine_args(int num_ranks) const {
        LowLatencyCombineArgs args;
        args.y = y_view(num_ranks);
        args.topk_idx = idx_view();
        args.topk_weights = weights_view();
        return args;
    }
    // A hierarchical combine weights on the expert ranks with the weights the dispatch carried.
    LowLatencyDispatchArgs hierarchical_dispatch_args() const {
        LowLatencyDispatchArgs args = dispatch_args();
        args.topk_weights = weights_view();
        return args;
    }
    LowLatencyCombineArgs hierarchical_combine_args(int num_ranks) const {
        LowLatencyCombineArgs args = combine_args(num_ranks);
        args.topk_weights = TensorView();
        args.hierarchical = true;
        return args;
    }
};

// Scale words per row of the case's outputs (0 for bf16).
inline size_t expected_words(const Scenario& sc) {
    return sc.c.use_fp8 ? size_t(reference::num_scale_words(sc.c.hidden, sc.c.format)) : 0;
}

// Every byte of the dispatch's outputs (payload and scales) set to 0xff, the bits of an fp8 and
// an fp32 NaN: hook mode calls this between the send and the receive half, so rows the receive
// should write (valid rows, and padding rows with zero_padding) cannot pass by holding old values.
inline void poison_dispatch_outputs(const LowLatencyDispatchResult& result, cudaStream_t stream) {
    const TensorView& x = result.recv_x.view();
    if (x.numel() > 0)
        SY_CUDA_CHECK(cudaMemsetAsync(x.ptr(), 0xff, size_t(x.numel()) * x.element_size(), stream));
    const TensorView& scales = result.handle->recv_scales_storage.view();
    if (scales.defined() && scales.numel() > 0)
        SY_CUDA_CHECK(
            cudaMemsetAsync(scales.ptr(), 0xff, size_t(scales.numel()) * scales.element_size(), stream));
}

// The dispatch outputs of `rank` against the reference in the case's layout: counts and expert
// offsets exactly, valid rows and their scales bit for bit and, with zero_padding, the padding
// rows of the contiguous segments too (the reference's padding is zero). Without zero_padding the
// padding is not checked; rows past the reference's (the capacity's tail, rows past a masked
// expert's count) never are. The reference's row index is the GPU's in both layouts.
inline void check_dispatch(const Scenario& sc, int rank, const LowLatencyDispatchResult& result,
                           cudaStream_t stream, const std::string& what) {
    const bool contiguous = sc.is_contiguous();
    const auto& expected = contiguous ? sc.contiguous[rank] : sc.dispatched.outputs[rank];
    const int L = sc.local_experts(), H = sc.c.hidden;
    const auto counts = download<int32_t>(result.recv_count.view().ptr(), L, stream);
    for (int e = 0; e < L; ++e)
        SY_CHECK_MSG(counts[e] == expected.num_tokens_per_expert[e],
                     what << ": rank " << rank << " expert " << e << " count " << counts[e] << " expected "
                          << expected.num_tokens_per_expert[e]);
    const auto offsets = download<int32_t>(result.recv_expert_offsets.view().ptr(), L + 1, stream);
    SY_CHECK_MSG(std::equal(offsets.begin(), offsets.end(), expected.expert_offsets.begin()),
                 what << ": rank " << rank << " expert offsets differ (end " << offsets[L] << ", expected "
                      << expected.expert_offsets[L] << ")");
    // Column-major scales: word w of a row one column after word w - 1; masked per expert
    // [words][R*T_ll], contiguous [words][capacity rows].
    const int64_t out_rows = sc.output_rows(), rows = sc.rows_per_expert();
    const size_t words = expected_words(sc);
    auto scale_index = [&](int64_t row, size_t word) {
        return contiguous ? row + int64_t(word) * out_rows
                          : (row / rows) * int64_t(words) * rows + row % rows + int64_t(word) * rows;
    };
    const size_t element = sc.c.use_fp8 ? 1 : 2;
    const auto x = download<uint8_t>(result.recv_x.view().ptr(), size_t(out_rows) * H * element, stream);
    std::vector<uint32_t> scales;
    if (words) scales = download<uint32_t>(result.recv_scales.view().ptr(), size_t(out_rows) * words, stream);
    const uint8_t* want_x =
        sc.c.use_fp8 ? expected.x_fp8.data() : reinterpret_cast<const uint8_t*>(expected.x_bf16.data());
    for (int64_t row = 0; row < expected.num_rows; ++row) {
        const reference::RowSource& source = expected.sources[row];
        if (source.rank < 0 && !(contiguous && sc.c.zero_padding)) continue;
        const std::string where = source.rank >= 0 ? " (from rank " + std::to_string(source.rank) +
                                                         " token " + std::to_string(source.token) + ")"
                                                   : " (padding)";
        const uint8_t* got = x.data() + size_t(row) * H * element;
        const uint8_t* want = want_x + size_t(row) * H * element;
        if (std::memcmp(got, want, size_t(H) * element) != 0) {
            size_t first = 0;
            while (got[first] == want[first]) ++first;
            SY_CHECK_MSG(false, what << ": rank " << rank << " row " << row << where << " differs at byte "
                                     << first << ": " << int(got[first]) << " vs " << int(want[first]));
        }
        for (size_t w = 0; w < words; ++w)
            SY_CHECK_MSG(scales[scale_index(row, w)] == expected.scales[size_t(row) * words + w],
                         what << ": rank " << rank << " row " << row << where << " scale word " << w);
    }
}

inline void check_combine(const Scenario& sc, int rank, const DeviceTensor& out, cudaStream_t stream,
                          const std::string& what, bool hierarchical = false) {
    const auto& expected = (hierarchical ? sc.combined_hierarchical : sc.combined)[rank].out;
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
           (c.index_int64 ? " int64" : " int32") + (c.routing == Routing::kOneExpert ? " one-expert" : "") +
           (c.contiguous_alignment > 0 ? " contiguous/" + std::to_string(c.contiguous_alignment) : "") +
           (c.zero_padding ? " zero-padding" : "");
}

}  // namespace switchyard::testing::ll
