// Launcher of the HT combine kernel (kernels/switchyard/ht/combine.cuh).
#include <string>

#include "core/tuning.hpp"
#include "launch/ht_launch.hpp"
#include "launch/shape_kernels.hpp"

namespace switchyard::launch {

namespace {
constexpr int kWarps = tuning::kHtCombineWarps;
constexpr int kSendWarps = tuning::kHtCombineSendWarps;
}  // namespace

HtCombineKernelShape ht_combine_kernel_shape(const HtExtents& extents, int mode, int num_sms) {
    return {extents.hidden, extents.topk, mode, tuning::ht_combine_send_group(num_sms)};
}

jit::KernelSource ht_combine_source(const HtCombineKernelShape& shape) {
    return {"ht_combine", "switchyard/ht/combine.cuh",
            "switchyard::device::ht_combine_kernel<" + std::to_string(kWarps) + ", " +
                std::to_string(kSendWarps) + ", " + std::to_string(shape.send_group) + ", " +
                std::to_string(shape.hidden) + ", " + std::to_string(shape.topk) + ", " +
                std::to_string(shape.mode) + ">"};
}

const jit::Kernel& ht_combine_kernel(const HtCombineKernelShape& shape, int device) {
    static ShapeKernels<HtCombineKernelShape> kernels(&ht_combine_source);
    return kernels.get(shape, device);
}

device::HtCombineArgs ht_combine_args(const LaunchContext& context, const HtCombinePlan& plan,
                                      const HtCombineViews& views) {
    device::HtCombineArgs args{};
    args.common = ht_common(context, plan.extents);
    args.recv_info = views.recv_info;
    args.weighted = plan.weighted ? 1 : 0;
    args.y = static_cast<const uint8_t*>(views.y.ptr());
    args.y_row_stride_bytes = views.y.strides[0] * 2;
    if (views.row_weights.defined()) {
        args.row_weights = views.row_weights.ptr_as<const float>();
        args.row_weights_stride = views.row_weights.strides[0];
    }
    args.row_src_token = views.row_src_token;
    args.row_combine_slot = views.row_combine_slot;
    args.row_expert_row = views.row_expert_row;
    args.dispatch_row_weights = views.dispatch_row_weights;
    args.topk_idx = views.topk_idx;
    args.token_rank_slot = views.token_rank_slot;
    if (views.home_weights.defined()) {
        args.home_weights = views.home_weights.ptr_as<const float>();
        args.home_weights_stride = views.home_weights.strides[0];
    }
    if (views.bias0.defined()) {
        args.bias0 = views.bias0.ptr_as<const uint16_t>();
        args.bias0_stride = views.bias0.strides[0];
    }
    if (views.bias1.defined()) {
        args.bias1 = views.bias1.ptr_as<const uint16_t>();
        args.bias1_stride = views.bias1.strides[0];
    }
    args.out = views.out.ptr_as<uint16_t>();
    args.out_stride = views.out.strides[0];
    args.combined_weights = views.combined_weights;
    args.trace = views.trace;
    return args;
}

void launch_ht_combine(const LaunchContext& context, const HtCombinePlan& plan, const HtCombineViews& views) {
    // The shape named, not a temporary: the kernel reference points into the JIT's cache.
    const HtCombineKernelShape shape = ht_combine_kernel_shape(plan.extents, plan.mode, plan.num_sms);
    const jit::Kernel& kernel = ht_combine_kernel(shape, context.device);
    const device::HtCombineArgs args = ht_combine_args(context, plan, views);

    jit::LaunchConfig config;
    config.grid[0] = unsigned(plan.num_sms);
    config.block[0] = unsigned(32 * kWarps);
    config.stream = context.stream;
    // Every block may wait for rows that other blocks (this rank's and its peers') send: all resident.
    config.cooperative = true;
    jit::launch(kernel, config, &args, sizeof(args));
}

}  // namespace switchyard::launch
