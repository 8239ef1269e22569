// Launcher of the LL dispatch kernel (and the pieces the LL combine launcher shares).
#include <algorithm>

#include "core/tuning.hpp"
#include "launch/ll_launch.hpp"

namespace switchyard::launch {

jit::KernelSource ll_dispatch_source(const LlDispatchShape& shape) {
    return {"ll_dispatch", "switchyard/ll/dispatch.cuh",
            "switchyard::device::ll_dispatch_kernel<" + std::to_string(tuning::kLlWarps) + ", " +
                std::to_string(tuning::kLlSendItemsPerWarp) + ", " + std::to_string(shape.hidden) + ", " +
                std::to_string(shape.topk) + ", " + std::to_string(shape.scale_kind) + ", " +
                (shape.index_is_int64 ? "long long" : "int") + ", " + std::to_string(shape.phases) + ", " +
                (shape.contiguous ? "true" : "false") + ">"};
}

device::LlBufferArgs ll_buffer_args(const LaunchContext& context, bool mask_unresponsive) {
    device::LlBufferArgs buffer{};
    buffer.peer_bases = context.peer_bases;
    buffer.local_base = context.local_base;
    buffer.workspace = context.layout.workspace;
    buffer.signals = device::LlSignalLayout::make(context.num_ranks);
    buffer.set_layout = context.layout.ll_set;
    buffer.ll_offset = context.layout.ll_offset;
    buffer.ll_set_bytes = context.layout.ll_set_bytes;
    buffer.rank = context.rank;
    buffer.num_ranks = context.num_ranks;
    buffer.mask_unresponsive = mask_unresponsive ? 1 : 0;
    buffer.diagnostics = context.diagnostics;
    return buffer;
}

void launch_ll_kernel(const jit::Kernel& kernel, const LaunchContext& context, int num_blocks,
                      int64_t shared_bytes, const void* args, size_t args_size) {
    jit::LaunchConfig config;
    config.grid[0] = static_cast<unsigned>(std::max(1, num_blocks));
    config.block[0] = 32 * tuning::kLlWarps;
    config.shared_bytes = static_cast<unsigned>(shared_bytes);
    config.stream = context.stream;
    config.cooperative = true;
    jit::launch(kernel, config, args, args_size);  // raises the shared-memory limit as needed
}

int ll_num_blocks(const LaunchContext& context, int num_sms) {
    const int budget = std::max(1, context.sm_budget);
    return num_sms > 0 ? std::min(num_sms, budget) : budget;
}

int ll_dispatch_blocks(const LaunchContext& context, int num_sms, const LlDispatchShape& shape,
                       int64_t max_tokens_per_rank, int64_t max_padding_rows) {
    // Every warp should find one receive item (a 2 KB slice of a record) when every source sends
    // its most tokens: a rank's grid cannot know what its peers send (a 1-token rank may receive
    // 128 tokens from each peer), so it is sized by the buffer's T_ll, not by its own tokens.
    // Blocks beyond the send work only receive: the sending blocks are chosen on the device
    // (ll_sending_blocks), and an idle block costs no arrival. Padding rows to zero are slices
    // of the same size (their scales, a few more stores, ride along).
    const int64_t recv_slices = device::ll_recv_slices(shape.hidden, shape.scale_kind);
    const int64_t recv_blocks =
        ((context.num_ranks * max_tokens_per_rank + max_padding_rows) * recv_slices + tuning::kLlWarps - 1) /
        tuning::kLlWarps;
    const int64_t wanted = std::max<int64_t>(1, recv_blocks);
    return static_cast<int>(std::min<int64_t>(wanted, ll_num_blocks(context, num_sms)));
}

void launch_ll_dispatch(const LaunchContext& context, const device::LlDispatchArgs& args,
                        const LlDispatchShape& shape, int num_blocks) {
    const jit::Kernel& kernel = jit::get_kernel(ll_dispatch_source(shape), context.device);
    launch_ll_kernel(kernel, context, num_blocks,
                     device::ll_dispatch_shared_bytes(context.num_ranks, args.num_experts, args.num_tokens),
                     &args, sizeof(args));
}

}  // namespace switchyard::launch
