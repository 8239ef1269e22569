// High-throughput dispatch and combine against the CPU reference, bit for bit, for EP 1/2/4/8 on
// one and two GPUs: every layout x payload x count mode, inputs with padded rows and column-major
// scales, cached dispatch (the same data, and new data with the same routing: the backward of
// combine), every combine mode, and the edge cases (T = 0, 1, odd, T_max; -1 slots; tokens routed
// nowhere; all tokens to one expert). Also: a peer that never arrives (a TimeoutError, then
// recovery after reset), the stream and event semantics (OpOrder, OpEvent), and op timelines.
//
// Every rank builds all ranks' inputs from one seed, runs the reference itself and compares its
// own outputs. Device memory is allocated and freed only between host barriers: with ranks as
// threads on one GPU, a device-synchronizing call while a peer's kernel waits would deadlock.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "common/gpu_harness.hpp"
#include "core/stream_pool.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard;
using namespace switchyard::testing;
namespace ref = switchyard::reference;

namespace {

constexpr auto kHostTimeout = std::chrono::seconds(60);

struct Case {
    int hidden = 256, topk = 4, experts_per_rank = 4, max_tokens = 48;
    ref::Payload payload = ref::Payload::kBF16;
    ref::ScaleFormat scales = ref::ScaleFormat::kNone;
    bool quantize = false;
    ref::ScaleFormat quantize_format = ref::ScaleFormat::kFloat32;
    RecvLayout layout = RecvLayout::kRankMajor;
    int alignment = 1;
    bool zero_padding = false;
    CountMode counts = CountMode::kHostSynced;
    bool weights = true;
    bool one_expert = false;
    bool strided = false;  // x, scales, ids and weights with padded rows (scales column-major)
    int num_sms = 0;       // 0: the SM model's choice
    uint32_t seed = 1;
    std::string name() const {
        static const char* layouts[] = {"rank-major", "expert-contiguous", "expert-masked"};
        std::string p = payload == ref::Payload::kBF16 ? (quantize ? "bf16->fp8" : "bf16") : "fp8";
        if (payload == ref::Payload::kFP8 || quantize)
            p += (payload == ref::Payload::kFP8 ? scales : quantize_format) == ref::ScaleFormat::kUE8M0
                     ? "/ue8m0"
                     : "/fp32";
        return std::string(layouts[int(layout)]) + " " + p +
               (counts == CountMode::kHostSynced ? " host" : " device") + " H" + std::to_string(hidden) +
               " K" + std::to_string(topk) +
               (num_sms > 0 ? " on " + std::to_string(num_sms) + " SM(s)" : "") + (strided ? " strided" : "");
    }
};

uint16_t random_bf16(std::mt19937& rng) {
    // Values in [-4, 4) with a few mantissa bits: sums stay exact enough to expose order errors.
    const float value = float(int(rng() % 2048) - 1024) / 256.0f;
    return ref::float_to_bf16(value);
}

// The reference's problem for a case on `ranks` ranks.
ref::Problem make_problem(const Case& c, int ranks) {
    ref::Problem problem;
    problem.num_ranks = ranks;
    problem.num_experts = ranks * c.experts_per_rank;
    problem.hidden = c.hidden;
    problem.topk = c.topk;
    problem.max_tokens_per_rank = c.max_tokens;
    return problem;
}

// x (and its scales) and the top-k weights of `in`, from `rng`: a dispatch's data apart from its
// routing (a cached dispatch sends new data with the same routing).
void fill_data(const Case& c, ref::DispatchInput& in, std::mt19937& rng) {
    const int T = in.num_tokens, H = c.hidden, K = c.topk;
    in.payload = c.payload;
    if (c.payload == ref::Payload::kBF16) {
        in.x_bf16.resize(size_t(T) * H);
        for (auto& v : in.x_bf16) v = random_bf16(rng);
    } else {
        in.scale_format = c.scales;
        std::vector<uint16_t> source(static_cast<size_t>(H), uint16_t(0));
        const int words = ref::num_scale_words(H, c.scales);
        in.x_fp8.resize(size_t(T) * H);
        in.scales.resize(size_t(T) * words);
        for (int t = 0; t < T; ++t) {
            for (auto& v : source) v = random_bf16(rng);
            ref::quantize_token(source.data(), H, c.scales, &in.x_fp8[size_t(t) * H],
                                &in.scales[size_t(t) * words]);
        }
    }
    in.topk_weights.clear();
    if (c.weights) {
        in.topk_weights.resize(size_t(T) * K);
        for (auto& w : in.topk_weights) w = float(int(rng() % 64)) / 64.0f;
    }
}

std::vector<ref::DispatchInput> make_inputs(const Case& c, const ref::Problem& problem) {
    std::vector<ref::DispatchInput> inputs(problem.num_ranks);
    for (int s = 0; s < problem.num_ranks; ++s) {
        std::mt19937 rng(c.seed * 1000003u + s);
        ref::DispatchInput& in = inputs[s];
        // Uneven counts: T_max, 0, 1, odd.
        const int choices[] = {c.max_tokens, 0, 1, c.max_tokens - 5, 7};
        in.num_tokens = problem.num_ranks == 1 ? c.max_tokens : choices[s % 5];
        const int T = in.num_tokens, K = c.topk;
        in.topk_idx.assign(size_t(T) * K, -1);
        for (int t = 0; t < T; ++t) {
            if (t % 11 == 5) continue;  // routed nowhere
            std::vector<int64_t> chosen;
            for (int k = 0; k < K; ++k) {
                if (c.one_expert) {
                    in.topk_idx[size_t(t) * K + k] = k == 0 ? problem.num_experts - 1 : -1;
                    continue;
                }
                if (rng() % 6 == 0) continue;  // empty slot
                int64_t expert;
                do expert = int64_t(rng() % problem.num_experts);
                while (std::find(chosen.begin(), chosen.end(), expert) != chosen.end());
                chosen.push_back(expert);
                in.topk_idx[size_t(t) * K + k] = expert;
            }
        }
        fill_data(c, in, rng);
    }
    return inputs;
}

// The same routing with new data (what a cached dispatch sends, e.g. the backward of combine).
std::vector<ref::DispatchInput> with_new_data(const Case& c, std::vector<ref::DispatchInput> inputs) {
    for (size_t s = 0; s < inputs.size(); ++s) {
        std::mt19937 rng(c.seed * 7777u + uint32_t(s));
        fill_data(c, inputs[s], rng);
    }
    return inputs;
}

template <typename T>
std::vector<T> download_rows(const TensorView& view, int64_t rows, int64_t columns) {
    std::vector<T> out(size_t(rows) * columns);
    if (rows > 0 && columns > 0)
        SY_CUDA_CHECK(cudaMemcpy2D(out.data(), sizeof(T) * columns, view.ptr(),
                                sizeof(T) * view.strides[0] * view.element_size() / sizeof(T),
                                sizeof(T) * columns, rows, cudaMemcpyDeviceToHost));
    return out;
}

std::vector<uint8_t> download_bytes(const TensorView& view, int64_t rows, int64_t row_bytes,
                                    int64_t stride_bytes) {
    std::vector<uint8_t> out(size_t(rows) * row_bytes);
    if (rows > 0)
        SY_CUDA_CHECK(cudaMemcpy2D(out.data(), row_bytes, view.ptr(), stride_bytes, row_bytes, rows,
                                cudaMemcpyDeviceToHost));
    return out;
}

struct RankData {
    DeviceArray<uint8_t> x;
    DeviceArray<uint32_t> scales;
    DeviceArray<int64_t> idx;
    DeviceArray<float> weights;
};

// `rows` rows of `row_bytes` each, laid out `stride_bytes` apart (plus 16 bytes of slack, so that
// no allocation is empty).
std::vector<uint8_t> padded_rows(const void* data, int64_t rows, int64_t row_bytes, int64_t stride_bytes) {
    std::vector<uint8_t> out(size_t(rows * stride_bytes) + 16, 0xab);
    for (int64_t r = 0; r < rows; ++r)
        std::memcpy(&out[size_t(r * stride_bytes)], static_cast<const uint8_t*>(data) + r * row_bytes,
                    size_t(row_bytes));
    return out;
}

DispatchArgs upload(const Case& c, const ref::DispatchInput& in, int experts, RankData& data, int device) {
    const int T = in.num_tokens, H = c.hidden, K = c.topk;
    DispatchArgs args;
    const Device dev = Device::cuda(device);
    // Strided: rows padded by 64 bytes (x; a multiple of 16 as bulk copies need), 3 ids and 2
    // weights; the scales column-major with 3 spare rows.
    const bool fp8 = c.payload != ref::Payload::kBF16;
    const int64_t x_row_bytes = int64_t(H) * (fp8 ? 1 : 2);
    const int64_t x_stride_bytes = x_row_bytes + (c.strided ? 64 : 0);
    const int64_t idx_stride = K + (c.strided ? 3 : 0), weight_stride = K + (c.strided ? 2 : 0);
    const DType x_dtype = fp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
    data.x = DeviceArray<uint8_t>(padded_rows(
        fp8 ? static_cast<const void*>(in.x_fp8.data()) : static_cast<const void*>(in.x_bf16.data()), T,
        x_row_bytes, x_stride_bytes));
    args.x = TensorView::strided(data.x.data(), x_dtype, {T, H}, {x_stride_bytes / (fp8 ? 1 : 2), 1}, dev);
    if (fp8) {
        const int words = ref::num_scale_words(H, c.scales);
        const DType scale_dtype = c.scales == ref::ScaleFormat::kUE8M0 ? DType::kInt32 : DType::kFloat32;
        if (c.strided) {
            const int64_t column = T + 3;
            std::vector<uint32_t> scales(size_t(column) * words + 1, 0u);
            for (int t = 0; t < T; ++t)
                for (int w = 0; w < words; ++w)
                    scales[size_t(w) * column + t] = in.scales[size_t(t) * words + w];
            data.scales = DeviceArray<uint32_t>(scales);
            args.x_scales =
                TensorView::strided(data.scales.data(), scale_dtype, {T, words}, {1, column}, dev);
        } else {
            std::vector<uint32_t> scales(in.scales);
            scales.resize(scales.size() + 1);
            data.scales = DeviceArray<uint32_t>(scales);
            args.x_scales = TensorView::contiguous(data.scales.data(), scale_dtype, {T, words}, dev);
        }
    }
    std::vector<int64_t> idx(size_t(T) * idx_stride + 1, -1);
    for (int t = 0; t < T; ++t)
        for (int k = 0; k < K; ++k) idx[size_t(t) * idx_stride + k] = in.topk_idx[size_t(t) * K + k];
    data.idx = DeviceArray<int64_t>(idx);
    args.topk_idx = TensorView::strided(data.idx.data(), DType::kInt64, {T, K}, {idx_stride, 1}, dev);
    if (c.weights) {
        std::vector<float> weights(size_t(T) * weight_stride + 1, -1.0f);
        for (int t = 0; t < T; ++t)
            for (int k = 0; k < K; ++k)
                weights[size_t(t) * weight_stride + k] = in.topk_weights[size_t(t) * K + k];
        data.weights = DeviceArray<float>(weights);
        args.topk_weights =
            TensorView::strided(data.weights.data(), DType::kFloat32, {T, K}, {weight_stride, 1}, dev);
    }
    args.num_experts = experts;
    args.layout = c.layout;
    args.expert_alignment = c.alignment;
    args.zero_padding = c.zero_padding;
    args.quantize_fp8 = c.quantize;
    args.quantize_format = c.quantize_format;
    args.counts = c.counts;
    args.num_sms = c.num_sms;
    return args;
}

// Compares this rank's dispatch result with the reference output, row by row.
void check_dispatch(const Case& c, const ref::DispatchOutput& expected, const DispatchResult& result,
                    int num_ranks) {
    const int H = c.hidden, K = c.topk;
    const bool fp8 = expected.payload == ref::Payload::kFP8;
    const int64_t row_bytes = int64_t(H) * (fp8 ? 1 : 2);
    const int words = fp8 ? ref::num_scale_words(H, expected.scale_format) : 0;
    std::vector<int32_t> counts(expected.num_tokens_per_expert.size());
    SY_CUDA_CHECK(cudaMemcpy(counts.data(), result.num_recv_tokens_per_expert.view().ptr(), counts.size() * 4,
                          cudaMemcpyDeviceToHost));
    SY_CHECK_MSG(counts == expected.num_tokens_per_expert, c.name() << ": per-expert counts differ");
    int32_t device_rows = 0;
    SY_CUDA_CHECK(cudaMemcpy(&device_rows, result.num_recv_rows.view().ptr(), 4, cudaMemcpyDeviceToHost));
    const int64_t rows = c.layout == RecvLayout::kRankMajor
                             ? expected.num_rows
                             : (c.layout == RecvLayout::kExpertContiguous ? expected.expert_offsets.back()
                                                                          : expected.num_rows);
    if (c.layout != RecvLayout::kExpertMasked)
        SY_CHECK_MSG(device_rows == rows, c.name() << ": rows " << device_rows << " vs " << rows);
    if (c.counts == CountMode::kHostSynced && c.layout != RecvLayout::kExpertMasked)
        SY_CHECK_EQ(result.host_num_recv_rows, rows);
    if (c.counts == CountMode::kHostSynced)
        SY_CHECK_MSG(result.host_num_recv_tokens_per_expert == expected.num_tokens_per_expert,
                     c.name() << ": host-synced per-expert counts differ");
    else
        SY_CHECK(result.host_num_recv_rows == -1 && result.host_num_recv_tokens_per_expert.empty());
    const TensorView& x = result.recv_x.view();
    const int64_t x_stride_bytes = (x.ndim == 3 ? x.strides[1] : x.strides[0]) * int64_t(x.element_size());
    const auto got_x = download_bytes(x, rows, row_bytes, x_stride_bytes);
    std::vector<uint8_t> got_scales;
    if (words) {
        const TensorView& s = result.recv_scales.view();
        got_scales = download_bytes(s, rows, words * 4, (s.ndim == 3 ? s.strides[1] : s.strides[0]) * 4);
    }
    const uint8_t* want_x =
        fp8 ? expected.x_fp8.data() : reinterpret_cast<const uint8_t*>(expected.x_bf16.data());
    int64_t checked_rows = 0;
    for (int64_t row = 0; row < rows; ++row) {
        const bool valid = expected.sources[row].rank >= 0;
        if (!valid && !(c.layout == RecvLayout::kExpertContiguous && c.zero_padding)) continue;
        ++checked_rows;
        SY_CHECK_MSG(std::memcmp(&got_x[row * row_bytes], want_x + row * row_bytes, row_bytes) == 0,
                     c.name() << ": payload of row " << row << " (source rank " << expected.sources[row].rank
                              << ", token " << expected.sources[row].token << ") differs");
        if (words)
            SY_CHECK_MSG(
                std::memcmp(&got_scales[row * words * 4], &expected.scales[row * words], words * 4) == 0,
                c.name() << ": scales of row " << row << " differ");
    }
    if (c.layout == RecvLayout::kRankMajor) {
        const auto got_idx = download_rows<int32_t>(result.recv_topk_idx.view(), rows, K);
        SY_CHECK_MSG(
            got_idx == std::vector<int32_t>(expected.topk_idx.begin(), expected.topk_idx.begin() + rows * K),
            c.name() << ": recv_topk_idx differs");
        if (c.weights) {
            const auto got_w = download_rows<float>(result.recv_topk_weights.view(), rows, K);
            SY_CHECK_MSG(std::memcmp(got_w.data(), expected.topk_weights.data(), got_w.size() * 4) == 0,
                         c.name() << ": recv_topk_weights differ");
        }
    } else if (c.weights) {
        std::vector<float> got_w(static_cast<size_t>(rows), 0.0f);
        if (rows)
            SY_CUDA_CHECK(cudaMemcpy(got_w.data(), result.recv_topk_weights.view().ptr(), rows * 4,
                                  cudaMemcpyDeviceToHost));
        for (int64_t row = 0; row < rows; ++row)
            if (expected.sources[row].rank >= 0 || c.zero_padding)
                SY_CHECK_MSG(std::memcmp(&got_w[row], &expected.topk_weights[row], 4) == 0,
                             c.name() << ": weight of row " << row << " differs");
    }
    (void)num_ranks;
    (void)checked_rows;
}

// y for rank q, row i: a deterministic bf16 pattern every rank can rebuild.
std::vector<uint16_t> make_y(int q, int64_t rows, int hidden, uint32_t seed) {
    std::vector<uint16_t> y(size_t(rows) * hidden);
    std::mt19937 rng(seed * 7919u + q);
    for (auto& v : y) v = random_bf16(rng);
    return y;
}

// A case's reference: every rank's inputs, the dispatch of them, and of new data with the same
// routing (what a cached dispatch sends, e.g. the backward of combine), and the combine inputs.
struct CaseReference {
    ref::Problem problem;
    std::vector<ref::DispatchInput> inputs, new_inputs;
    ref::GlobalDispatch expected, expected_new;
    std::vector<ref::CombineInput> combine_inputs;
};

CaseReference make_reference(const Case& c, int num_ranks) {
    CaseReference reference;
    reference.problem = make_problem(c, num_ranks);
    reference.inputs = make_inputs(c, reference.problem);
    ref::DispatchOptions options;
    options.layout = c.layout;
    options.expert_alignment = c.alignment;
    options.zero_padding = c.zero_padding;
    options.quantize = c.quantize;
    options.quantize_format = c.quantize_format;
    reference.expected = ref::dispatch(reference.problem, reference.inputs, options);
    reference.new_inputs = with_new_data(c, reference.inputs);
    reference.expected_new = ref::dispatch(reference.problem, reference.new_inputs, options);
    reference.combine_inputs.resize(num_ranks);
    for (int q = 0; q < num_ranks; ++q) {
        const auto& out_q = reference.expected.outputs[q];
        const int64_t rows_q =
            c.layout == RecvLayout::kExpertContiguous ? out_q.expert_offsets.back() : out_q.num_rows;
        ref::CombineInput& input = reference.combine_inputs[q];
        input.y = make_y(q, rows_q, c.hidden, c.seed);
        input.row_weights.resize(c.layout == RecvLayout::kRankMajor ? rows_q * c.topk : rows_q);
        std::mt19937 rng(c.seed * 31u + q);
        for (auto& w : input.row_weights) w = float(int(rng() % 100)) / 32.0f;
    }
    return reference;
}

// Rows of the dispatch output on this rank as the device sizes them (worst case in device mode).
int64_t device_rows_of(const Case& c, const ref::DispatchOutput& mine, int num_ranks) {
    const int L = c.experts_per_rank;
    const bool host = c.counts == CountMode::kHostSynced;
    if (c.layout == RecvLayout::kRankMajor) return host ? mine.num_rows : int64_t(num_ranks) * c.max_tokens;
    if (c.layout == RecvLayout::kExpertContiguous)
        return host
                   ? mine.expert_offsets.back()
                   : int64_t(num_ranks) * c.max_tokens * std::min(c.topk, L) + int64_t(L) * (c.alignment - 1);
    return mine.num_rows;  // masked: L * R * T_max either way
}

// This rank's combine inputs on the device, at the dispatch output's row positions (padding and
// unused rows zero), and two biases.
struct CombineData {
    DeviceArray<uint8_t> y;
    DeviceArray<float> row_weights;
    DeviceArray<uint8_t> bias;
};

CombineData upload_combine(const Case& c, const ref::CombineInput& input, int64_t device_rows, int rank,
                           int num_tokens) {
    std::vector<uint8_t> y_raw(size_t(std::max<int64_t>(device_rows, 1)) * c.hidden * 2, 0);
    std::memcpy(y_raw.data(), input.y.data(), input.y.size() * 2);
    const int64_t weight_columns = c.layout == RecvLayout::kRankMajor ? c.topk : 1;
    std::vector<float> rw(size_t(std::max<int64_t>(device_rows, 1)) * weight_columns, 0.0f);
    std::memcpy(rw.data(), input.row_weights.data(), input.row_weights.size() * 4);
    std::vector<uint16_t> bias(size_t(std::max(num_tokens, 1)) * c.hidden * 2);
    std::mt19937 bias_rng(c.seed + 17u * rank);
    for (auto& b : bias) b = random_bf16(bias_rng);
    std::vector<uint8_t> bias_raw(bias.size() * 2);
    std::memcpy(bias_raw.data(), bias.data(), bias_raw.size());
    return {DeviceArray<uint8_t>(y_raw), DeviceArray<float>(rw), DeviceArray<uint8_t>(bias_raw)};
}

struct CombineMode {
    bool weighted, hierarchical;
    int biases;
    bool home_weights = false;  // weights given to the combine on the home rank
};

std::vector<CombineMode> combine_modes(const Case& c) {
    if (c.layout == RecvLayout::kRankMajor) return {{false, false, 0}, {false, false, 2}};
    return {{false, false, 1}, {true, false, 0}, {false, true, 0}, {true, true, 2}, {true, false, 0, true}};
}

// The combine of `mode` on the device against the reference's, bit for bit.
void check_combine(RankEnv& env, Buffer& buffer, const Case& c, const CaseReference& reference,
                   const CombineData& data, const DispatchResult& dispatched, const DispatchArgs& new_args,
                   int64_t device_rows, const CombineMode& mode) {
    const int R = env.num_ranks, T = reference.inputs[env.rank].num_tokens;
    const Device dev = Device::cuda(env.device);
    CombineArgs combine;
    combine.y = TensorView::contiguous(data.y.data(), DType::kBFloat16, {device_rows, c.hidden}, dev);
    combine.row_weights =
        c.layout == RecvLayout::kRankMajor
            ? TensorView::contiguous(data.row_weights.data(), DType::kFloat32, {device_rows, c.topk}, dev)
            : TensorView::contiguous(data.row_weights.data(), DType::kFloat32, {device_rows}, dev);
    combine.weighted = mode.weighted;
    combine.hierarchical = mode.hierarchical;
    combine.num_sms = c.num_sms;
    // Home-rank weights: the new data's (not the ones the dispatch carried).
    if (mode.home_weights) combine.topk_weights = new_args.topk_weights;
    if (mode.biases >= 1)
        combine.bias0 = TensorView::contiguous(data.bias.data(), DType::kBFloat16, {T, c.hidden}, dev);
    if (mode.biases >= 2)
        combine.bias1 = TensorView::contiguous(data.bias.data() + size_t(std::max(T, 1)) * c.hidden * 2,
                                               DType::kBFloat16, {T, c.hidden}, dev);
    CombineResult combined = buffer.combine(combine, dispatched.handle, env.stream);
    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
    buffer.check_errors();

    std::vector<ref::CombineHomeInput> homes(R);
    for (int s = 0; s < R; ++s) {
        const int Ts = reference.inputs[s].num_tokens;
        std::vector<uint16_t> b(size_t(std::max(Ts, 1)) * c.hidden * 2);
        std::mt19937 rng(c.seed + 17u * s);
        for (auto& v : b) v = random_bf16(rng);
        if (mode.home_weights) homes[s].topk_weights = reference.new_inputs[s].topk_weights;
        if (mode.biases >= 1) homes[s].bias0.assign(b.begin(), b.begin() + size_t(Ts) * c.hidden);
        if (mode.biases >= 2)
            homes[s].bias1.assign(b.begin() + size_t(std::max(Ts, 1)) * c.hidden,
                                  b.begin() + size_t(std::max(Ts, 1)) * c.hidden + size_t(Ts) * c.hidden);
    }
    ref::CombineOptions combine_options;
    combine_options.weighted = mode.weighted;
    combine_options.hierarchical = mode.hierarchical;
    const auto want =
        ref::combine(reference.expected.routing, reference.combine_inputs, homes, combine_options);
    std::vector<uint16_t> got(size_t(T) * c.hidden);
    if (T)
        SY_CUDA_CHECK(cudaMemcpy(got.data(), combined.out.view().ptr(), got.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < got.size(); ++i)
        SY_CHECK_MSG(got[i] == want[env.rank].out[i],
                     c.name() << " combine (weighted " << mode.weighted << ", hierarchical "
                              << mode.hierarchical << ", biases " << mode.biases << ", home weights "
                              << mode.home_weights << "): token " << i / c.hidden << " channel "
                              << i % c.hidden << ": " << got[i] << " vs " << want[env.rank].out[i]);
    std::vector<float> got_w(size_t(T) * c.topk);
    if (T)
        SY_CUDA_CHECK(cudaMemcpy(got_w.data(), combined.combined_topk_weights.view().ptr(), got_w.size() * 4,
                              cudaMemcpyDeviceToHost));
    SY_CHECK_MSG(
        std::memcmp(got_w.data(), want[env.rank].combined_topk_weights.data(), got_w.size() * 4) == 0,
        c.name() << ": combined_topk_weights differ");
}

void run_case(RankEnv& env, Buffer& buffer, const Case& c) {
    const int R = env.num_ranks;
    const CaseReference reference = make_reference(c, R);
    const ref::DispatchOutput& mine = reference.expected.outputs[env.rank];
    const int64_t device_rows = device_rows_of(c, mine, R);
    const int T = reference.inputs[env.rank].num_tokens;

    env.communicator->barrier(kHostTimeout);
    {
        RankData data, new_data;
        DispatchArgs args =
            upload(c, reference.inputs[env.rank], reference.problem.num_experts, data, env.device);
        const DispatchArgs new_args =
            upload(c, reference.new_inputs[env.rank], reference.problem.num_experts, new_data, env.device);
        const CombineData combine_data =
            upload_combine(c, reference.combine_inputs[env.rank], device_rows, env.rank, T);
        // Kernels are loaded before any op of the case: with co-located ranks a load while a peer's
        // kernel waits for this rank stalls until the timeout (Buffer::ht_load_kernels).
        buffer.ht_load_kernels(args);
        env.communicator->barrier(kHostTimeout);  // all allocations done: no device syncs from here

        DispatchResult result = buffer.dispatch(args, env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        check_dispatch(c, mine, result, R);

        // Cached dispatch with the same data: byte-identical layout.
        DispatchResult cached = buffer.cached_dispatch(args, result.handle, env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        check_dispatch(c, mine, cached, R);
        DispatchResult cached_new = buffer.cached_dispatch(new_args, result.handle, env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        check_dispatch(c, reference.expected_new.outputs[env.rank], cached_new, R);

        for (const CombineMode& mode : combine_modes(c)) {
            if (mode.weighted && !c.weights) continue;
            check_combine(env, buffer, c, reference, combine_data, result, new_args, device_rows, mode);
        }
        env.communicator->barrier(kHostTimeout);
    }
    env.communicator->barrier(kHostTimeout);
}

BufferConfig ht_config(int max_tokens = 48) {
    BufferConfig config;
    config.max_tokens_per_rank = max_tokens;
    config.max_hidden = 512;
    config.max_topk = 8;
    config.max_experts = 64;
    config.timeout_seconds = 20;
    return config;
}

std::vector<Case> all_cases() {
    std::vector<Case> cases;
    uint32_t seed = 1;
    for (RecvLayout layout :
         {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous, RecvLayout::kExpertMasked}) {
        for (int payload = 0; payload < 5; ++payload) {
            for (CountMode counts : {CountMode::kHostSynced, CountMode::kDevice}) {
                Case c;
                c.layout = layout;
                c.counts = counts;
                c.seed = seed++;
                if (payload == 1) {
                    c.payload = ref::Payload::kFP8;
                    c.scales = ref::ScaleFormat::kFloat32;
                }
                if (payload == 2) {
                    c.payload = ref::Payload::kFP8;
                    c.scales = ref::ScaleFormat::kUE8M0;
                    c.hidden = 384;
                }
                if (payload == 3) {
                    c.quantize = true;
                    c.quantize_format = ref::ScaleFormat::kFloat32;
                }
                if (payload == 4) {
                    c.quantize = true;
                    c.quantize_format = ref::ScaleFormat::kUE8M0;
                    c.hidden = 640 - 128;
                }
                if (layout == RecvLayout::kExpertContiguous) {  // alignment 8 without zeroed padding too
                    c.alignment = payload % 2 ? 4 : (payload == 2 ? 8 : 1);
                    c.zero_padding = payload % 2 == 1;
                }
                if (payload == 0 && counts == CountMode::kDevice) c.weights = false;
                cases.push_back(c);
            }
        }
    }
    Case one;
    one.one_expert = true;
    one.seed = 999;
    cases.push_back(one);
    // Inputs with padded rows (x, ids, weights) and column-major scales, through every input path:
    // bf16 rows, fp8 rows with fp32 and UE8M0 scales, and quantization in the kernel.
    for (int variant = 0; variant < 4; ++variant) {
        Case c;
        c.strided = true;
        c.seed = 500 + variant;
        c.layout = RecvLayout(variant % 3);
        c.counts = variant % 2 ? CountMode::kHostSynced : CountMode::kDevice;
        if (variant == 1) c.payload = ref::Payload::kFP8, c.scales = ref::ScaleFormat::kFloat32;
        if (variant == 2) c.payload = ref::Payload::kFP8, c.scales = ref::ScaleFormat::kUE8M0, c.hidden = 384;
        if (variant == 3) c.quantize = true, c.quantize_format = ref::ScaleFormat::kUE8M0;
        if (c.layout == RecvLayout::kExpertContiguous) c.alignment = 4, c.zero_padding = true;
        cases.push_back(c);
    }
    return cases;
}

}  // namespace

SY_TEST(HighThroughput, MatchesReferenceAllConfigs) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, ht_config());
            int passed = 0;
            for (const Case& c : all_cases()) {
                run_case(env, buffer, c);
                ++passed;
            }
            buffer.synchronize();
            if (env.rank == 0)
                std::printf("  %s: %d dispatch/combine cases bit-exact\n", rc.name().c_str(), passed);
        });
    }
}

