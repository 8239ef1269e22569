// Launchers of the hierarchical HT kernels (ranks on several nodes; kernels/switchyard/hier/): the
// dispatch and the combine. They take the direct path's plans and views (launch/ht_launch.hpp; a
// plan with num_nodes > 1), fill the kernels' argument structs (hier/hier_args.cuh), and pick the
// instantiation for the buffer's network backend: the emulated network's kernels compiled by NVRTC,
// NCCL GIN's by the nvcc path (net::gin_compile_options). The routing kernel (with its node columns)
// runs before the dispatch, the direct path's receive kernel after it.
#pragma once

#include <vector>

#include "jit/jit.hpp"
#include "launch/ht_launch.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "net/network.hpp"

namespace switchyard::launch {

void launch_hier_dispatch(const LaunchContext& context, const HtDispatchPlan& plan,
                          const HtDispatchViews& views);
// `weights_travel`: a flat weighted combine (the homes' weights, views.home_weights, go to the
// forwarders that reduce for them).
void launch_hier_combine(const LaunchContext& context, const HtCombinePlan& plan,
                         const HtCombineViews& views);

// The forward record of a dispatch plan (its size is what the byte accounting counts per token and
// destination node).
device::RecordLayout hier_forward_record(const HtDispatchPlan& plan);

// --- Instantiations --------------------------------------------------------------------------------

struct HierDispatchKernelShape {
    bool gin = false;
    int warps = 2, send_warps = 1;  // per block (tuning::hier_dispatch_warps, hier_dispatch_send_warps)
    int hidden = 0, topk = 0;
    int input_payload = device::kPayloadBf16, scale_kind = device::kScaleNone;
    bool masked_layout = false;
    bool operator==(const HierDispatchKernelShape&) const = default;
};
HierDispatchKernelShape hier_dispatch_kernel_shape(bool gin, int hidden, int topk, int input_payload,
                                                   int scale_kind, bool masked_layout);
jit::KernelSource hier_dispatch_source(const HierDispatchKernelShape& shape);
const jit::Kernel& hier_dispatch_kernel(const HierDispatchKernelShape& shape, int device);

struct HierCombineKernelShape {
    bool gin = false;
    int hidden = 0, topk = 0;
    int mode = device::kHtCombineRankMajor;
    int send_group = 1;
    bool operator==(const HierCombineKernelShape&) const = default;
};
jit::KernelSource hier_combine_source(const HierCombineKernelShape& shape);
const jit::Kernel& hier_combine_kernel(const HierCombineKernelShape& shape, int device);

// The argument structs' network context for the buffer's backend (the emulated network's or GIN's).
template <class Backend>
typename Backend::Context network_context(const LaunchContext& context);
template <>
inline device::EmulatedNetContext network_context<device::NetEmulated>(const LaunchContext& context) {
    return context.network->emulated_context();
}
template <>
inline device::GinNetContext network_context<device::NetGin>(const LaunchContext& context) {
    return context.network->gin_context();
}

// How an instantiation of either family is compiled: the nvcc path for GIN, NVRTC otherwise.
jit::CompileOptions hier_compile_options(bool gin);

// Loads the hierarchical kernels of `plan` (ht_load_kernels on a buffer spanning nodes).
void load_hier_kernels(int device, const HtDispatchPlan& plan);

// The GIN instantiations of the catalog shape (compiled by nvcc: not part of kernel_catalog(), whose
// entries all compile with NVRTC). The emulated ones are hier_catalog() (kernel_catalog.hpp).
std::vector<jit::KernelSource> hier_gin_catalog(const CatalogShape& shape);

}  // namespace switchyard::launch
