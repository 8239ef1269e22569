// Launcher of the LL combine kernel (kernels/switchyard/ll/combine.cuh).
#include <string>

#include "core/tuning.hpp"
#include "launch/ll_launch.hpp"

namespace switchyard::launch {

jit::KernelSource ll_combine_source(const LlCombineShape& shape) {
    const bool sends = (shape.phases & device::kLlSendHalf) != 0;
    const bool receives = (shape.phases & device::kLlRecvHalf) != 0;
    return {"ll_combine", "switchyard/ll/combine.cuh",
            "switchyard::device::ll_combine_kernel<" + std::to_string(tuning::kLlWarps) + ", " +
                std::to_string(tuning::kLlSendItemsPerWarp) + ", " + std::to_string(shape.hidden) + ", " +
                std::to_string(shape.topk) + ", " + (receives && shape.index_is_int64 ? "long long" : "int") +
                ", " + std::to_string(shape.phases) + ", " + (shape.hierarchical ? "true" : "false") + ", " +
                (sends && shape.contiguous ? "true" : "false") + ">"};
}

device::LlCombineArgs ll_combine_args(const LaunchContext& context, const LlCombinePlan& plan,
                                      const LlCombineViews& views, const device::OpTrace& trace) {
    const bool contiguous = plan.shape.contiguous;
    const bool flat = !plan.shape.hierarchical;
    const TensorView& y = views.y;
    device::LlCombineArgs args{};
    args.buffer = ll_buffer_args(context, plan.mask_unresponsive, trace);
    args.y = y.ptr();
    args.y_expert_stride = contiguous ? 0 : y.strides[0];
    args.y_row_stride = contiguous ? y.strides[0] : y.strides[1];
    args.y_alignment = contiguous ? plan.y_alignment : 0;
    args.topk_idx = views.topk_idx.ptr();
    args.topk_row_stride = views.topk_idx.strides[0];
    args.topk_weights = flat ? views.topk_weights.ptr_as<float>() : nullptr;
    args.weights_row_stride = flat ? views.topk_weights.strides[0] : 0;
    args.out = views.out.ptr();
    // An empty output may have any strides: its rows are never written.
    args.out_row_stride =
        views.out.ndim == 2 && plan.num_tokens > 0 ? views.out.strides[0] : plan.shape.hidden;
    args.num_tokens = plan.num_tokens;
    args.num_experts = plan.num_experts;
    args.local_experts = plan.num_experts / context.num_ranks;
    args.recv_count = views.recv_count.ptr_as<int32_t>();
    args.recv_source = views.recv_source.ptr_as<int32_t>();
    args.wait_time_stats =
        views.wait_time_stats.defined() ? views.wait_time_stats.ptr_as<int64_t>() : nullptr;
    args.recv_token_rows = views.recv_token_rows.ptr_as<int32_t>();
    args.recv_token_weights = views.recv_token_weights.ptr_as<float>();
    args.recv_record_starts = views.recv_record_starts.ptr_as<int32_t>();
    return args;
}

void launch_ll_combine(const LaunchContext& context, const LlCombinePlan& plan, const LlCombineViews& views,
                       int phases, const device::OpTrace& trace) {
    const device::LlCombineArgs args = ll_combine_args(context, plan, views, trace);
    LlCombineShape shape = plan.shape;
    shape.phases = phases;
    launch_ll_kernel(ll_combine_source(shape), context, ll_num_blocks(context, plan.num_sms),
                     device::ll_combine_shared_bytes(context.num_ranks, args.local_experts), &args,
                     sizeof(args));
}

}  // namespace switchyard::launch
