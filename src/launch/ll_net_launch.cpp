// Launchers of the LL kernels across nodes (see ll_net_launch.hpp).
#include "launch/ll_net_launch.hpp"

#include <string>

#include "core/tuning.hpp"
#include "net/gin_kernels.hpp"
#include "net/network.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/ll/net_combine.cuh"
#include "switchyard/ll/net_dispatch.cuh"

namespace switchyard::launch {
namespace {

const char* backend_name(bool gin) {
    return gin ? "switchyard::device::NetGin" : "switchyard::device::NetEmulated";
}

bool uses_gin(const LaunchContext& context) {
    if (!context.network) throw Error("switchyard: an LL kernel across nodes was launched without a network");
    return context.network->kind() == net::NetworkKind::kGin;
}

template <class Backend>
device::LlNetArgs<Backend> net_args(const LaunchContext& context);

template <>
device::LlNetArgs<device::NetEmulated> net_args(const LaunchContext& context) {
    device::LlNetArgs<device::NetEmulated> args{};
    args.net = context.network->emulated_context();
    return args;
}
template <>
device::LlNetArgs<device::NetGin> net_args(const LaunchContext& context) {
    device::LlNetArgs<device::NetGin> args{};
    args.net = context.network->gin_context();
    return args;
}

// The node geometry and the forward area, for either backend.
template <class Backend>
device::LlNetArgs<Backend> full_net_args(const LaunchContext& context) {
    device::LlNetArgs<Backend> args = net_args<Backend>(context);
    const comm::NodeLayout& layout = context.network->layout();
    args.nodes = {layout.num_nodes, layout.ranks_per_node, layout.node, layout.local_index};
    args.forward = {context.layout.ll_forward_offset, context.layout.ll_set.max_topk,
                    context.layout.ll_set.max_tokens};
    return args;
}

template <class Backend>
void dispatch_on(const LaunchContext& context, const LlDispatchPlan& plan, const LlDispatchViews& views,
                 const LlNetViews& net_views, int phases, const device::OpTrace& trace, bool gin) {
    device::LlNetDispatchArgs<Backend> args{};
    args.base = ll_dispatch_args(context, plan, views, trace);
    args.net = full_net_args<Backend>(context);
    args.forward_rows = net_views.forward_rows.ptr_as<int32_t>();
    args.forward_counts = net_views.forward_counts.ptr_as<int32_t>();
    LlDispatchShape shape = plan.shape;
    shape.phases = phases;
    launch_ll_kernel(ll_net_dispatch_source(shape, gin), context, ll_dispatch_grid(context, plan, phases),
                     device::ll_net_dispatch_shared_bytes(context.num_ranks, args.net.nodes.num_nodes,
                                                          plan.num_experts, plan.num_tokens),
                     &args, sizeof(args), ll_net_compile_options(gin));
}

template <class Backend>
void combine_on(const LaunchContext& context, const LlCombinePlan& plan, const LlCombineViews& views,
                const LlNetViews& net_views, int phases, const device::OpTrace& trace, bool gin) {
    device::LlNetCombineArgs<Backend> args{};
    args.base = ll_combine_args(context, plan, views, trace);
    args.net = full_net_args<Backend>(context);
    args.forward_rows = net_views.forward_rows.ptr_as<int32_t>();
    args.forward_counts = net_views.forward_counts.ptr_as<int32_t>();
    LlCombineShape shape = plan.shape;
    shape.phases = phases;
    launch_ll_kernel(ll_net_combine_source(shape, gin), context, ll_num_blocks(context, plan.num_sms),
                     device::ll_net_combine_shared_bytes(context.num_ranks, args.base.local_experts,
                                                         args.net.nodes.num_nodes),
                     &args, sizeof(args), ll_net_compile_options(gin));
}

}  // namespace

jit::KernelSource ll_net_dispatch_source(const LlDispatchShape& shape, bool gin) {
    const bool sends = (shape.phases & device::kLlSendHalf) != 0;
    const bool receives = (shape.phases & device::kLlRecvHalf) != 0;
    return {"ll_net_dispatch", "switchyard/ll/net_dispatch.cuh",
            std::string("switchyard::device::ll_net_dispatch_kernel<") + backend_name(gin) + ", " +
                std::to_string(tuning::kLlWarps) + ", " + std::to_string(tuning::kLlSendItemsPerWarp) + ", " +
                std::to_string(shape.hidden) + ", " + std::to_string(shape.topk) + ", " +
                std::to_string(shape.scale_kind) + ", " +
                (sends && shape.index_is_int64 ? "long long" : "int") + ", " + std::to_string(shape.phases) +
                ", " + (receives && shape.contiguous ? "true" : "false") + ">"};
}

jit::KernelSource ll_net_combine_source(const LlCombineShape& shape, bool gin) {
    const bool sends = (shape.phases & device::kLlSendHalf) != 0;
    const bool receives = (shape.phases & device::kLlRecvHalf) != 0;
    return {"ll_net_combine", "switchyard/ll/net_combine.cuh",
            std::string("switchyard::device::ll_net_combine_kernel<") + backend_name(gin) + ", " +
                std::to_string(tuning::kLlWarps) + ", " + std::to_string(tuning::kLlSendItemsPerWarp) + ", " +
                std::to_string(shape.hidden) + ", " + std::to_string(shape.topk) + ", " +
                (receives && shape.index_is_int64 ? "long long" : "int") + ", " +
                std::to_string(shape.phases) + ", " + (shape.hierarchical ? "true" : "false") + ", " +
                (sends && shape.contiguous ? "true" : "false") + ">"};
}

jit::CompileOptions ll_net_compile_options(bool gin) {
    return gin ? net::gin_compile_options() : jit::CompileOptions{};
}

std::vector<jit::KernelSource> ll_net_op_sources(const LlDispatchShape& shape, bool gin) {
    return ll_op_sources_of(
        shape, [gin](const LlDispatchShape& dispatch) { return ll_net_dispatch_source(dispatch, gin); },
        [gin](const LlCombineShape& combine) { return ll_net_combine_source(combine, gin); });
}

std::vector<jit::KernelSource> ll_net_catalog(const CatalogShape& catalog, bool gin) {
    return ll_catalog_of(
        catalog, [gin](const LlDispatchShape& shape) { return ll_net_op_sources(shape, gin); },
        "ll_net_dispatch");
}

void launch_ll_net_dispatch(const LaunchContext& context, const LlDispatchPlan& plan,
                            const LlDispatchViews& views, const LlNetViews& net_views, int phases,
                            const device::OpTrace& trace) {
    if (uses_gin(context))
        dispatch_on<device::NetGin>(context, plan, views, net_views, phases, trace, true);
    else
        dispatch_on<device::NetEmulated>(context, plan, views, net_views, phases, trace, false);
}

void launch_ll_net_combine(const LaunchContext& context, const LlCombinePlan& plan,
                           const LlCombineViews& views, const LlNetViews& net_views, int phases,
                           const device::OpTrace& trace) {
    if (uses_gin(context))
        combine_on<device::NetGin>(context, plan, views, net_views, phases, trace, true);
    else
        combine_on<device::NetEmulated>(context, plan, views, net_views, phases, trace, false);
}

}  // namespace switchyard::launch
