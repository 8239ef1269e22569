// Launcher of the HT dispatch kernel (kernels/switchyard/ht/dispatch.cuh).
#include <string>

#include "core/tuning.hpp"
#include "launch/ht_launch.hpp"
#include "launch/shape_kernels.hpp"

namespace switchyard::launch {

HtDispatchKernelShape ht_dispatch_kernel_shape(int hidden, int topk, int input_payload, int scale_kind,
                                               bool masked_layout) {
    const int record_payload = scale_kind == device::kScaleNone ? device::kPayloadBf16 : device::kPayloadFp8;
    // A warp's stage holds one record's payload and scales (everything before its metadata).
    const int64_t stage_bytes =
        device::RecordLayout::dispatch(hidden, record_payload, scale_kind, topk).meta_offset;
    HtDispatchKernelShape shape;
    shape.warps = tuning::ht_dispatch_warps(stage_bytes);
    shape.hidden = hidden;
    shape.topk = topk;
    shape.input_payload = input_payload;
    shape.scale_kind = scale_kind;
    shape.masked_layout = masked_layout;
    return shape;
}

HtDispatchKernelShape ht_dispatch_kernel_shape(const HtDispatchPlan& plan) {
    return ht_dispatch_kernel_shape(plan.extents.hidden, plan.extents.topk, plan.input_payload,
                                    plan.scale_kind, plan.layout == RecvLayout::kExpertMasked);
}

jit::KernelSource ht_dispatch_source(const HtDispatchKernelShape& shape) {
    return {"ht_dispatch", "switchyard/ht/dispatch.cuh",
            "switchyard::device::ht_dispatch_kernel<" + std::to_string(shape.warps) + ", " +
                std::to_string(tuning::kHtDispatchClaimTokens) + ", " + std::to_string(shape.hidden) + ", " +
                std::to_string(shape.topk) + ", " + std::to_string(shape.input_payload) + ", " +
                std::to_string(shape.scale_kind) + ", " + (shape.masked_layout ? "true" : "false") + ">"};
}

const jit::Kernel& ht_dispatch_kernel(const HtDispatchKernelShape& shape, int device) {
    static ShapeKernels<HtDispatchKernelShape> kernels(&ht_dispatch_source);
    return kernels.get(shape, device);
}

device::HtDispatchArgs ht_dispatch_args(const LaunchContext& context, const HtDispatchPlan& plan,
                                        const HtDispatchViews& views) {
    device::HtDispatchArgs args{};
    args.common = ht_common(context, plan.extents);
    args.x = static_cast<const uint8_t*>(views.x.ptr());
    args.x_row_stride_bytes = views.x.strides[0] * int64_t(views.x.element_size());
    if (views.x_scales.defined()) {
        args.x_scales = static_cast<const uint32_t*>(views.x_scales.ptr());
        args.scale_row_stride = views.x_scales.strides[0];
        args.scale_col_stride = views.x_scales.strides[1];
    }
    if (views.topk_weights.defined()) {
        args.topk_weights = views.topk_weights.ptr_as<const float>();
        args.weights_row_stride = views.topk_weights.strides[0];
    }
    args.topk_idx = views.topk_copy;
    args.token_rank_slot = views.token_rank_slot;
    args.token_expert_pos = views.token_expert_pos;
    args.num_tokens_per_rank = views.num_tokens_per_rank;
    args.num_tokens_per_expert = views.num_tokens_per_expert;
    args.counts_notified = plan.cached ? 0 : 1;
    args.receive_scheduled_early = context.gpu_alone ? 1 : 0;
    args.after_routing = plan.cached ? 0 : 1;
    args.recv_info = views.recv_info;
    args.expert_alignment = plan.expert_alignment;
    args.host_counts = plan.host_synced ? views.host_counts : nullptr;
    args.trace = views.trace;
    return args;
}

void launch_ht_dispatch(const LaunchContext& context, const HtDispatchPlan& plan,
                        const HtDispatchViews& views) {
    const HtDispatchKernelShape shape = ht_dispatch_kernel_shape(plan);
    const jit::Kernel& kernel = ht_dispatch_kernel(shape, context.device);
    const device::HtDispatchArgs args = ht_dispatch_args(context, plan, views);

    jit::LaunchConfig config;
    config.grid[0] = unsigned(plan.num_sms);
    config.block[0] = unsigned(32 * shape.warps);
    config.shared_bytes = unsigned(2 * plan.record.meta_offset * shape.warps);  // two stages per warp
    config.stream = context.stream;
    // Every block waits for the peers' counts, which this rank's routing kernel (or this grid's
    // block 0) sends: all blocks must be resident. A plain launch chained after the routing kernel
    // (a cooperative one would wait for the routing to end) still finds an SM for every block: the
    // grid is scheduled once every routing block runs (or has published: launch_ht_routing), the
    // routing blocks end without waiting for anything outside their grid, each rank's waiting blocks
    // stay within its SM share (Buffer::sm_budget; the shares of the ranks on a GPU add up to at
    // most its SMs), and the receive is scheduled only as this grid's blocks exit (or, on a GPU of
    // the rank's own, once all run).
    config.programmatic_dependent_launch = true;  // after the routing kernel
    jit::launch(kernel, config, &args, sizeof(args));
}

}  // namespace switchyard::launch
