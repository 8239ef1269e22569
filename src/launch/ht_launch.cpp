// Launchers of the high-throughput kernels.
#include "launch/ht_launch.hpp"

#include <algorithm>
#include <cstdlib>

#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "switchyard/ht/combine_bulk_send.cuh"
#include "util/env_knobs.hpp"

namespace switchyard::launch {

namespace {
// Shared memory a dispatch block may use for its warps' two-stage token pipelines.
constexpr int kDispatchSharedBudget = 200 * 1024;
constexpr int kMaxDispatchWarps = 16;

const jit::CachedKernel& cached_ht_dispatch() {
    static const jit::CachedKernel cached(
        {"ht_dispatch", "switchyard/ht/dispatch.cuh", "switchyard::device::ht_dispatch_kernel"});
    return cached;
}

const jit::CachedKernel& cached_ht_receive() {
    static const jit::CachedKernel cached(
        {"ht_receive", "switchyard/ht/receive.cuh", "switchyard::device::ht_receive_kernel"});
    return cached;
}

const jit::CachedKernel& cached_ht_combine(bool publish) {
    static const jit::CachedKernel register_signals(
        {"ht_combine", "switchyard/ht/combine.cuh", "switchyard::device::ht_combine_kernel<false>"});
    static const jit::CachedKernel publisher(
        {"ht_combine", "switchyard/ht/combine.cuh", "switchyard::device::ht_combine_kernel<true>"});
    return publish ? publisher : register_signals;
}
}  // namespace

bool combine_publisher() {
    static const bool publisher = true;
    return publisher;
}

void preload_ht(int device) {
    for (const jit::CachedKernel* kernel :
         {&cached_ht_dispatch(), &cached_ht_receive(), &cached_ht_combine(combine_publisher())})
        kernel->get(device);
}

device::HtCommon ht_common(const LaunchContext& context) {
    device::HtCommon common{};
    common.local_base = context.local_base;
    common.peer_bases = context.peer_bases;
    common.layout = context.layout;
    common.diagnostics = context.diagnostics;
    common.rank = context.rank;
    common.num_ranks = context.num_ranks;
    return common;
}

device::HtNotifyTarget ht_notify_target(const LaunchContext& context, int32_t local_experts) {
    device::HtNotifyTarget target{};
    target.peer_bases = context.peer_bases;
    target.workspace = context.layout.workspace;
    target.op_counter = context.layout.workspace.counters(context.local_base) + device::kCounterHt;
    target.rank = context.rank;
    target.num_ranks = context.num_ranks;
    target.local_experts = local_experts;
    return target;
}

void launch_ht_dispatch(const LaunchContext& context, const device::HtDispatchArgs& args, int num_sms) {
    const jit::Kernel& kernel = cached_ht_dispatch().get(context.device);
    // SWITCHYARD_HT_DISPATCH_WARPS caps the warps per block (read once per process; an A/B knob).
    // Fewer warps than the budget allows were no faster where the op is fastest: FP8 116.9-117.4 us
    // at 16 SMs with 10 or 13 warps, 117.0 at 24 with 8; BF16 191 us either way (2 x H200, EP2,
    // log ht-dispatch-warps-thirteenth-session).
    static const int max_warps =
        kMaxDispatchWarps;
    const int warps = std::clamp(kDispatchSharedBudget / (2 * args.stage_bytes), 1, max_warps);
    jit::LaunchConfig config;
    config.grid[0] = unsigned(num_sms);
    config.block[0] = unsigned(32 * warps);
    config.shared_bytes = unsigned(2 * args.stage_bytes * warps);
    config.stream = context.stream;
    // Every block waits for the peers' counts, which this grid's block 0 also sends: all blocks
    // must be resident. A cooperative launch guarantees that, but it also waits for the layout
    // kernel to end instead of starting early under programmatic dependent launch (2.2 vs 0.8 us
    // from the layout's end to the counts notify, H200). When the kernels are chained (this rank
    // has its GPU alone), every block still finds an SM: the layout blocks end without waiting
    // for this grid, no co-located rank's blocks wait for this rank, and the next grid (receive)
    // is scheduled only once every block of this one runs.
    config.cooperative = !context.chain_kernels;
    config.programmatic_dependent_launch = context.chain_kernels;  // after the layout kernel
    jit::launch(kernel, config, &args, sizeof(args));
}

void launch_ht_receive(const LaunchContext& context, const device::HtReceiveArgs& args) {
    const jit::Kernel& kernel = cached_ht_receive().get(context.device);
    jit::LaunchConfig config;
    // No waits on other ranks: any grid works. Use the rank's SM budget several blocks deep.
    config.grid[0] = unsigned(std::max(1, context.sm_budget) * 4);
    config.block[0] = 256;
    config.stream = context.stream;
    config.programmatic_dependent_launch = context.chain_kernels;  // after the dispatch kernel
    jit::launch(kernel, config, &args, sizeof(args));
}

void launch_ht_combine(const LaunchContext& context, const device::HtCombineArgs& args, int num_sms) {
    const jit::Kernel& kernel = cached_ht_combine(args.publish != 0).get(context.device);
    jit::LaunchConfig config;
    config.grid[0] = unsigned(num_sms);
    config.block[0] = 512;
    config.shared_bytes =
        args.bulk_stages > 0
            ? unsigned(args.bulk_stages * device::ht_bulk_stage_bytes(args.record.total_bytes))
            : 0u;
    config.stream = context.stream;
    config.cooperative = true;
    jit::launch(kernel, config, &args, sizeof(args));
}

std::vector<jit::KernelSource> ht_catalog(const CatalogShape&) {
    return {cached_ht_dispatch().source(), cached_ht_receive().source(), cached_ht_combine(true).source()};
}

}  // namespace switchyard::launch