SY_TEST_MAIN()

// Many tokens on one SM: the dispatch's warps then send most tokens from chunks they claim at run
// time (WarpTokens), which the cases above, with few tokens per warp, never reach.
SY_TEST(HighThroughput, ManyTokensOnOneSm) {
    require_gpus(1);
    std::vector<Case> cases;
    for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous}) {
        Case c;
        c.max_tokens = 640;
        c.num_sms = 1;
        c.layout = layout;
        c.counts = CountMode::kDevice;
        c.seed = 4242 + int(layout);
        if (layout == RecvLayout::kExpertContiguous) {  // quantized in the kernel: no prefetch path
            c.quantize = true;
            c.alignment = 4;
            c.zero_padding = true;
        }
        cases.push_back(c);
    }
    for (const RankConfig& rc : standard_rank_configs()) {
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, ht_config(640));
            for (const Case& c : cases) run_case(env, buffer, c);
            buffer.synchronize();
            if (env.rank == 0)
                std::printf("  %s: %zu cases of 640 tokens on one SM bit-exact\n", rc.name().c_str(),
                            cases.size());
        });
    }
}

namespace {

// What the tests below share: a two-rank problem, the reference, and this rank's uploaded inputs.
struct TwoRankDispatch {
    Case c;
    ref::Problem problem;
    std::vector<ref::DispatchInput> inputs;
    ref::GlobalDispatch expected;
    RankData data;
    DispatchArgs args;
    TwoRankDispatch(const Case& the_case, const RankEnv& env)
        : c(the_case), problem(make_problem(c, env.num_ranks)), inputs(make_inputs(c, problem)) {
        ref::DispatchOptions options;
        options.layout = c.layout;
        expected = ref::dispatch(problem, inputs, options);
        args = upload(c, inputs[env.rank], problem.num_experts, data, env.device);
    }
    void check(const RankEnv& env, const DispatchResult& result) const {
        check_dispatch(c, expected.outputs[env.rank], result, env.num_ranks);
    }
};

int gpus_for_two_ranks() {
    return std::min(2, cuda_device_count());
}

}  // namespace

