// Launcher of the hierarchical HT dispatch kernel (kernels/switchyard/hier/dispatch.cuh).
#include <string>

#include "core/tuning.hpp"
#include "launch/hier_launch.hpp"
#include "launch/shape_kernels.hpp"
#include "net/gin_kernels.hpp"
#include "net/network.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/hier/hier_args.cuh"
#include "switchyard/hier/hier_layout.cuh"

namespace switchyard::launch {

namespace {

std::string backend_name(bool gin) {
    return gin ? "switchyard::device::NetGin" : "switchyard::device::NetEmulated";
}

jit::CompileOptions dispatch_options(const HierDispatchKernelShape& shape) {
    return hier_compile_options(shape.gin);
}

template <class Backend>
void launch_with(const LaunchContext& context, const HtDispatchPlan& plan, const HtDispatchViews& views,
                 const HierDispatchKernelShape& shape, const device::HtDispatchArgs& ht) {
    device::HierDispatchArgs<Backend> args{};
    args.ht = ht;
    args.net = network_context<Backend>(context);
    args.forward_bytes = hier_forward_record(plan).total_bytes;
    args.token_node_slot = views.token_node_slot;
    args.num_tokens_per_node = views.num_tokens_per_node;
    args.forward_meta = views.forward_meta;
    args.forward_counts = views.forward_counts;

    jit::LaunchConfig config;
    config.grid[0] = unsigned(plan.num_sms);
    config.block[0] = unsigned(32 * shape.warps);
    config.shared_bytes = unsigned(2 * plan.record.meta_offset * shape.warps);  // two stages per warp
    config.stream = context.stream;
    // Blocks wait for each other (forwarders for block 0's counts, for the senders' batches): all
    // resident. As the direct dispatch (ht_dispatch_launch.cpp): a plain launch chained after the
    // routing kernel.
    config.programmatic_dependent_launch = true;
    jit::launch(hier_dispatch_kernel(shape, context.device), config, args);
}

}  // namespace

jit::CompileOptions hier_compile_options(bool gin) {
    return gin ? net::gin_compile_options() : jit::CompileOptions{};
}

device::RecordLayout hier_forward_record(const HtDispatchPlan& plan) {
    const int32_t payload =
        plan.scale_kind == device::kScaleNone ? device::kPayloadBf16 : device::kPayloadFp8;
    return device::hier_forward_record(plan.extents.hidden, payload, plan.scale_kind, plan.extents.topk,
                                       plan.ranks_per_node);
}

HierDispatchKernelShape hier_dispatch_kernel_shape(bool gin, int hidden, int topk, int input_payload,
                                                   int scale_kind, bool masked_layout) {
    const int record_payload = scale_kind == device::kScaleNone ? device::kPayloadBf16 : device::kPayloadFp8;
    const int64_t stage_bytes =
        device::RecordLayout::dispatch(hidden, record_payload, scale_kind, topk).meta_offset;
    HierDispatchKernelShape shape;
    shape.gin = gin;
    shape.warps = tuning::hier_dispatch_warps(stage_bytes);
    shape.send_warps = tuning::hier_dispatch_send_warps(shape.warps);
    shape.hidden = hidden;
    shape.topk = topk;
    shape.input_payload = input_payload;
    shape.scale_kind = scale_kind;
    shape.masked_layout = masked_layout;
    return shape;
}

jit::KernelSource hier_dispatch_source(const HierDispatchKernelShape& shape) {
    return {shape.gin ? "hier_dispatch_gin" : "hier_dispatch", "switchyard/hier/dispatch.cuh",
            "switchyard::device::hier_dispatch_kernel<" + backend_name(shape.gin) + ", " +
                std::to_string(shape.warps) + ", " + std::to_string(shape.send_warps) + ", " +
                std::to_string(tuning::kHierDispatchClaimTokens) + ", " + std::to_string(shape.hidden) +
                ", " + std::to_string(shape.topk) + ", " + std::to_string(shape.input_payload) + ", " +
                std::to_string(shape.scale_kind) + ", " + (shape.masked_layout ? "true" : "false") + ">"};
}

const jit::Kernel& hier_dispatch_kernel(const HierDispatchKernelShape& shape, int device) {
    static ShapeKernels<HierDispatchKernelShape> kernels(&hier_dispatch_source, &dispatch_options);
    return kernels.get(shape, device);
}

void launch_hier_dispatch(const LaunchContext& context, const HtDispatchPlan& plan,
                          const HtDispatchViews& views) {
    if (!context.network)
        throw Error("switchyard: the hierarchical dispatch was launched on a buffer without a network");
    const HierDispatchKernelShape shape =
        hier_dispatch_kernel_shape(plan.gin, plan.extents.hidden, plan.extents.topk, plan.input_payload,
                                   plan.scale_kind, plan.layout == RecvLayout::kExpertMasked);
    // The direct path's argument struct carries the inputs, the routing and the receive summary;
    // the counts go out from the dispatch kernel (hier/dispatch_counts.cuh), never the routing's.
    device::HtDispatchArgs ht = ht_dispatch_args(context, plan, views);
    ht.counts_notified = 0;
    if (plan.gin)
        launch_with<device::NetGin>(context, plan, views, shape, ht);
    else
        launch_with<device::NetEmulated>(context, plan, views, shape, ht);
}

}  // namespace switchyard::launch
