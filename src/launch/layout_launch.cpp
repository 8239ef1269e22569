// Launcher of the dispatch layout: a count kernel and a write kernel over chunks of tokens
// (kernels/switchyard/layout/layout_kernel.cuh), with their per-chunk scratch.
#include <string>

#include "jit/jit.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::launch {

void launch_dispatch_layout(const LaunchContext& context, device::LayoutArgs args, bool index_is_int64) {
    const std::string index = index_is_int64 ? "long long" : "int";
    const jit::Kernel& count =
        jit::get_kernel({"dispatch_layout_count", "switchyard/layout/layout_kernel.cuh",
                         "switchyard::device::layout_count_kernel<" + index + ">"},
                        context.device);
    const jit::Kernel& write =
        jit::get_kernel({"dispatch_layout_write", "switchyard/layout/layout_kernel.cuh",
                         "switchyard::device::layout_write_kernel<" + index + ">"},
                        context.device);
    args.diagnostics = context.diagnostics;
    args.tokens_per_chunk = device::layout_tokens_per_chunk(args.topk);
    const int32_t chunks = device::layout_num_chunks(args.num_tokens, args.topk);
    // The buffer's own scratch (sized for its capacities at creation): no allocation per call, and
    // it outlives any graph that captures this launch.
    const int64_t needed = int64_t(chunks) * (args.num_experts + args.num_ranks);
    if (needed > context.layout_scratch_ints)
        throw InvalidArgument("switchyard: dispatch layout needs " + std::to_string(needed) +
                              " scratch ints but the buffer has " +
                              std::to_string(context.layout_scratch_ints) +
                              " (tokens, top-k or experts beyond the buffer's capacities)");
    args.chunk_counts = context.layout_scratch;

    jit::LaunchConfig config;
    config.grid[0] = unsigned(chunks);
    config.block[0] = device::kLayoutThreads;
    config.shared_bytes = unsigned(device::layout_shared_bytes(args.num_experts, args.num_ranks));
    config.stream = context.stream;
    jit::launch(count, config, &args, sizeof(args));
    jit::launch(write, config, &args, sizeof(args));
}

}  // namespace switchyard::launch