// DESIGN.md §8: a peer that never arrives is a TimeoutError that names this rank, the peer and the
// phase, within the timeout; after reset() on every rank the buffer works again. Dispatch (device
// counts, then host-synced: the call itself throws) and combine.
SY_TEST(HighThroughput, PeerThatNeverArrivesIsATimeoutError) {
    require_gpus(1);
    run_ranks(2, gpus_for_two_ranks(), [&](RankEnv& env) {
        BufferConfig config = ht_config();
        config.timeout_seconds = 1;
        Buffer buffer(env.communicator, env.device, config);
        Case c;
        c.counts = CountMode::kDevice;
        c.seed = 31;
        TwoRankDispatch setup(c, env);
        buffer.ht_load_kernels(setup.args);
        env.communicator->barrier(kHostTimeout);  // allocations done, kernels loaded

        const auto expect_timeout = [&](const std::function<void()>& op, const char* phase,
                                        const char* what) {
            const auto start = std::chrono::steady_clock::now();
            bool thrown = false;
            try {
                op();
            } catch (const TimeoutError& error) {
                thrown = true;
                SY_CHECK_MSG(error.rank() == 0 && error.peer() == 1 && error.phase() == phase,
                             what << ": TimeoutError names rank " << error.rank() << ", peer " << error.peer()
                                  << ", phase '" << error.phase() << "': " << error.what());
            }
            const double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            SY_CHECK_MSG(thrown, what << ": no TimeoutError");
            SY_CHECK_MSG(seconds < 5.0, what << ": the error came after " << seconds << " s (timeout 1 s)");
        };
        // Rank 1 sits out each op below, then both ranks reset and run a checked dispatch.
        const auto recover = [&](const char* what) {
            env.communicator->barrier(kHostTimeout);
            buffer.reset();
            DispatchResult result = buffer.dispatch(setup.args, env.stream);
            buffer.synchronize();
            setup.check(env, result);
            if (env.rank == 0) std::printf("  %s: TimeoutError, then a correct dispatch after reset\n", what);
            return result;
        };

        if (env.rank == 0)
            expect_timeout(
                [&] {
                    buffer.dispatch(setup.args, env.stream);
                    buffer.synchronize();
                },
                "high-throughput notify", "dispatch (device counts)");
        recover("dispatch (device counts)");

        DispatchArgs host_synced = setup.args;
        host_synced.counts = CountMode::kHostSynced;
        if (env.rank == 0)
            expect_timeout([&] { buffer.dispatch(host_synced, env.stream); }, "high-throughput notify",
                           "dispatch (host-synced counts)");
        DispatchResult dispatched = recover("dispatch (host-synced counts)");

        // Combine: both ranks dispatched above; only rank 0 combines.
        CombineArgs combine;
        combine.y = dispatched.recv_x.view();
        if (env.rank == 0)
            expect_timeout(
                [&] {
                    buffer.combine(combine, dispatched.handle, env.stream);
                    buffer.synchronize();
                },
                "high-throughput combine", "combine");
        recover("combine");
        buffer.synchronize();
    });
}

