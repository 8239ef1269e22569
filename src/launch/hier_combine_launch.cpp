// Launcher of the hierarchical HT combine kernel (kernels/switchyard/hier/combine.cuh).
#include <string>

#include "core/tuning.hpp"
#include "launch/hier_launch.hpp"
#include "launch/shape_kernels.hpp"
#include "net/network.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/hier/hier_args.cuh"

namespace switchyard::launch {

namespace {

constexpr int kWarps = tuning::kHtCombineWarps;
constexpr int kSendWarps = tuning::kHtCombineSendWarps;

jit::CompileOptions combine_options(const HierCombineKernelShape& shape) {
    return hier_compile_options(shape.gin);
}

template <class Backend>
void launch_with(const LaunchContext& context, const HtCombinePlan& plan, const HtCombineViews& views,
                 const HierCombineKernelShape& shape) {
    device::HierCombineArgs<Backend> args{};
    args.ht = ht_combine_args(context, plan, views);
    args.net = network_context<Backend>(context);
    args.forward_meta = views.forward_meta;
    args.forward_counts = views.forward_counts;
    args.token_node_slot = views.token_node_slot;
    args.num_tokens_per_node = views.num_tokens_per_node;
    args.weights_travel = plan.mode == device::kHtCombineExpertFlat && plan.weighted ? 1 : 0;

    jit::LaunchConfig config;
    config.grid[0] = unsigned(plan.num_sms);
    config.block[0] = unsigned(32 * kWarps);
    config.stream = context.stream;
    config.cooperative = true;  // every block may wait for rows and partials that other blocks send
    jit::launch(hier_combine_kernel(shape, context.device), config, args);
}

}  // namespace

jit::KernelSource hier_combine_source(const HierCombineKernelShape& shape) {
    return {shape.gin ? "hier_combine_gin" : "hier_combine", "switchyard/hier/combine.cuh",
            std::string("switchyard::device::hier_combine_kernel<") +
                (shape.gin ? "switchyard::device::NetGin" : "switchyard::device::NetEmulated") + ", " +
                std::to_string(kWarps) + ", " + std::to_string(kSendWarps) + ", " +
                std::to_string(shape.send_group) + ", " + std::to_string(shape.hidden) + ", " +
                std::to_string(shape.topk) + ", " + std::to_string(shape.mode) + ">"};
}

const jit::Kernel& hier_combine_kernel(const HierCombineKernelShape& shape, int device) {
    static ShapeKernels<HierCombineKernelShape> kernels(&hier_combine_source, &combine_options);
    return kernels.get(shape, device);
}

void launch_hier_combine(const LaunchContext& context, const HtCombinePlan& plan,
                         const HtCombineViews& views) {
    if (!context.network)
        throw Error("switchyard: the hierarchical combine was launched on a buffer without a network");
    const HierCombineKernelShape shape{plan.gin, plan.extents.hidden, plan.extents.topk, plan.mode,
                                       tuning::ht_combine_send_group(plan.num_sms)};
    if (plan.gin)
        launch_with<device::NetGin>(context, plan, views, shape);
    else
        launch_with<device::NetEmulated>(context, plan, views, shape);
}

}  // namespace switchyard::launch
