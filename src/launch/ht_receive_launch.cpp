// Launcher of the HT receive kernel (kernels/switchyard/ht/receive.cuh).
#include <algorithm>
#include <string>

#include "core/tuning.hpp"
#include "launch/ht_launch.hpp"
#include "launch/shape_kernels.hpp"

namespace switchyard::launch {

namespace {
constexpr int kThreads = tuning::kHtReceiveThreads;
}  // namespace

HtReceiveKernelShape ht_receive_kernel_shape(const HtDispatchPlan& plan) {
    return {plan.extents.hidden, plan.extents.topk, plan.scale_kind, int(plan.layout)};
}

jit::KernelSource ht_receive_source(const HtReceiveKernelShape& shape) {
    return {"ht_receive", "switchyard/ht/receive.cuh",
            "switchyard::device::ht_receive_kernel<" + std::to_string(kThreads) + ", " +
                std::to_string(shape.hidden) + ", " + std::to_string(shape.topk) + ", " +
                std::to_string(shape.scale_kind) + ", " + std::to_string(shape.layout) + ">"};
}

const jit::Kernel& ht_receive_kernel(const HtReceiveKernelShape& shape, int device) {
    static ShapeKernels<HtReceiveKernelShape> kernels(&ht_receive_source);
    return kernels.get(shape, device);
}

void launch_ht_receive(const LaunchContext& context, const HtDispatchPlan& plan,
                       const HtDispatchViews& views) {
    const HtReceiveKernelShape shape = ht_receive_kernel_shape(plan);  // named: see launch_ht_combine
    const jit::Kernel& kernel = ht_receive_kernel(shape, context.device);
    device::HtReceiveArgs args{};
    args.common = ht_common(context, plan.extents);
    args.recv_info = views.recv_info;
    args.zero_padding = plan.zero_padding ? 1 : 0;
    args.has_weights = plan.has_weights ? 1 : 0;
    args.row_src_token = views.row_src_token;
    args.row_combine_slot = views.row_combine_slot;
    args.row_expert_row = views.row_expert_row;
    args.row_weights = views.row_weights;
    args.out_x = views.out_x;
    args.out_scales = views.out_scales;
    args.out_weights = views.out_weights;
    args.out_num_rows = views.out_num_rows;
    args.trace = views.trace;

    jit::LaunchConfig config;
    // No waits on other ranks: any grid works. The rank's SM budget, several blocks deep.
    config.grid[0] = unsigned(std::max(1, context.sm_budget) * tuning::kHtReceiveBlocksPerSm);
    config.block[0] = unsigned(kThreads);
    config.stream = context.stream;
    // Chained after the dispatch kernel: its waiting blocks become resident as the dispatch's
    // blocks exit (or, on a GPU the rank has alone, as the dispatch starts), so the launch's own
    // delay overlaps the dispatch's end; it waits for the dispatch's results at its start.
    config.programmatic_dependent_launch = true;
    jit::launch(kernel, config, &args, sizeof(args));
}

}  // namespace switchyard::launch
