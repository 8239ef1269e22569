// Launchers of the low-latency (LL) kernels (kernels/switchyard/ll/): dispatch and combine, each
// one kernel with both halves, or a send and a receive half launched separately (hook mode).
//
// Core validates the call, plans it (an LlDispatchPlan or LlCombinePlan: the kernel's shape and
// the op's extents) and allocates the outputs; the launcher of each kernel family fills that
// kernel's argument struct (ll/ll_args.cuh) from the plan and the views, and spells its template
// arguments and launch constants (core/tuning.hpp) once, for both the template and the launch.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "jit/jit.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/launch_context.hpp"
#include "switchyard/common/op_trace.cuh"
#include "switchyard/ll/combine.cuh"
#include "switchyard/ll/dispatch.cuh"
#include "switchyard/tensor.hpp"

namespace switchyard::launch {

// The template arguments of one LL dispatch kernel, besides the launch constants.
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

// The instantiation of a shape. A half's kernel is specialized only on what it runs, so one
// instantiation serves every op that differs in nothing else: the dispatch's send half writes no
// output layout and its receive half reads no top-k ids; the combine's send half reads no home
// top-k ids and its receive half no y.
jit::KernelSource ll_dispatch_source(const LlDispatchShape& shape);
jit::KernelSource ll_combine_source(const LlCombineShape& shape);

// Every instantiation an LL dispatch of `shape` (its phases ignored) and the combines that answer
// it can use: both halves together and each alone, both reductions.
std::vector<jit::KernelSource> ll_op_sources(const LlDispatchShape& shape);

// The same walk for any pair of LL families (the one-node kernels, or those across nodes): the
// dispatch and combine sources of one op shape, each instantiation once.
using LlDispatchSourceOf = std::function<jit::KernelSource(const LlDispatchShape&)>;
using LlCombineSourceOf = std::function<jit::KernelSource(const LlCombineShape&)>;
std::vector<jit::KernelSource> ll_op_sources_of(const LlDispatchShape& shape,
                                                const LlDispatchSourceOf& dispatch,
                                                const LlCombineSourceOf& combine);
// Every instantiation `op_sources` gives over the catalog shape's scale kinds, index types and
// layouts, dispatches (family `dispatch_family`) first, each once.
std::vector<jit::KernelSource> ll_catalog_of(
    const CatalogShape& catalog,
    const std::function<std::vector<jit::KernelSource>(const LlDispatchShape&)>& op_sources,
    const std::string& dispatch_family);

// One LL dispatch as core planned it.
struct LlDispatchPlan {
    LlDispatchShape shape;         // the phases are the launch's
    int32_t num_tokens = 0;        // T of this rank
    int32_t num_experts = 0;       // E
    int32_t expert_alignment = 1;  // contiguous layout: expert starts are multiples of it
    bool zero_padding = false;     // contiguous layout: zero the segments' padding rows
    int64_t recv_rows = 0;         // contiguous layout: rows of recv_x
    int num_sms = 0;               // at most this many blocks (0: the rank's SM budget)
    bool mask_unresponsive = false;
};

// The device memory of one LL dispatch: the caller's inputs (optional ones undefined) and the
// outputs core allocated (recv_scales: their column-major storage, undefined for bf16).
struct LlDispatchViews {
    TensorView x, topk_idx, topk_weights, cumulative_local_expert_recv_stats, wait_time_stats;
    TensorView recv_x, recv_scales, recv_count, recv_source, recv_expert_offsets;
    TensorView recv_token_rows, recv_token_weights, recv_record_starts;
};

// Launches `phases` of the dispatch on context.stream.
void launch_ll_dispatch(const LaunchContext& context, const LlDispatchPlan& plan,
                        const LlDispatchViews& views, int phases, const device::OpTrace& trace);

// One LL combine as core planned it.
struct LlCombinePlan {
    LlCombineShape shape;     // the phases are the launch's
    int32_t num_tokens = 0;   // T of this rank's dispatch
    int32_t num_experts = 0;  // E
    int32_t y_alignment = 0;  // contiguous y: the dispatch's expert_alignment (0: masked y)
    int num_sms = 0;          // at most this many blocks (0: the rank's SM budget)
    bool mask_unresponsive = false;
};

// The device memory of one LL combine: the caller's y, its home routing and optional weights
// (flat reduction) and statistics, the output core allocated (or the caller's), and the routing
// its dispatch left in the handle.
struct LlCombineViews {
    TensorView y, topk_idx, topk_weights, out, wait_time_stats;
    TensorView recv_count, recv_source, recv_token_rows, recv_token_weights, recv_record_starts;
};

// Launches `phases` of the combine on context.stream.
void launch_ll_combine(const LaunchContext& context, const LlCombinePlan& plan, const LlCombineViews& views,
                       int phases, const device::OpTrace& trace);

// Blocks of an LL kernel: the rank's SM budget, capped by `num_sms` when positive.
int ll_num_blocks(const LaunchContext& context, int num_sms);

// Blocks of an LL dispatch on a buffer of T_ll = `max_tokens_per_rank`: one receive item per warp
// when every source sends T_ll tokens and, with zero_padding, the segments hold their most padding
// rows (`max_padding_rows`, L * (alignment - 1)); one block for T_ll = 1 without padding, at most
// ll_num_blocks.
int ll_dispatch_blocks(const LaunchContext& context, int num_sms, const LlDispatchShape& shape,
                       int64_t max_tokens_per_rank, int64_t max_padding_rows = 0);

// What both LL launchers share: the buffer part of the arguments, and the launch itself
// (tuning::kLlWarps warps per block, cooperative: blocks wait on each other's progress through the
// workspace; on context.stream; `options`: how the kernel is compiled, e.g. nvcc for NetGin).
device::LlBufferArgs ll_buffer_args(const LaunchContext& context, bool mask_unresponsive,
                                    const device::OpTrace& trace);
void launch_ll_kernel(const jit::KernelSource& source, const LaunchContext& context, int num_blocks,
                      int64_t shared_bytes, const void* args, size_t args_size,
                      const jit::CompileOptions& options = {});

// The kernels' argument structs as the plans and views fill them, and the dispatch's grid: the
// one-node launchers' and the ones across nodes (ll_net_launch.hpp) share them.
device::LlDispatchArgs ll_dispatch_args(const LaunchContext& context, const LlDispatchPlan& plan,
                                        const LlDispatchViews& views, const device::OpTrace& trace);
int ll_dispatch_grid(const LaunchContext& context, const LlDispatchPlan& plan, int phases);
device::LlCombineArgs ll_combine_args(const LaunchContext& context, const LlCombinePlan& plan,
                                      const LlCombineViews& views, const device::OpTrace& trace);

}  // namespace switchyard::launch