// DESIGN.md §2 "Streams": an op given OpOrder::after starts after that event, not after the
// caller's stream; an asynchronous op leaves the caller's stream free, and its `done` event says
// when it has finished. Margins of 300 ms make the checks independent of timing noise.
SY_TEST(HighThroughput, StreamAndEventOrdering) {
    require_gpus(1);
    run_ranks(2, gpus_for_two_ranks(), [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, ht_config());
        Case c;
        c.counts = CountMode::kDevice;
        c.seed = 41;
        TwoRankDispatch setup(c, env);
        const size_t x_bytes = setup.data.x.size();
        uint8_t* x_host = nullptr;
        SY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&x_host), x_bytes));
        const std::vector<uint8_t> x_bytes_now = setup.data.x.download();
        std::memcpy(x_host, x_bytes_now.data(), x_bytes);
        const cudaStream_t side = core::acquire_stream(env.device);
        cudaEvent_t x_ready = nullptr, probe = nullptr;
        SY_CUDA_CHECK(cudaEventCreateWithFlags(&x_ready, cudaEventDisableTiming));
        SY_CUDA_CHECK(cudaEventCreateWithFlags(&probe, cudaEventDisableTiming));
        // Combine input: every received row of the worst case, a fixed pattern.
        const int64_t rows = int64_t(env.num_ranks) * c.max_tokens;
        const DeviceArray<uint16_t> y(make_y(env.rank, rows, c.hidden, c.seed));
        const int T = setup.inputs[env.rank].num_tokens;
        buffer.ht_load_kernels(setup.args);
        env.communicator->barrier(kHostTimeout);  // allocations done and kernels loaded on every rank
        // Warm-up: nothing left to load or allocate before a timed step.
        DispatchResult warm = buffer.dispatch(setup.args, env.stream);
        buffer.synchronize();
        setup.check(env, warm);
        SY_CHECK(warm.done.valid() && warm.done.done());
        env.communicator->barrier(kHostTimeout);

        // 1. `after`: x is zeroed now and written back on a side stream 300 ms later; the op must
        //    read the data written back (it would read zeros if it followed the caller's stream).
        setup.data.x.fill_bytes(0);
        env.communicator->barrier(kHostTimeout);
        SY_CUDA_CHECK(cudaLaunchHostFunc(
            side, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }, nullptr));
        SY_CUDA_CHECK(cudaMemcpyAsync(setup.data.x.data(), x_host, x_bytes, cudaMemcpyHostToDevice, side));
        SY_CUDA_CHECK(cudaEventRecord(x_ready, side));
        DispatchArgs after_args = setup.args;
        after_args.order.after = x_ready;
        DispatchResult after = buffer.dispatch(after_args, env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));  // synchronous mode: the stream waited
        buffer.check_errors();
        setup.check(env, after);
        env.communicator->barrier(kHostTimeout);

        // 2. async: rank 1 starts its op 300 ms late, so rank 0's op waits for it; meanwhile rank
        //    0's stream must run on, and its op must not be done.
        if (env.rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        DispatchArgs async_args = setup.args;
        async_args.order.async = true;
        const auto start = std::chrono::steady_clock::now();
        DispatchResult async_result = buffer.dispatch(async_args, env.stream);
        if (env.rank == 0) {
            SY_CUDA_CHECK(cudaEventRecord(probe, env.stream));
            SY_CUDA_CHECK(cudaEventSynchronize(probe));
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
            SY_CHECK_MSG(ms < 200.0, "the caller's stream waited " << ms << " ms for an asynchronous op");
            SY_CHECK_MSG(!async_result.done.done(), "the op was done before its peer had started");
        }
        async_result.done.wait(env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        SY_CHECK(async_result.done.done());
        buffer.check_errors();
        setup.check(env, async_result);

        // 3. An asynchronous combine, waited for through its event, gives the synchronous one's bytes.
        CombineArgs combine;
        combine.y =
            TensorView::contiguous(y.data(), DType::kBFloat16, {rows, c.hidden}, Device::cuda(env.device));
        CombineResult sync_combined = buffer.combine(combine, async_result.handle, env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        std::vector<uint16_t> want(size_t(T) * c.hidden), got(size_t(T) * c.hidden);
        if (T)
            SY_CUDA_CHECK(cudaMemcpy(want.data(), sync_combined.out.view().ptr(), want.size() * 2,
                                  cudaMemcpyDeviceToHost));
        combine.order.async = true;
        CombineResult async_combined = buffer.combine(combine, async_result.handle, env.stream);
        async_combined.done.wait(env.stream);
        if (T)
            SY_CUDA_CHECK(cudaMemcpyAsync(got.data(), async_combined.out.view().ptr(), got.size() * 2,
                                       cudaMemcpyDeviceToHost, env.stream));
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        SY_CHECK_MSG(got == want, "the asynchronous combine's output differs from the synchronous one's");
        buffer.synchronize();
        env.communicator->barrier(kHostTimeout);
        if (env.rank == 0)
            std::printf("  EP2 on %d GPU(s): after-event, asynchronous dispatch and combine as specified\n",
                        gpus_for_two_ranks());
        cudaEventDestroy(x_ready);
        cudaEventDestroy(probe);
        core::release_stream(env.device, side);
        cudaFreeHost(x_host);
    });
}

