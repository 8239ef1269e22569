// Launcher of the LL dispatch kernel (kernels/switchyard/ll/dispatch.cuh).
#include <algorithm>
#include <string>

#include "core/tuning.hpp"
#include "launch/ll_launch.hpp"

namespace switchyard::launch {

jit::KernelSource ll_dispatch_source(const LlDispatchShape& shape) {
    const bool sends = (shape.phases & device::kLlSendHalf) != 0;
    const bool receives = (shape.phases & device::kLlRecvHalf) != 0;
    return {"ll_dispatch", "switchyard/ll/dispatch.cuh",
            "switchyard::device::ll_dispatch_kernel<" + std::to_string(tuning::kLlWarps) + ", " +
                std::to_string(tuning::kLlSendItemsPerWarp) + ", " + std::to_string(shape.hidden) + ", " +
                std::to_string(shape.topk) + ", " + std::to_string(shape.scale_kind) + ", " +
                (sends && shape.index_is_int64 ? "long long" : "int") + ", " + std::to_string(shape.phases) +
                ", " + (receives && shape.contiguous ? "true" : "false") + ">"};
}

int ll_dispatch_blocks(const LaunchContext& context, int num_sms, const LlDispatchShape& shape,
                       int64_t max_tokens_per_rank, int64_t max_padding_rows) {
    // Every warp should find one receive item (a 2 KB slice of a record) when every source sends
    // its most tokens: a rank's grid cannot know what its peers send (a 1-token rank may receive
    // T_ll tokens from each peer), so it is sized by the buffer's T_ll, not by its own tokens.
    // Blocks beyond the send work only receive: the sending blocks are chosen on the device
    // (ll_sending_blocks), and an idle block costs no arrival. Padding rows to zero are slices
    // of the same size (their scales, a few more stores, ride along).
    const int64_t recv_slices = device::ll_recv_slices(shape.hidden, shape.scale_kind);
    const int64_t recv_blocks =
        ((context.num_ranks * max_tokens_per_rank + max_padding_rows) * recv_slices + tuning::kLlWarps - 1) /
        tuning::kLlWarps;
    const int64_t wanted = std::max<int64_t>(1, recv_blocks);
    return static_cast<int>(std::min<int64_t>(wanted, ll_num_blocks(context, num_sms)));
}

device::LlDispatchArgs ll_dispatch_args(const LaunchContext& context, const LlDispatchPlan& plan,
                                        const LlDispatchViews& views, const device::OpTrace& trace) {
    const int32_t local_experts = plan.num_experts / context.num_ranks;
    const bool contiguous = plan.shape.contiguous;
    device::LlDispatchArgs args{};
    args.buffer = ll_buffer_args(context, plan.mask_unresponsive, trace);
    args.x = views.x.ptr();
    args.x_row_stride = views.x.strides[0];
    args.topk_idx = views.topk_idx.ptr();
    args.topk_row_stride = views.topk_idx.strides[0];
    args.num_tokens = plan.num_tokens;
    args.num_experts = plan.num_experts;
    args.local_experts = local_experts;
    args.recv_x = views.recv_x.ptr();
    args.recv_scales = views.recv_scales.defined() ? views.recv_scales.ptr_as<uint32_t>() : nullptr;
    args.recv_count = views.recv_count.ptr_as<int32_t>();
    args.recv_expert_offsets = views.recv_expert_offsets.ptr_as<int32_t>();
    args.expert_alignment = contiguous ? plan.expert_alignment : 0;
    args.recv_rows = plan.recv_rows;
    args.zero_padding = contiguous && plan.zero_padding ? 1 : 0;
    args.recv_source = views.recv_source.ptr_as<int32_t>();
    args.topk_weights = views.topk_weights.defined() ? views.topk_weights.ptr_as<float>() : nullptr;
    args.weights_row_stride = views.topk_weights.defined() ? views.topk_weights.strides[0] : 0;
    args.recv_token_rows = views.recv_token_rows.ptr_as<int32_t>();
    args.recv_token_weights = views.recv_token_weights.ptr_as<float>();
    args.recv_record_starts = views.recv_record_starts.ptr_as<int32_t>();
    args.cumulative_local_expert_recv_stats = views.cumulative_local_expert_recv_stats.defined()
                                                  ? views.cumulative_local_expert_recv_stats.ptr_as<int32_t>()
                                                  : nullptr;
    args.wait_time_stats =
        views.wait_time_stats.defined() ? views.wait_time_stats.ptr_as<int64_t>() : nullptr;
    return args;
}

int ll_dispatch_grid(const LaunchContext& context, const LlDispatchPlan& plan, int phases) {
    LlDispatchShape shape = plan.shape;
    shape.phases = phases;
    // With zero_padding the grid also covers the segments' most padding rows.
    const int32_t local_experts = plan.num_experts / context.num_ranks;
    const int64_t max_padding_rows =
        plan.shape.contiguous && plan.zero_padding ? int64_t(local_experts) * (plan.expert_alignment - 1) : 0;
    return ll_dispatch_blocks(context, plan.num_sms, shape, context.layout.ll_set.max_tokens, max_padding_rows);
}

void launch_ll_dispatch(const LaunchContext& context, const LlDispatchPlan& plan,
                        const LlDispatchViews& views, int phases, const device::OpTrace& trace) {
    const device::LlDispatchArgs args = ll_dispatch_args(context, plan, views, trace);
    LlDispatchShape shape = plan.shape;
    shape.phases = phases;
    launch_ll_kernel(ll_dispatch_source(shape), context, ll_dispatch_grid(context, plan, phases),
                     device::ll_dispatch_shared_bytes(context.num_ranks, plan.num_experts, plan.num_tokens),
                     &args, sizeof(args));
}

}  // namespace switchyard::launch
