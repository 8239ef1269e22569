// Launcher of the dispatch layout kernel.
#include <algorithm>

#include "jit/jit.hpp"
#include "launch/launch_context.hpp"

namespace switchyard::launch {

void launch_dispatch_layout(const LaunchContext& context, device::LayoutArgs args, bool index_is_int64) {
    const jit::Kernel& kernel = jit::get_kernel(
        {"dispatch_layout", "switchyard/layout/layout_kernel.cuh",
         std::string("switchyard::device::layout_kernel<") + (index_is_int64 ? "long long" : "int") + ">"},
        context.device);
    args.diagnostics = context.diagnostics;
    // As many warps as the per-warp counters allow in shared memory (at most 32), but no more
    // than one warp per 8 tokens: the scan over warps costs more than it saves below that.
    constexpr int64_t kSharedLimit = 200 * 1024;
    const int64_t per_warp = device::layout_shared_bytes(1, args.num_experts, args.num_ranks, args.topk);
    int warps = static_cast<int>(std::min<int64_t>(32, kSharedLimit / per_warp));
    warps = std::max(1, std::min(warps, (args.num_tokens + 31) / 32));
    jit::LaunchConfig config;
    config.block[0] = 32 * warps;
    config.shared_bytes = static_cast<unsigned>(
        device::layout_shared_bytes(warps, args.num_experts, args.num_ranks, args.topk) + 16);
    config.stream = context.stream;
    kernel.ensure_dynamic_shared(config.shared_bytes);
    jit::launch(kernel, config, &args, sizeof(args));
}

}  // namespace switchyard::launch
