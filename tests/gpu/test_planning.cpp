// The planning API (switchyard/planning.hpp) against real ops: the bytes a Buffer takes, and every
// tensor an HT and an LL dispatch return (dtype, shape, strides) and the combine's y and out, as
// ht_output_shapes / ll_output_shapes predict them, in every layout and count mode. The kernels
// come from ht_load_kernels / ll_load_kernels with shapes alone, called once for the process
// before the co-located ranks' first op (a kernel the shape-only load missed would stall a rank
// on its first op while its peer waits: the short timeout turns that into a failure). Also: the
// masked y accepted in its 3-D and flattened 2-D forms by HT and LL alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/planning.hpp"

using namespace switchyard;
using namespace switchyard::testing;

namespace {

constexpr auto kHostTimeout = std::chrono::seconds(60);
constexpr int kRanks = 2, kTokens = 24, kHidden = 512, kTopk = 4, kExperts = 8;

void check_spec(const TensorSpec& spec, const DeviceTensor& tensor, const std::string& what) {
    if (!spec.defined()) {
        SY_CHECK_MSG(!tensor.defined(), what << ": the op returned a tensor the plan does not have: "
                                             << tensor.view().describe());
        return;
    }
    SY_CHECK_MSG(tensor.defined(), what << ": the op returned no tensor");
    const TensorView& view = tensor.view();
    bool same = view.dtype == spec.dtype && view.ndim == spec.ndim;
    for (int d = 0; same && d < spec.ndim; ++d)
        same = view.shape[d] == spec.shape[d] && (view.shape[d] <= 1 || view.strides[d] == spec.strides[d]);
    std::string planned = std::string(dtype_name(spec.dtype)) + "[";
    for (int d = 0; d < spec.ndim; ++d)
        planned += std::to_string(spec.shape[d]) + (d + 1 < spec.ndim ? ", " : "] strides [");
    for (int d = 0; d < spec.ndim; ++d) planned += std::to_string(spec.strides[d]) + (d + 1 < spec.ndim ? ", " : "]");
    SY_CHECK_MSG(same, what << ": op returned " << view.describe() << ", plan says " << planned);
}

BufferConfig config_for_test() {
    BufferConfig config;
    config.max_tokens_per_rank = 32;
    config.max_hidden = kHidden;
    config.max_topk = kTopk;
    config.max_experts = kExperts;
    config.enable_low_latency = true;
    config.ll_max_tokens_per_rank = 32;
    config.timeout_seconds = 20;  // a kernel left to load at the first op shows as a timeout
    return config;
}

// One rank's inputs: bf16 rows of ones, distinct experts per token (some slots empty), weights.
struct Inputs {
    DeviceArray<uint16_t> x;
    DeviceArray<int64_t> idx;
    DeviceArray<float> weights;
    Inputs(int rank) : x(size_t(kTokens) * kHidden), idx(size_t(kTokens) * kTopk), weights(size_t(kTokens) * kTopk) {
        std::mt19937 rng(100 + rank);
        std::vector<int64_t> ids;
        for (int t = 0; t < kTokens; ++t) {
            std::vector<int64_t> experts = {0, 1, 2, 3, 4, 5, 6, 7};
            std::shuffle(experts.begin(), experts.end(), rng);
            for (int k = 0; k < kTopk; ++k) ids.push_back(rng() % 6 == 0 ? -1 : experts[k]);
        }
        idx.upload(ids);
        x.upload(std::vector<uint16_t>(size_t(kTokens) * kHidden, 0x3f80));
        weights.upload(std::vector<float>(size_t(kTokens) * kTopk, 0.25f));
    }
    TensorView x_view(int device) const {
        return TensorView::contiguous(x.data(), DType::kBFloat16, {kTokens, kHidden}, Device::cuda(device));
    }
    TensorView idx_view(int device) const {
        return TensorView::contiguous(idx.data(), DType::kInt64, {kTokens, kTopk}, Device::cuda(device));
    }
    TensorView weights_view(int device) const {
        return TensorView::contiguous(weights.data(), DType::kFloat32, {kTokens, kTopk}, Device::cuda(device));
    }
};

DispatchArgs ht_args(const Inputs& in, int device, RecvLayout layout, CountMode counts) {
    DispatchArgs args;
    args.x = in.x_view(device);
    args.topk_idx = in.idx_view(device);
    args.topk_weights = in.weights_view(device);
    args.num_experts = kExperts;
    args.layout = layout;
    args.expert_alignment = layout == RecvLayout::kExpertContiguous ? 8 : 1;
    args.counts = counts;
    return args;
}

LowLatencyDispatchArgs ll_args(const Inputs& in, int device, RecvLayout layout) {
    LowLatencyDispatchArgs args;
    args.x = in.x_view(device);
    args.topk_idx = in.idx_view(device);
    args.num_experts = kExperts;
    args.layout = layout;
    args.expert_alignment = layout == RecvLayout::kExpertContiguous ? 16 : 1;
    return args;
}

// A zeroed device tensor of `spec`'s shape (contiguous), and a view of it as the spec says.
struct SpecTensor {
    DeviceArray<uint8_t> memory;
    TensorView view;
    SpecTensor(const TensorSpec& spec, int device) : memory(size_t(std::max<int64_t>(spec.span_bytes(), 16))) {
        memory.fill_bytes(0);
        view.data = memory.data();
        view.device = Device::cuda(device);
        view.ndim = spec.ndim;
        view.dtype = spec.dtype;
        view.shape = spec.shape;
        view.strides = spec.strides;
    }
};

}  // namespace

