// Launcher of the LL combine kernel.
#include <algorithm>

#include "launch/ll_launch.hpp"

namespace switchyard::launch {

jit::KernelSource ll_combine_source(const LlCombineShape& shape) {
    return {"ll_combine", "switchyard/ll/combine.cuh",
            "switchyard::device::ll_combine_kernel<" + std::to_string(kLlNumWarps) + ", " +
                std::to_string(shape.hidden) + ", " + std::to_string(shape.topk) + ", " +
                (shape.index_is_int64 ? "long long" : "int") + ", " + std::to_string(shape.phases) + ">"};
}

void launch_ll_combine(const LaunchContext& context, const device::LlCombineArgs& args,
                       const LlCombineShape& shape, int num_blocks) {
    const jit::Kernel& kernel = jit::get_kernel(ll_combine_source(shape), context.device);
    jit::LaunchConfig config;
    config.grid[0] = static_cast<unsigned>(std::max(1, num_blocks));
    config.block[0] = 32 * kLlNumWarps;
    config.shared_bytes =
        static_cast<unsigned>(device::ll_combine_shared_bytes(context.num_ranks, args.local_experts));
    config.stream = context.stream;
    config.cooperative = true;
    kernel.ensure_dynamic_shared(config.shared_bytes);
    jit::launch(kernel, config, args);
}

}  // namespace switchyard::launch
