// Launchers of the low-latency (LL) kernels: dispatch and combine, each as one kernel with both
// halves or as a send half and a receive half (hook mode). One argument struct per kernel family
// (kernels/switchyard/ll/dispatch.cuh, combine.cuh); this header adds the template constants.
#pragma once

#include <string>

#include "jit/jit.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/ll/combine.cuh"
#include "switchyard/ll/dispatch.cuh"

namespace switchyard::launch {

// Template constants of one LL dispatch specialization.
struct LlDispatchShape {
    int hidden = 0;
    int topk = 0;
    int scale_kind = device::kScaleNone;  // kScaleNone (bf16), kScaleFloat32, kScaleUe8m0
    bool index_is_int64 = false;
    int phases = device::kLlBothHalves;
    bool contiguous = false;  // the expert-major contiguous layout (else masked): a kernel of its own
};

struct LlCombineShape {
    int hidden = 0;
    int topk = 0;
    bool index_is_int64 = false;
    int phases = device::kLlBothHalves;
    bool hierarchical = false;  // the reduction: a kernel of its own (ll/combine.cuh says why)
    bool contiguous = false;    // y in the expert-major contiguous layout (else masked): likewise
};

jit::KernelSource ll_dispatch_source(const LlDispatchShape& shape);
jit::KernelSource ll_combine_source(const LlCombineShape& shape);

// The buffer part of the LL kernels' arguments, from a rank's launch context.
device::LlBufferArgs ll_buffer_args(const LaunchContext& context, bool mask_unresponsive);

// Blocks of an LL kernel: the rank's SM budget, capped by `num_sms` when positive.
int ll_num_blocks(const LaunchContext& context, int num_sms);

// Blocks of an LL dispatch on a buffer of T_ll = `max_tokens_per_rank`: one receive item per warp
// when every source sends T_ll tokens and, with zero_padding, the segments hold their most padding
// rows (`max_padding_rows`, L * (alignment - 1)); one block for T_ll = 1 without padding, at most
// ll_num_blocks.
int ll_dispatch_blocks(const LaunchContext& context, int num_sms, const LlDispatchShape& shape,
                       int64_t max_tokens_per_rank, int64_t max_padding_rows = 0);

// The launch both LL kernels use: tuning::kLlWarps warps per block, cooperative (blocks wait on each
// other's progress through the workspace), on the buffer's stream.
void launch_ll_kernel(const jit::Kernel& kernel, const LaunchContext& context, int num_blocks,
                      int64_t shared_bytes, const void* args, size_t args_size);

// Cooperative launches (every block may wait on another block's signal) on context.stream.
void launch_ll_dispatch(const LaunchContext& context, const device::LlDispatchArgs& args,
                        const LlDispatchShape& shape, int num_blocks);
void launch_ll_combine(const LaunchContext& context, const device::LlCombineArgs& args,
                       const LlCombineShape& shape, int num_blocks);

}  // namespace switchyard::launch