// Op timelines (Buffer::set_op_tracing, Buffer::op_timeline): none while tracing is off; with it on,
// each op's latest timeline once, its marks reached in the order the protocol passes them.
SY_TEST(HighThroughput, OpTimelines) {
    require_gpus(1);
    run_ranks(2, gpus_for_two_ranks(), [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, ht_config());
        Case c;
        c.counts = CountMode::kDevice;
        c.seed = 43;
        TwoRankDispatch setup(c, env);
        const int64_t rows = int64_t(env.num_ranks) * c.max_tokens;
        const DeviceArray<uint16_t> y(make_y(env.rank, rows, c.hidden, c.seed));
        CombineArgs combine;
        combine.y =
            TensorView::contiguous(y.data(), DType::kBFloat16, {rows, c.hidden}, Device::cuda(env.device));
        buffer.ht_load_kernels(setup.args);
        env.communicator->barrier(kHostTimeout);  // allocations done and kernels loaded on every rank
        auto round = [&] {
            const DispatchResult dispatched = buffer.dispatch(setup.args, env.stream);
            const CombineResult combined = buffer.combine(combine, dispatched.handle, env.stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            buffer.check_errors();
            setup.check(env, dispatched);
        };
        round();
        SY_CHECK(buffer.op_timeline(OpTimelineKind::kHtDispatch).empty());
        SY_CHECK(buffer.op_timeline(OpTimelineKind::kHtCombine).empty());

        buffer.set_op_tracing(true);
        round();
        const OpTimeline dispatch = buffer.op_timeline(OpTimelineKind::kHtDispatch);
        const OpTimeline combined = buffer.op_timeline(OpTimelineKind::kHtCombine);
        SY_CHECK_EQ(dispatch.op, std::string("ht dispatch"));
        SY_CHECK_EQ(combined.op, std::string("ht combine"));
        auto reached = [&](const OpTimeline& timeline, const char* mark) {
            const double us = timeline.at(mark);
            SY_CHECK_MSG(!std::isnan(us) && us >= 0.0 && us < 1e6,
                         "rank " << env.rank << " " << timeline.op << ": mark '" << mark << "' at " << us);
            return us;
        };
        reached(dispatch, "routing end");  // the routing kernel may end after dispatch blocks began
        SY_CHECK(reached(dispatch, "counts in") <= reached(dispatch, "sent"));
        SY_CHECK(reached(dispatch, "sent") <= reached(dispatch, "end"));
        SY_CHECK(reached(combined, "entered") <= reached(combined, "senders done"));
        SY_CHECK(reached(combined, "senders done") <= reached(combined, "end"));
        // Taken once: nothing new until the next traced op.
        SY_CHECK(buffer.op_timeline(OpTimelineKind::kHtDispatch).empty());

        buffer.set_op_tracing(false);
        round();
        SY_CHECK(buffer.op_timeline(OpTimelineKind::kHtDispatch).empty());
        SY_CHECK(buffer.op_timeline(OpTimelineKind::kHtCombine).empty());
        env.communicator->barrier(kHostTimeout);
    });
}

