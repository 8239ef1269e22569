// Launcher of the LL combine kernel.
#include <algorithm>

#include "core/tuning.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/ll_launch.hpp"

namespace switchyard::launch {

jit::KernelSource ll_combine_source(const LlCombineShape& shape) {
    return {"ll_combine", "switchyard/ll/combine.cuh",
            "switchyard::device::ll_combine_kernel<" + std::to_string(tuning::kLlWarps) + ", " +
                std::to_string(tuning::kLlSendItemsPerWarp) + ", " + std::to_string(shape.hidden) + ", " +
                std::to_string(shape.topk) + ", " + (shape.index_is_int64 ? "long long" : "int") + ", " +
                std::to_string(shape.phases) + ", " + (shape.hierarchical ? "true" : "false") + ", " +
                (shape.contiguous ? "true" : "false") + ">"};
}

void launch_ll_combine(const LaunchContext& context, const device::LlCombineArgs& args,
                       const LlCombineShape& shape, int num_blocks) {
    const jit::Kernel& kernel = jit::get_kernel(ll_combine_source(shape), context.device);
    launch_ll_kernel(kernel, context, num_blocks,
                     device::ll_combine_shared_bytes(context.num_ranks, args.local_experts), &args,
                     sizeof(args));
}

std::vector<jit::KernelSource> ll_catalog(const CatalogShape& catalog) {
    std::vector<jit::KernelSource> sources;
    for (int scale_kind : {device::kScaleNone, device::kScaleFloat32, device::kScaleUe8m0})
        for (bool index_is_int64 : {false, true})
            for (int phases : {device::kLlSendHalf, device::kLlRecvHalf, device::kLlBothHalves})
                for (bool contiguous : {false, true})
                    sources.push_back(ll_dispatch_source(
                        {catalog.hidden, catalog.topk, scale_kind, index_is_int64, phases, contiguous}));
    for (bool index_is_int64 : {false, true})
        for (int phases : {device::kLlSendHalf, device::kLlRecvHalf, device::kLlBothHalves})
            for (bool hierarchical : {false, true})
                for (bool contiguous : {false, true})
                    sources.push_back(ll_combine_source(
                        {catalog.hidden, catalog.topk, index_is_int64, phases, hierarchical, contiguous}));
    return sources;
}

}  // namespace switchyard::launch
