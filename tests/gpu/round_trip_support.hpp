// A small HT and LL round trip checked against the CPU reference, for the tests of failures and
// recovery (test_fail_fast.cpp, test_process_death.cpp): every rank builds all ranks' inputs from
// one seed, uploads its own, runs a dispatch and a combine, and compares its outputs bit for bit.
// HT: rank-major bf16 rows and the unweighted combine of y = the received rows; LL: the masked
// layout with bf16 payload and the flat weighted combine. `absent` ranks (masking) send and
// receive nothing, as the reference's absent ranks.
#pragma once

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::testing::round_trip {

namespace ref = switchyard::reference;

struct Shape {
    int hidden = 256;
    int topk = 4;
    int experts = 12;  // a multiple of 1, 2, 3, 4 and 6 ranks: survivors can rebuild
    int max_tokens = 32;
    uint32_t seed = 1;
};

inline BufferConfig config_for(const Shape& shape, double timeout_seconds) {
    BufferConfig config;
    config.max_tokens_per_rank = shape.max_tokens;
    config.max_hidden = shape.hidden;
    config.max_topk = shape.topk;
    config.max_experts = shape.experts;
    config.enable_low_latency = true;
    config.ll_max_tokens_per_rank = shape.max_tokens;
    config.timeout_seconds = timeout_seconds;
    return config;
}

// Every rank's inputs: bf16 rows of small values (sums stay exact), distinct experts per token,
// some slots empty, weights of a few bits.
inline std::vector<ref::DispatchInput> make_inputs(const Shape& shape, int ranks) {
    std::vector<ref::DispatchInput> inputs(ranks);
    for (int s = 0; s < ranks; ++s) {
        std::mt19937 rng(shape.seed * 7919u + uint32_t(s));
        ref::DispatchInput& in = inputs[s];
        in.num_tokens = s == 1 ? 1 : shape.max_tokens - s;
        in.x_bf16.resize(size_t(in.num_tokens) * shape.hidden);
        for (auto& v : in.x_bf16) v = ref::float_to_bf16(float(int(rng() % 16) - 8) / 8.0f);
        std::vector<int64_t> experts(shape.experts);
        for (int e = 0; e < shape.experts; ++e) experts[e] = e;
        for (int t = 0; t < in.num_tokens; ++t) {
            std::shuffle(experts.begin(), experts.end(), rng);
            for (int k = 0; k < shape.topk; ++k) in.topk_idx.push_back(rng() % 5 == 0 ? -1 : experts[k]);
        }
        for (size_t i = 0; i < in.topk_idx.size(); ++i)
            in.topk_weights.push_back(float(int(rng() % 8)) / 8.0f);
    }
    return inputs;
}

// One rank's inputs on its GPU.
struct DeviceInputs {
    DeviceArray<uint16_t> x;
    DeviceArray<int64_t> idx;
    DeviceArray<float> weights;
    int tokens = 0, hidden = 0, topk = 0, device = 0;

    DeviceInputs(const ref::DispatchInput& in, const Shape& shape, int device_)
        : x(std::max<size_t>(in.x_bf16.size(), 1)),
          idx(std::max<size_t>(in.topk_idx.size(), 1)),
          weights(std::max<size_t>(in.topk_weights.size(), 1)),
          tokens(in.num_tokens),
          hidden(shape.hidden),
          topk(shape.topk),
          device(device_) {
        if (!in.x_bf16.empty()) x.upload(in.x_bf16);
        if (!in.topk_idx.empty()) idx.upload(in.topk_idx);
        if (!in.topk_weights.empty()) weights.upload(in.topk_weights);
    }
    TensorView x_view() const {
        return TensorView::contiguous(x.data(), DType::kBFloat16, {tokens, hidden}, Device::cuda(device));
    }
    TensorView idx_view() const {
        return TensorView::contiguous(idx.data(), DType::kInt64, {tokens, topk}, Device::cuda(device));
    }
    TensorView weights_view() const {
        return TensorView::contiguous(weights.data(), DType::kFloat32, {tokens, topk}, Device::cuda(device));
    }
    // `layout` other than rank-major: the dispatch also carries the top-k weights (for the
    // weighted expert-major combines).
    DispatchArgs ht_args(int experts, CountMode counts = CountMode::kDevice,
                         RecvLayout layout = RecvLayout::kRankMajor) const {
        DispatchArgs args;
        args.x = x_view();
        args.topk_idx = idx_view();
        args.num_experts = experts;
        args.counts = counts;
        args.layout = layout;
        if (layout != RecvLayout::kRankMajor) args.topk_weights = weights_view();
        return args;
    }
    LowLatencyDispatchArgs ll_args(int experts) const {
        LowLatencyDispatchArgs args;
        args.x = x_view();
        args.topk_idx = idx_view();
        args.num_experts = experts;
        args.use_fp8 = false;
        return args;
    }
};

inline ref::Problem problem_of(const Shape& shape, int ranks) {
    return ref::Problem{ranks, shape.experts, shape.hidden, shape.topk, shape.max_tokens};
}

// Copies `rows` rows of `row_bytes` from a (strided) device view.
inline std::vector<uint8_t> download_rows(const TensorView& view, int64_t rows, int64_t row_bytes) {
    std::vector<uint8_t> out(size_t(rows * row_bytes));
    if (rows == 0) return out;
    const int64_t pitch = view.strides[view.ndim - 2] * int64_t(view.element_size());
    SY_CUDA_CHECK(cudaMemcpy2D(out.data(), size_t(row_bytes), view.ptr(), size_t(pitch), size_t(row_bytes),
                               size_t(rows), cudaMemcpyDeviceToHost));
    return out;
}

// How an HT round trip runs: the dispatch's layout (expert-contiguous with alignment 1), and for
// expert-major layouts the combine's reduction (weighted with the dispatch's weights; per
// receiving rank first).
struct HtForm {
    RecvLayout layout = RecvLayout::kRankMajor;
    bool weighted = false;
    bool hierarchical = false;
};

// An HT dispatch of make_inputs on this rank's uploaded `device` inputs, checked against the
// reference with `absent` ranks absent (HT masking: they do not call it); the combine of its
// received rows is ht_combine_checked.
struct HtRound {
    std::vector<ref::DispatchInput> inputs;
    ref::GlobalDispatch expected;
    DispatchResult result;
    HtForm form;
};

inline HtRound ht_dispatch_checked(Buffer& buffer, RankEnv& env, const Shape& shape, const std::string& what,
                                   const DeviceInputs& device, CountMode counts = CountMode::kDevice,
                                   const std::vector<bool>& absent = {}, HtForm form = {}) {
    const int R = buffer.num_ranks(), rank = buffer.rank();
    HtRound round;
    round.form = form;
    round.inputs = make_inputs(shape, R);
    ref::DispatchOptions options;
    options.absent_ranks = absent;
    options.layout = form.layout;
    round.expected = ref::dispatch(problem_of(shape, R), round.inputs, options);
    round.result = buffer.dispatch(device.ht_args(shape.experts, counts, form.layout), env.stream);
    buffer.synchronize();
    const ref::DispatchOutput& mine = round.expected.outputs[rank];
    const auto rows = download_rows(round.result.recv_x.view(), mine.num_rows, int64_t(shape.hidden) * 2);
    SY_CHECK_MSG(std::equal(rows.begin(), rows.end(), reinterpret_cast<const uint8_t*>(mine.x_bf16.data())),
                 what << ": rank " << rank << "'s received rows differ from the reference");
    return round;
}

// The combine of y = the dispatch's received rows (rank-major: unweighted sums over the ranks in
// order; expert-major: the round's form), checked against the reference with `absent` ranks absent
// from the combine (those of the dispatch stay absent).
inline void ht_combine_checked(Buffer& buffer, RankEnv& env, const Shape& shape, const std::string& what,
                               const HtRound& round, const std::vector<bool>& absent = {}) {
    const int R = buffer.num_ranks(), rank = buffer.rank();
    CombineArgs combine;
    combine.y = round.result.recv_x.view();  // (device counts: the worst case's rows)
    combine.weighted = round.form.weighted;
    combine.hierarchical = round.form.hierarchical;
    CombineResult combined = buffer.combine(combine, round.result.handle, env.stream);
    buffer.synchronize();
    std::vector<ref::CombineInput> y(R);
    for (int q = 0; q < R; ++q) y[q].y = round.expected.outputs[q].x_bf16;
    ref::CombineOptions options;
    options.absent_ranks = absent;
    options.weighted = round.form.weighted;
    options.hierarchical = round.form.hierarchical;
    const auto want = ref::combine(round.expected.routing, y, std::vector<ref::CombineHomeInput>(R), options);
    const auto got =
        download_rows(combined.out.view(), round.inputs[rank].num_tokens, int64_t(shape.hidden) * 2);
    SY_CHECK_MSG(std::equal(got.begin(), got.end(), reinterpret_cast<const uint8_t*>(want[rank].out.data())),
                 what << ": rank " << rank << "'s combine differs from the reference");
}

// An HT dispatch and the combine of its received rows, checked (ht_dispatch_checked,
// ht_combine_checked), between barriers.
inline void ht_round_trip(Buffer& buffer, RankEnv& env, const Shape& shape, const std::string& what,
                          CountMode counts = CountMode::kDevice) {
    const auto inputs = make_inputs(shape, buffer.num_ranks());
    {  // (device memory freed before the closing barrier: DESIGN.md §4, rule 2)
        DeviceInputs device(inputs[buffer.rank()], shape, env.device);
        env.communicator->barrier(std::chrono::seconds(60));  // allocations before any rank's op
        const HtRound round = ht_dispatch_checked(buffer, env, shape, what, device, counts);
        ht_combine_checked(buffer, env, shape, what, round);
    }
    env.communicator->barrier(std::chrono::seconds(60));  // no rank's next op before every free
}

// An LL dispatch (bf16, masked) and its flat weighted combine of y = the received rows, checked
// against the reference with `absent` ranks (masked ones) absent. Ranks in `absent` do not call it.
// With `inputs_here` (this rank's make_inputs, uploaded earlier) it allocates nothing and meets no
// peer on the host: for ranks whose communicator lost a peer, where an allocation could wait for a
// peer's kernel that waits (until it masks this rank) for this one.
inline void ll_round_trip(Buffer& buffer, RankEnv& env, const Shape& shape, const std::string& what,
                          const std::vector<bool>& absent = {}, const DeviceInputs* inputs_here = nullptr) {
    const int R = buffer.num_ranks(), rank = buffer.rank();
    const bool barriers = inputs_here == nullptr;
    const ref::Problem problem = problem_of(shape, R);
    const auto inputs = make_inputs(shape, R);
    ref::DispatchOptions options;
    options.layout = RecvLayout::kExpertMasked;
    options.absent_ranks = absent;
    const ref::GlobalDispatch expected = ref::dispatch(problem, inputs, options);
    {  // (device memory freed before the closing barrier)
        std::unique_ptr<DeviceInputs> allocated;
        if (!inputs_here) allocated = std::make_unique<DeviceInputs>(inputs[rank], shape, env.device);
        const DeviceInputs& device = inputs_here ? *inputs_here : *allocated;
        if (barriers) env.communicator->barrier(std::chrono::seconds(60));
        LowLatencyDispatchResult result = buffer.ll_dispatch(device.ll_args(shape.experts), env.stream);
        LowLatencyCombineArgs combine;
        combine.y = result.recv_x.view();
        combine.topk_idx = device.idx_view();
        combine.topk_weights = device.weights_view();
        LowLatencyCombineResult combined = buffer.ll_combine(combine, result.handle, env.stream);
        buffer.synchronize();
        const ref::DispatchOutput& mine = expected.outputs[rank];
        const int64_t row_bytes = int64_t(shape.hidden) * 2, L = problem.local_experts();
        const int64_t per_expert = int64_t(R) * shape.max_tokens;
        std::vector<int32_t> counts(static_cast<size_t>(L), 0);
        SY_CUDA_CHECK(
            cudaMemcpy(counts.data(), result.recv_count.view().ptr(), 4 * L, cudaMemcpyDeviceToHost));
        SY_CHECK_MSG(counts == mine.num_tokens_per_expert,
                     what << ": rank " << rank << "'s expert counts differ");
        for (int64_t e = 0; e < L; ++e) {
            TensorView rows_of_e = result.recv_x.view();
            rows_of_e.data = static_cast<uint8_t*>(rows_of_e.ptr()) + e * per_expert * row_bytes;
            rows_of_e.byte_offset = 0;
            const auto got = download_rows(rows_of_e, counts[e], row_bytes);
            const uint8_t* want =
                reinterpret_cast<const uint8_t*>(mine.x_bf16.data()) + e * per_expert * row_bytes;
            SY_CHECK_MSG(std::equal(got.begin(), got.end(), want),
                         what << ": rank " << rank << " expert " << e << "'s rows differ");
        }
        std::vector<ref::CombineInput> y(R);
        for (int q = 0; q < R; ++q) y[q].y = expected.outputs[q].x_bf16;
        ref::CombineOptions combine_options;
        combine_options.weighted = true;
        combine_options.absent_ranks = absent;
        const auto want =
            ref::combine(expected.routing, y, std::vector<ref::CombineHomeInput>(R), combine_options);
        const auto got = download_rows(combined.out.view(), inputs[rank].num_tokens, row_bytes);
        SY_CHECK_MSG(
            std::equal(got.begin(), got.end(), reinterpret_cast<const uint8_t*>(want[rank].out.data())),
            what << ": rank " << rank << "'s LL combine differs from the reference");
    }
    if (barriers) env.communicator->barrier(std::chrono::seconds(60));
}

}  // namespace switchyard::testing::round_trip