SY_TEST(Planning, BufferBytesMatchCreation) {
    require_gpus(1);
    const BufferConfig config = config_for_test();
    run_ranks(kRanks, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, config);
        SY_CHECK_EQ(buffer.buffer_bytes(), buffer_bytes(config, kRanks));
    });
}

SY_TEST(Planning, HtOutputShapesMatchTheOps) {
    require_gpus(1);
    const BufferConfig config = config_for_test();
    // Once for the process (the ranks are its threads), from shapes alone, before any op.
    for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous, RecvLayout::kExpertMasked}) {
        HtDispatchShape shape;
        shape.hidden = kHidden, shape.topk = kTopk, shape.num_experts = kExperts, shape.layout = layout;
        ht_load_kernels(0, shape);
    }
    run_ranks(kRanks, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, config);
        Inputs inputs(env.rank);
        env.communicator->barrier(kHostTimeout);  // allocations done before any op
        for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous, RecvLayout::kExpertMasked}) {
            for (CountMode counts : {CountMode::kHostSynced, CountMode::kDevice}) {
                const std::string what = std::string(recv_layout_name(layout)) +
                                         (counts == CountMode::kDevice ? ", device counts" : ", host-synced");
                {  // (device memory of this round freed before the closing barrier)
                const DispatchArgs args = ht_args(inputs, env.device, layout, counts);
                DispatchResult result = buffer.dispatch(args, env.stream);
                const HtOutputShapes plan =
                    ht_output_shapes(config, kRanks, HtDispatchShape::of(args), result.host_num_recv_rows);
                SY_CHECK_EQ(plan.exact, counts == CountMode::kHostSynced || layout == RecvLayout::kExpertMasked);
                check_spec(plan.recv_x, result.recv_x, what + ": recv_x");
                check_spec(plan.recv_scales, result.recv_scales, what + ": recv_scales");
                check_spec(plan.recv_topk_idx, result.recv_topk_idx, what + ": recv_topk_idx");
                check_spec(plan.recv_topk_weights, result.recv_topk_weights, what + ": recv_topk_weights");
                check_spec(plan.num_recv_tokens_per_expert, result.num_recv_tokens_per_expert,
                           what + ": num_recv_tokens_per_expert");
                check_spec(plan.num_recv_rows_tensor, result.num_recv_rows, what + ": num_recv_rows");
                SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                int32_t written = 0;
                SY_CUDA_CHECK(cudaMemcpy(&written, result.num_recv_rows.view().ptr(), 4, cudaMemcpyDeviceToHost));
                if (plan.exact) SY_CHECK_MSG(written == plan.num_recv_rows, what << ": " << written);
                SY_CHECK(written <= plan.num_recv_rows);
                // The combine takes y as planned; masked: the 3-D form and its flattening.
                SpecTensor y(plan.combine_y, env.device);
                SpecTensor row_weights(plan.combine_row_weights, env.device);
                env.communicator->barrier(kHostTimeout);  // allocations before the combine
                CombineArgs combine;
                combine.y = y.view;
                combine.row_weights = row_weights.view;
                CombineResult combined = buffer.combine(combine, result.handle, env.stream);
                check_spec(plan.combine_out, combined.out, what + ": combine out");
                check_spec(plan.combined_topk_weights, combined.combined_topk_weights,
                           what + ": combined_topk_weights");
                if (layout == RecvLayout::kExpertMasked) {
                    combine.y = TensorView::contiguous(y.view.data, DType::kBFloat16,
                                                       {plan.combine_y.shape[0] * plan.combine_y.shape[1], kHidden},
                                                       Device::cuda(env.device));
                    combined = buffer.combine(combine, result.handle, env.stream);
                }
                buffer.synchronize();
                }
                env.communicator->barrier(kHostTimeout);  // frees done before any rank's next op
            }
        }
    });
}

