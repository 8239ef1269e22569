// Launcher of the LL combine kernel.
#include <algorithm>

#include "launch/ll_launch.hpp"

namespace switchyard::launch {

jit::KernelSource ll_combine_source(const LlCombineShape& shape) {
    return {"ll_combine", "switchyard/ll/combine.cuh",
            "switchyard::device::ll_combine_kernel<" + std::to_string(kLlNumWarps) + ", " +
                std::to_string(shape.hidden) + ", " + std::to_string(shape.topk) + ", " +
                (shape.index_is_int64 ? "long long" : "int") + ", " + std::to_string(shape.phases) + ", " +
                (shape.hierarchical ? "true" : "false") + ", " + (shape.contiguous ? "true" : "false") + ">"};
}

void launch_ll_combine(const LaunchContext& context, const device::LlCombineArgs& args,
                       const LlCombineShape& shape, int num_blocks) {
    const jit::Kernel& kernel = jit::get_kernel(ll_combine_source(shape), context.device);
    launch_ll_kernel(kernel, context, num_blocks,
                     device::ll_combine_shared_bytes(context.num_ranks, args.local_experts), &args,
                     sizeof(args));
}

}  // namespace switchyard::launch
