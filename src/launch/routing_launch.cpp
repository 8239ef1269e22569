// Launcher of the routing kernel (kernels/switchyard/routing/routing_kernel.cuh): a block per
// chunk of tokens, with the buffer's per-chunk scratch. Two callers: the HT dispatch
// (launch_ht_routing, which also sends the op's counts notify) and Buffer::get_dispatch_layout.
#include <string>

#include "core/tuning.hpp"
#include "jit/jit.hpp"
#include "launch/ht_launch.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/transport/counts_exchange.cuh"

namespace switchyard::launch {

namespace {

// The routing kernels: per index type, with per-warp counts in shared memory or without, with the
// node columns of a buffer spanning nodes or without.
const jit::CachedKernel& cached_routing(bool index_is_int64, bool histogram, bool nodes = false) {
    auto source = [](bool int64, bool with_histogram, bool with_nodes) {
        return jit::KernelSource{
            "dispatch_layout", "switchyard/routing/routing_kernel.cuh",
            std::string("switchyard::device::routing_kernel<") + (int64 ? "long long" : "int") + ", " +
                (with_histogram ? "true" : "false") + (with_nodes ? ", true" : "") + ">"};
    };
    static const jit::CachedKernel kernels[2][2][2] = {
        {{jit::CachedKernel(source(false, false, false)), jit::CachedKernel(source(false, false, true))},
         {jit::CachedKernel(source(false, true, false)), jit::CachedKernel(source(false, true, true))}},
        {{jit::CachedKernel(source(true, false, false)), jit::CachedKernel(source(true, false, true))},
         {jit::CachedKernel(source(true, true, false)), jit::CachedKernel(source(true, true, true))}}};
    return kernels[index_is_int64][histogram][nodes];
}

// Where the routing kernel of an HT dispatch sends the op's counts notify.
device::HtNotifyTarget ht_notify_target(const LaunchContext& context, int32_t local_experts) {
    device::HtNotifyTarget target{};
    target.peer_bases = context.peer_bases;
    target.workspace = context.layout.workspace;
    target.op_counter = context.layout.workspace.counters(context.local_base) + device::kCounterHt;
    target.rank = context.rank;
    target.num_ranks = context.num_ranks;
    target.local_experts = local_experts;
    target.mask =
        context.ht_mask_unresponsive ? context.layout.workspace.ht_mask(context.local_base) : nullptr;
    return target;
}

}  // namespace

void preload_routing(int device, bool nodes) {
    for (bool index_is_int64 : {false, true})
        for (bool histogram : {false, true}) cached_routing(index_is_int64, histogram, nodes).get(device);
}

void launch_routing(const LaunchContext& context, device::RoutingArgs args, bool index_is_int64) {
    const device::RoutingScratch& scratch = context.routing_scratch;
    args.diagnostics = context.diagnostics;
    args.tokens_per_chunk = device::layout_tokens_per_chunk(args.topk);
    args.num_chunks = device::layout_num_chunks(args.num_tokens, args.topk);
    // The buffer's own scratch (sized for its capacities at creation): no allocation per call, and
    // it outlives any graph that captures this launch.
    const bool nodes = args.num_nodes > 1;
    const int32_t rank_columns = device::routing_rank_columns(args.num_ranks, args.num_nodes);
    const int64_t needed = int64_t(args.num_chunks) * (args.num_experts + rank_columns);
    if (needed > scratch.total_words || args.num_chunks > scratch.max_chunks)
        throw InvalidArgument("switchyard: dispatch layout needs " + std::to_string(needed) +
                              " scratch words but the buffer has " + std::to_string(scratch.total_words) +
                              " (tokens, top-k or experts beyond the buffer's capacities)");
    args.chunk_totals = scratch.words;
    args.epoch_word = scratch.epoch();
    args.chunk_tickets = scratch.tickets();
    const bool histogram = device::layout_uses_histogram(args.num_experts, rank_columns);
    const jit::Kernel& kernel = cached_routing(index_is_int64, histogram, nodes).get(context.device);

    jit::LaunchConfig config;
    // A block per chunk, even past this rank's share of a GPU that ranks share: blocks take their
    // chunks in the order they start and wait only for chunks taken before, so blocks that do not
    // fit yet start as others end. All four ranks of 4,096 tokens at top-8 (32 chunks a rank) fit
    // an H200 at once; within a 29-SM share they took two rounds of ~6 us chunks.
    config.grid[0] = unsigned(args.num_chunks);
    config.block[0] = device::kLayoutThreads;
    config.shared_bytes = unsigned(device::layout_shared_bytes(args.num_experts, rank_columns, histogram));
    config.stream = context.stream;
    jit::launch(kernel, config, &args, sizeof(args));
}

void launch_ht_routing(const LaunchContext& context, const HtDispatchPlan& plan,
                       const HtDispatchViews& views) {
    device::RoutingArgs args{};
    args.topk_idx = views.topk_idx.ptr();
    args.topk_row_stride = views.topk_idx.strides[0];
    args.num_tokens = plan.extents.num_tokens;
    args.topk = plan.extents.topk;
    args.num_experts = plan.extents.num_experts;
    args.num_ranks = context.num_ranks;
    args.num_tokens_per_rank = views.num_tokens_per_rank;
    args.num_tokens_per_expert = views.num_tokens_per_expert;
    args.token_rank_slot = views.token_rank_slot;
    args.token_expert_pos = views.token_expert_pos;
    args.topk_copy = views.topk_copy;
    if (views.weights_copy != nullptr) {  // the routing copies the weights with the ids
        args.topk_weights = views.topk_weights.ptr_as<const float>();
        args.weights_row_stride = views.topk_weights.strides[0];
        args.weights_copy = views.weights_copy;
    }
    args.trace = views.trace;
    if (plan.hierarchical()) {
        // Across nodes the routing also gives each token's slot in the stream to each node; the
        // counts go out from the hierarchical dispatch kernel (kernels see only their own node).
        args.num_nodes = plan.num_nodes;
        args.ranks_per_node = plan.ranks_per_node;
        args.token_node_slot = views.token_node_slot;
        args.num_tokens_per_node = views.num_tokens_per_node;
    } else {
        // The routing kernel sends the counts notify as soon as it has the totals.
        args.notify = ht_notify_target(context, plan.extents.local_experts);
    }
    // The dispatch is scheduled as the routing starts only where both grids fit this rank's share;
    // otherwise once every routing block has published (a co-located rank's routing would wait for
    // SMs, and an op across nodes ends with the rail peer of its latest rank; decisions, 2026-12-02).
    args.dependents_early = tuning::dispatch_scheduled_with_routing(
        device::layout_num_chunks(args.num_tokens, args.topk), plan.num_sms, context.sm_budget);
    launch_routing(context, args, plan.index_is_int64);
}

std::vector<jit::KernelSource> routing_catalog() {
    std::vector<jit::KernelSource> sources;
    for (bool nodes : {false, true})
        for (bool index_is_int64 : {false, true})
            for (bool histogram : {true, false})
                sources.push_back(cached_routing(index_is_int64, histogram, nodes).source());
    return sources;
}

}  // namespace switchyard::launch