SY_TEST(Planning, LlOutputShapesMatchTheOps) {
    require_gpus(1);
    const BufferConfig config = config_for_test();
    for (RecvLayout layout : {RecvLayout::kExpertMasked, RecvLayout::kExpertContiguous}) {
        LlDispatchShape shape;
        shape.hidden = kHidden, shape.topk = kTopk, shape.num_experts = kExperts, shape.layout = layout;
        shape.index_dtype = DType::kInt64;
        ll_load_kernels(0, shape);
    }
    run_ranks(kRanks, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, config);
        Inputs inputs(env.rank);
        env.communicator->barrier(kHostTimeout);
        for (RecvLayout layout : {RecvLayout::kExpertMasked, RecvLayout::kExpertContiguous}) {
            const std::string what = recv_layout_name(layout);
            {  // (device memory of this round freed before the closing barrier)
            const LowLatencyDispatchArgs args = ll_args(inputs, env.device, layout);
            LowLatencyDispatchResult result = buffer.ll_dispatch(args, env.stream);
            const LlOutputShapes plan = ll_output_shapes(config, kRanks, LlDispatchShape::of(args));
            check_spec(plan.recv_x, result.recv_x, what + ": recv_x");
            check_spec(plan.recv_scales, result.recv_scales, what + ": recv_scales");
            check_spec(plan.recv_count, result.recv_count, what + ": recv_count");
            check_spec(plan.recv_expert_offsets, result.recv_expert_offsets, what + ": recv_expert_offsets");
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));  // this rank's op done: allocating is safe
            SpecTensor y(plan.combine_y, env.device);
            env.communicator->barrier(kHostTimeout);
            LowLatencyCombineArgs combine;
            combine.y = y.view;
            combine.topk_idx = args.topk_idx;
            combine.topk_weights = inputs.weights_view(env.device);
            LowLatencyCombineResult combined = buffer.ll_combine(combine, result.handle, env.stream);
            check_spec(plan.combine_out, combined.out, what + ": combine out");
            if (layout == RecvLayout::kExpertMasked) {
                // The flattened [L * R * T_ll, H] form of a masked y, as the HT combine accepts it.
                combine.y = TensorView::contiguous(y.view.data, DType::kBFloat16,
                                                   {plan.combine_y.shape[0] * plan.combine_y.shape[1], kHidden},
                                                   Device::cuda(env.device));
                combined = buffer.ll_combine(combine, result.handle, env.stream);
            }
            buffer.synchronize();
            }
            env.communicator->barrier(kHostTimeout);
        }
    });
}

SY_TEST_MAIN()
