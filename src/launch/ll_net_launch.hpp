// Launchers of the LL kernels across nodes (kernels/switchyard/ll/net_dispatch.cuh and
// net_combine.cuh): the one-node dispatch and combine with the scale-out network in them, for
// either backend. The argument structs extend the one-node ones (ll_launch.hpp fills those) with
// the network's context, the node geometry and the forward area; NetEmulated kernels compile with
// NVRTC, NetGin kernels with nvcc against the NCCL headers (net::gin_compile_options).
#pragma once

#include <vector>

#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "launch/ll_launch.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::launch {

// The instantiation of a shape on the emulated network (`gin` false) or on GIN.
jit::KernelSource ll_net_dispatch_source(const LlDispatchShape& shape, bool gin);
jit::KernelSource ll_net_combine_source(const LlCombineShape& shape, bool gin);
jit::CompileOptions ll_net_compile_options(bool gin);

// Every instantiation an LL dispatch of `shape` across nodes and the combines that answer it can
// use (as ll_op_sources).
std::vector<jit::KernelSource> ll_net_op_sources(const LlDispatchShape& shape, bool gin);

// Every instantiation across nodes for a catalog shape (the emulated ones are part of ll_catalog;
// the GIN ones compile with nvcc, so they are listed apart).
std::vector<jit::KernelSource> ll_net_catalog(const CatalogShape& shape, bool gin);

// What the dispatch leaves for the combine's forwarding (in the handle): int32 [N - 1, T_ll, K + 1]
// and int32 [N - 1].
struct LlNetViews {
    TensorView forward_rows, forward_counts;
};

// Launch `phases` of an LL dispatch / combine across nodes on context.stream (context.network set).
void launch_ll_net_dispatch(const LaunchContext& context, const LlDispatchPlan& plan, const LlDispatchViews& views,
                            const LlNetViews& net_views, int phases, const device::OpTrace& trace);
void launch_ll_net_combine(const LaunchContext& context, const LlCombinePlan& plan, const LlCombineViews& views,
                           const LlNetViews& net_views, int phases, const device::OpTrace& trace);

}  // namespace switchyard::launch
