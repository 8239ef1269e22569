// What the hierarchical launchers share: loading a shape's kernels ahead, and the catalog of every
// instantiation they can produce (the emulated network's in kernel_catalog(), GIN's apart: nvcc).
#include "launch/hier_launch.hpp"

#include "core/tuning.hpp"
#include "launch/kernel_catalog.hpp"

namespace switchyard::launch {

namespace {

constexpr int kCombineSendGroups[] = {tuning::kHtCombineSendGroupSmallGrid, tuning::kHtCombineSendGroupLargeGrid};

std::vector<jit::KernelSource> catalog_of(bool gin, const CatalogShape& catalog) {
    std::vector<jit::KernelSource> sources;
    for (const auto& [input_payload, scale_kind] : ht_dispatch_payloads())
        for (bool masked : {false, true})
            sources.push_back(hier_dispatch_source(
                hier_dispatch_kernel_shape(gin, catalog.hidden, catalog.topk, input_payload, scale_kind, masked)));
    for (int mode : {device::kHtCombineRankMajor, device::kHtCombineExpertFlat, device::kHtCombineHierarchical})
        for (int send_group : kCombineSendGroups)
            sources.push_back(hier_combine_source({gin, catalog.hidden, catalog.topk, mode, send_group}));
    return sources;
}

}  // namespace

void load_hier_kernels(int device, const HtDispatchPlan& plan) {
    preload_routing(device, true);
    hier_dispatch_kernel(hier_dispatch_kernel_shape(plan.gin, plan.extents.hidden, plan.extents.topk,
                                                    plan.input_payload, plan.scale_kind,
                                                    plan.layout == RecvLayout::kExpertMasked),
                         device);
    ht_receive_kernel(ht_receive_kernel_shape(plan), device);
    const std::vector<int> modes = plan.layout == RecvLayout::kRankMajor
                                       ? std::vector<int>{device::kHtCombineRankMajor}
                                       : std::vector<int>{device::kHtCombineExpertFlat, device::kHtCombineHierarchical};
    for (int mode : modes)
        for (int send_group : kCombineSendGroups)
            hier_combine_kernel({plan.gin, plan.extents.hidden, plan.extents.topk, mode, send_group}, device);
}

std::vector<jit::KernelSource> hier_catalog(const CatalogShape& shape) {
    return catalog_of(false, shape);
}

std::vector<jit::KernelSource> hier_gin_catalog(const CatalogShape& shape) {
    return catalog_of(true, shape);
}

}  // namespace switchyard::launch
