// What the HT launchers share: the HtCommon fill, loading a shape's kernels ahead, and the catalog
// of every instantiation they can produce.
#include "launch/ht_launch.hpp"

#include "core/tuning.hpp"
#include "launch/kernel_catalog.hpp"

namespace switchyard::launch {

device::HtCommon ht_common(const LaunchContext& context, const HtExtents& extents) {
    device::HtCommon common{};
    common.local_base = context.local_base;
    common.peer_bases = context.peer_bases;
    common.layout = context.layout;
    common.diagnostics = context.diagnostics;
    common.rank = context.rank;
    common.num_ranks = context.num_ranks;
    common.num_tokens = extents.num_tokens;
    common.max_tokens = extents.max_tokens;
    common.num_experts = extents.num_experts;
    common.local_experts = extents.local_experts;
    common.mask_unresponsive = context.ht_mask_unresponsive ? 1 : 0;
    return common;
}

namespace {

// The reductions a combine of a dispatch in `layout` may use.
std::vector<int> combine_modes(RecvLayout layout) {
    if (layout == RecvLayout::kRankMajor) return {device::kHtCombineRankMajor};
    return {device::kHtCombineExpertFlat, device::kHtCombineHierarchical};
}

// Every send group tuning::ht_combine_send_group can pick (the combine's grid is chosen per call).
constexpr int kCombineSendGroups[] = {tuning::kHtCombineSendGroupSmallGrid,
                                      tuning::kHtCombineSendGroupLargeGrid};

}  // namespace

void load_ht_kernels(int device, const HtDispatchPlan& plan) {
    preload_routing(device);
    ht_dispatch_kernel(ht_dispatch_kernel_shape(plan), device);
    ht_receive_kernel(ht_receive_kernel_shape(plan), device);
    for (int mode : combine_modes(plan.layout))
        for (int send_group : kCombineSendGroups)
            ht_combine_kernel({plan.extents.hidden, plan.extents.topk, mode, send_group}, device);
}

std::vector<jit::KernelSource> ht_catalog(const CatalogShape& catalog) {
    std::vector<jit::KernelSource> sources;
    for (const auto& [input_payload, scale_kind] : ht_dispatch_payloads())
        for (bool masked : {false, true})
            sources.push_back(ht_dispatch_source(
                ht_dispatch_kernel_shape(catalog.hidden, catalog.topk, input_payload, scale_kind, masked)));
    for (int scale_kind : {device::kScaleNone, device::kScaleFloat32, device::kScaleUe8m0})
        for (int layout : {device::kHtRankMajor, device::kHtExpertContiguous, device::kHtExpertMasked})
            sources.push_back(ht_receive_source({catalog.hidden, catalog.topk, scale_kind, layout}));
    for (int mode :
         {device::kHtCombineRankMajor, device::kHtCombineExpertFlat, device::kHtCombineHierarchical})
        for (int send_group : kCombineSendGroups)
            sources.push_back(ht_combine_source({catalog.hidden, catalog.topk, mode, send_group}));
    return sources;
}

}  // namespace switchyard::launch
