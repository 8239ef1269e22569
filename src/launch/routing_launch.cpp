// Launcher of the dispatch layout kernel (kernels/switchyard/routing/routing_kernel.cuh): one
// cooperative grid over chunks of tokens, with the buffer's per-chunk scratch.
#include <algorithm>
#include <string>

#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::launch {

namespace {

const jit::CachedKernel& cached_layout(bool index_is_int64) {
    static const jit::CachedKernel int32_ids(
        {"dispatch_layout", "switchyard/routing/routing_kernel.cuh", "switchyard::device::routing_kernel<int>"});
    static const jit::CachedKernel int64_ids({"dispatch_layout", "switchyard/routing/routing_kernel.cuh",
                                              "switchyard::device::routing_kernel<long long>"});
    return index_is_int64 ? int64_ids : int32_ids;
}

}  // namespace

void preload_routing(int device) {
    for (bool index_is_int64 : {false, true}) cached_layout(index_is_int64).get(device);
}

void launch_routing(const LaunchContext& context, device::RoutingArgs args, bool index_is_int64) {
    const jit::Kernel& kernel = cached_layout(index_is_int64).get(context.device);
    const device::RoutingScratch& scratch = context.routing_scratch;
    args.diagnostics = context.diagnostics;
    args.tokens_per_chunk = device::layout_tokens_per_chunk(args.topk);
    args.num_chunks = device::layout_num_chunks(args.num_tokens, args.topk);
    // The buffer's own scratch (sized for its capacities at creation): no allocation per call, and
    // it outlives any graph that captures this launch.
    const int64_t needed = int64_t(args.num_chunks) * (args.num_experts + args.num_ranks);
    if (needed > scratch.total_words || args.num_chunks > scratch.max_chunks)
        throw InvalidArgument("switchyard: dispatch layout needs " + std::to_string(needed) +
                              " scratch words but the buffer has " + std::to_string(scratch.total_words) +
                              " (tokens, top-k or experts beyond the buffer's capacities)");
    args.chunk_totals = scratch.words;
    args.epoch_word = scratch.epoch();
    args.histogram = device::layout_uses_histogram(args.num_experts, args.num_ranks) ? 1 : 0;

    jit::LaunchConfig config;
    // Every block must be resident (a block waits for earlier chunks): at most one per SM of this
    // rank's budget; a block takes several chunks when there are more.
    config.grid[0] = unsigned(std::min(args.num_chunks, std::max(1, context.sm_budget)));
    config.block[0] = device::kLayoutThreads;
    config.shared_bytes =
        unsigned(device::layout_shared_bytes(args.num_experts, args.num_ranks, args.histogram));
    config.cooperative = true;
    config.stream = context.stream;
    jit::launch(kernel, config, &args, sizeof(args));
}

std::vector<jit::KernelSource> routing_catalog() {
    return {cached_layout(false).source(), cached_layout(true).source()};
}

}  // namespace switchyard::launch