// An expert id out of range on one rank's GPU (so no host check sees it), in the first of its three
// layout chunks: that rank's op ends with InvalidArgument naming the entry and announces its
// failure in the counts exchange, so its peer's op ends at once with a PeerFailedError naming it
// (not a TimeoutError after the timeout, and not later, with data never sent); then reset() and a
// correct dispatch. The id's chunk is not the one whose block announces: the routing kernel must
// carry "invalid" from chunk to chunk. The timeout is the default 100 s: the errors come in < 1 s.
SY_TEST(HighThroughput, InvalidExpertIdOnOneRankStopsTheOp) {
    require_gpus(1);
    run_ranks(2, gpus_for_two_ranks(), [&](RankEnv& env) {
        BufferConfig config = ht_config(640);
        config.timeout_seconds = 100;
        Buffer buffer(env.communicator, env.device, config);
        Case c;
        c.max_tokens = 640;
        c.counts = CountMode::kDevice;
        c.seed = 61;
        TwoRankDispatch setup(c, env);
        RankData bad_data;
        DispatchArgs bad_args = setup.args;
        if (env.rank == 0) {
            ref::DispatchInput bad = setup.inputs[0];
            bad.topk_idx[size_t(3) * c.topk + 1] = setup.problem.num_experts + 5;
            bad_args = upload(c, bad, setup.problem.num_experts, bad_data, env.device);
        }
        buffer.ht_load_kernels(setup.args);
        env.communicator->barrier(kHostTimeout);  // allocations done, kernels loaded

        std::string outcome = "no error";
        const auto start = std::chrono::steady_clock::now();
        try {
            buffer.dispatch(bad_args, env.stream);
            buffer.synchronize();
        } catch (const InvalidArgument& error) {
            outcome = std::string("InvalidArgument: ") + error.what();
        } catch (const PeerFailedError& error) {
            outcome =
                "PeerFailedError, peer " + std::to_string(error.peer()) + ", phase '" + error.phase() + "'";
        } catch (const TimeoutError& error) {
            outcome = std::string("TimeoutError: ") + error.what();
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        SY_CHECK_MSG(seconds < 1.0, "rank " << env.rank << ": the error came after " << seconds << " s");
        if (env.rank == 0)
            SY_CHECK_MSG(outcome.find("InvalidArgument: switchyard: rank 0: topk_idx[3][1] = " +
                                      std::to_string(setup.problem.num_experts + 5) + " is outside") == 0,
                         "rank 0 (the invalid id): " << outcome);
        else
            SY_CHECK_MSG(outcome == "PeerFailedError, peer 0, phase 'high-throughput notify'",
                         "rank 1: " << outcome);

        env.communicator->barrier(kHostTimeout);
        buffer.reset();
        DispatchResult result = buffer.dispatch(setup.args, env.stream);
        buffer.synchronize();
        setup.check(env, result);
        if (env.rank == 0)
            std::printf(
                "  EP2 on %d GPU(s): InvalidArgument on the rank with the bad id, PeerFailedError naming it "
                "on its peer (< 1 s, timeout 100 s), then a correct dispatch after reset\n",
                gpus_for_two_ranks());
    });
}
