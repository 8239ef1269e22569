// Low-latency (LL) dispatch and combine (DESIGN.md §2, §5), core's part: each op validates its
// arguments (core/validation), plans its kernel, allocates its outputs and hands plan and views to
// the kernel family's launcher (launch/ll_launch.hpp) on the buffer's communication stream. Both
// ops are one kernel each (or a send and a receive half in hook mode), with no host round-trip,
// so they can be captured in CUDA graphs.
#include <memory>
#include <string>

#include "core/buffer_impl.hpp"
#include "core/ll_handle.hpp"
#include "core/op_trace.hpp"
#include "core/validation.hpp"
#include "launch/ll_launch.hpp"
#include "launch/ll_net_launch.hpp"
#include "switchyard/ll/net_layout.cuh"
#include "net/network.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "util/cuda_check.hpp"

namespace switchyard {
namespace {

// A buffer whose ranks span nodes runs the LL kernels across nodes (launch/ll_net_launch.hpp):
// the one-node kernels reach their peers through the device peer table, which holds null for
// ranks on other nodes.
bool across_nodes(const Buffer::Impl& impl) {
    return impl.network != nullptr;
}

// The LL kernels across nodes number their signals per source node and keep a bit per node and
// per rank of a node in 64-bit words (ll/net_layout.cuh).
void require_supported_nodes(const Buffer::Impl& impl, const char* op) {
    if (!across_nodes(impl)) return;
    const comm::NodeLayout& layout = impl.network->layout();
    if (layout.num_nodes > device::kLlNetMaxNodes || layout.ranks_per_node > 64)
        throw UnsupportedError(
            std::string("switchyard: ") + op + ": the low-latency kernels across nodes support up to " +
            std::to_string(device::kLlNetMaxNodes) + " nodes of up to 64 ranks; this buffer spans " +
            std::to_string(layout.num_nodes) + " nodes of " + std::to_string(layout.ranks_per_node));
}

bool on_gin(const Buffer::Impl& impl) {
    return impl.network && impl.network->kind() == net::NetworkKind::kGin;
}

core::ValidationContext ll_validation_context(const Buffer::Impl& impl) {
    return core::make_validation_context(impl.config, impl.communicator->size(), Device::cuda(impl.device),
                                         impl.config.ll_max_tokens_per_rank);
}

// The launch of one op: both halves, or (hook mode) the send half now and the receive half later.
int first_phases(bool return_recv_hook) {
    return return_recv_hook ? device::kLlSendHalf : device::kLlBothHalves;
}

// The ops' timelines (core/op_trace.hpp). Each half of a hook-mode op is traced as an op of its own.
device::OpTrace ll_dispatch_trace(Buffer::Impl& impl, int phases) {
    static const core::TracedOp kOps[] = {core::TracedOp::kLlDispatchSend, core::TracedOp::kLlDispatchReceive,
                                          core::TracedOp::kLlDispatch};
    return impl.tracer->begin(kOps[phases - 1]);
}

device::OpTrace ll_combine_trace(Buffer::Impl& impl, int phases) {
    static const core::TracedOp kOps[] = {core::TracedOp::kLlCombineSend, core::TracedOp::kLlCombineReceive,
                                          core::TracedOp::kLlCombine};
    return impl.tracer->begin(kOps[phases - 1]);
}

int32_t scale_kind_of(bool use_fp8, ScaleFormat format) {
    if (!use_fp8) return device::kScaleNone;
    return format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0 : device::kScaleFloat32;
}

// The kernel shape of a validated dispatch (the phases are the launch's).
launch::LlDispatchShape dispatch_shape(const LowLatencyDispatchArgs& args) {
    launch::LlDispatchShape shape;
    shape.hidden = static_cast<int>(args.x.shape[1]);
    shape.topk = static_cast<int>(args.topk_idx.shape[1]);
    shape.scale_kind = scale_kind_of(args.use_fp8, args.scale_format);
    shape.index_is_int64 = args.topk_idx.dtype == DType::kInt64;
    shape.contiguous = args.layout == RecvLayout::kExpertContiguous;
    return shape;
}

// The handle of a validated dispatch: its shape and options (its routing tensors are outputs,
// allocate_dispatch_outputs).
std::shared_ptr<LowLatencyHandle> make_dispatch_handle(const LowLatencyDispatchArgs& args, int num_ranks,
                                                       int32_t max_tokens, int32_t num_nodes) {
    auto handle = std::make_shared<LowLatencyHandle>();
    handle->num_tokens = static_cast<int32_t>(args.x.shape[0]);
    handle->hidden = static_cast<int32_t>(args.x.shape[1]);
    handle->topk = static_cast<int32_t>(args.topk_idx.shape[1]);
    handle->num_experts = args.num_experts;
    handle->num_ranks = num_ranks;
    handle->local_experts = args.num_experts / num_ranks;
    handle->max_tokens = max_tokens;
    handle->index_is_int64 = args.topk_idx.dtype == DType::kInt64;
    handle->use_fp8 = args.use_fp8;
    handle->scale_format = args.use_fp8 ? args.scale_format : ScaleFormat::kNone;
    handle->has_weights = args.topk_weights.defined();
    handle->layout = args.layout;
    handle->expert_alignment = args.expert_alignment;
    handle->num_nodes = num_nodes;
    handle->contiguous_rows = args.layout == RecvLayout::kExpertContiguous
                                  ? device::ll_contiguous_rows(num_ranks, max_tokens, handle->topk,
                                                               handle->local_experts, args.expert_alignment)
                                  : 0;
    return handle;
}

launch::LlDispatchPlan dispatch_plan(const LowLatencyDispatchArgs& args, const LowLatencyHandle& handle,
                                     const BufferConfig& config) {
    launch::LlDispatchPlan plan;
    plan.shape = dispatch_shape(args);
    plan.num_tokens = handle.num_tokens;
    plan.num_experts = handle.num_experts;
    plan.expert_alignment = args.expert_alignment;
    plan.zero_padding = args.zero_padding;
    plan.recv_rows = handle.contiguous_rows;
    plan.num_sms = config.num_sms;
    plan.mask_unresponsive = config.ll_mask_unresponsive_ranks;
    return plan;
}

// The dispatch's outputs in one allocation on `stream` (host time, see allocate_group): recv_x and
// its column-major scales ([L, R*T_ll] rows masked, the contiguous capacity otherwise) into the
// result, the combine's routing into the handle.
void allocate_dispatch_outputs(const Buffer::Impl& impl, LowLatencyHandle& handle,
                               LowLatencyDispatchResult& result, cudaStream_t stream) {
    const int64_t R = handle.num_ranks, L = handle.local_experts, H = handle.hidden, K = handle.topk;
    const int64_t rows = handle.rows_per_expert(), x_rows = handle.contiguous_rows;
    const int32_t scale_kind = scale_kind_of(handle.use_fp8, handle.scale_format);
    const int64_t words = device::RecordLayout::scale_words(H, scale_kind);
    const DType x_dtype = handle.use_fp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
    const DType scale_dtype = scale_kind == device::kScaleUe8m0 ? DType::kInt32 : DType::kFloat32;
    const bool contiguous = handle.layout == RecvLayout::kExpertContiguous;
    const int64_t others = handle.num_nodes - 1, T_ll = handle.max_tokens;
    auto outputs = contiguous
                       ? impl.outputs->allocate_group({{x_dtype, {x_rows, H}},
                                                       {DType::kInt32, {L}},
                                                       {DType::kInt32, {L, rows}},
                                                       {scale_dtype, {handle.use_fp8 ? words : 0, x_rows}},
                                                       {DType::kInt32, {L + 1}},
                                                       {DType::kInt32, {rows, K + 1}},
                                                       {DType::kFloat32, {rows, K}},
                                                       {DType::kInt32, {R + 1}},
                                                       {DType::kInt32, {others, T_ll, K + 1}},
                                                       {DType::kInt32, {others}}},
                                                      stream)
                       : impl.outputs->allocate_group({{x_dtype, {L, rows, H}},
                                                       {DType::kInt32, {L}},
                                                       {DType::kInt32, {L, rows}},
                                                       {scale_dtype, {handle.use_fp8 ? L : 0, words, rows}},
                                                       {DType::kInt32, {L + 1}},
                                                       {DType::kInt32, {rows, K + 1}},
                                                       {DType::kFloat32, {rows, K}},
                                                       {DType::kInt32, {R + 1}},
                                                       {DType::kInt32, {others, T_ll, K + 1}},
                                                       {DType::kInt32, {others}}},
                                                      stream);
    result.recv_x = outputs[0];
    handle.recv_count = outputs[1];
    handle.recv_source = outputs[2];
    result.recv_expert_offsets = outputs[4];
    handle.recv_token_rows = outputs[5];
    handle.recv_token_weights = outputs[6];
    handle.recv_record_starts = outputs[7];
    handle.forward_rows = outputs[8];
    handle.forward_counts = outputs[9];
    if (!handle.use_fp8) return;
    handle.recv_scales_storage = outputs[3];
    const TensorView& storage = handle.recv_scales_storage.view();
    result.recv_scales =
        DeviceTensor::borrow(contiguous ? TensorView::strided(storage.ptr(), storage.dtype, {x_rows, words},
                                                              {1, x_rows}, storage.device)
                                        : TensorView::strided(storage.ptr(), storage.dtype, {L, rows, words},
                                                              {words * rows, 1, rows}, storage.device));
}

launch::LlDispatchViews dispatch_views(const LowLatencyDispatchArgs& args, const LowLatencyHandle& handle,
                                       const LowLatencyDispatchResult& result) {
    launch::LlDispatchViews views;
    views.x = args.x;
    views.topk_idx = args.topk_idx;
    views.topk_weights = args.topk_weights;
    views.cumulative_local_expert_recv_stats = args.cumulative_local_expert_recv_stats;
    views.wait_time_stats = args.wait_time_stats;
    views.recv_x = result.recv_x.view();
    if (handle.use_fp8) views.recv_scales = handle.recv_scales_storage.view();
    views.recv_count = handle.recv_count.view();
    views.recv_source = handle.recv_source.view();
    views.recv_expert_offsets = result.recv_expert_offsets.view();
    views.recv_token_rows = handle.recv_token_rows.view();
    views.recv_token_weights = handle.recv_token_weights.view();
    views.recv_record_starts = handle.recv_record_starts.view();
    return views;
}

launch::LlNetViews net_views(const LowLatencyHandle& handle) {
    return {handle.forward_rows.view(), handle.forward_counts.view()};
}

// One launch of `phases` of a dispatch or combine: the one-node kernels, or those across nodes.
void launch_dispatch(const Buffer::Impl& impl, const launch::LaunchContext& context,
                     const launch::LlDispatchPlan& plan, const launch::LlDispatchViews& views,
                     const LowLatencyHandle& handle, int phases, const device::OpTrace& trace) {
    if (across_nodes(impl))
        launch::launch_ll_net_dispatch(context, plan, views, net_views(handle), phases, trace);
    else
        launch::launch_ll_dispatch(context, plan, views, phases, trace);
}

void launch_combine(const Buffer::Impl& impl, const launch::LaunchContext& context,
                    const launch::LlCombinePlan& plan, const launch::LlCombineViews& views,
                    const LowLatencyHandle& handle, int phases, const device::OpTrace& trace) {
    if (across_nodes(impl))
        launch::launch_ll_net_combine(context, plan, views, net_views(handle), phases, trace);
    else
        launch::launch_ll_combine(context, plan, views, phases, trace);
}

launch::LlCombinePlan combine_plan(const LowLatencyCombineArgs& args, const LowLatencyHandle& handle,
                                   const BufferConfig& config) {
    const bool contiguous = handle.layout == RecvLayout::kExpertContiguous;
    launch::LlCombinePlan plan;
    plan.shape.hidden = handle.hidden;
    plan.shape.topk = handle.topk;
    plan.shape.index_is_int64 = args.topk_idx.dtype == DType::kInt64;
    plan.shape.hierarchical = args.hierarchical;
    plan.shape.contiguous = contiguous;
    plan.num_tokens = handle.num_tokens;
    plan.num_experts = handle.num_experts;
    plan.y_alignment = contiguous ? handle.expert_alignment : 0;
    plan.num_sms = config.num_sms;
    plan.mask_unresponsive = config.ll_mask_unresponsive_ranks;
    return plan;
}

// `y`: the caller's, or the zero-copy area (ll_combine_input); `out`: allocated or the caller's.
launch::LlCombineViews combine_views(const LowLatencyCombineArgs& args, const LowLatencyHandle& handle,
                                     const TensorView& y, const TensorView& out) {
    launch::LlCombineViews views;
    views.y = y;
    views.topk_idx = args.topk_idx;
    views.topk_weights = args.topk_weights;
    views.out = out;
    views.wait_time_stats = args.wait_time_stats;
    views.recv_count = handle.recv_count.view();
    views.recv_source = handle.recv_source.view();
    views.recv_token_rows = handle.recv_token_rows.view();
    views.recv_token_weights = handle.recv_token_weights.view();
    views.recv_record_starts = handle.recv_record_starts.view();
    return views;
}

}  // namespace

void Buffer::ll_load_kernels(const LowLatencyDispatchArgs& args) {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_load_kernels");
    require_supported_nodes(impl, "ll_load_kernels");
    core::validate_ll_dispatch(args, ll_validation_context(impl));
    if (!across_nodes(impl)) {
        for (const jit::KernelSource& source : launch::ll_op_sources(dispatch_shape(args)))
            jit::get_kernel(source, impl.device);
        return;
    }
    const bool gin = on_gin(impl);
    for (const jit::KernelSource& source : launch::ll_net_op_sources(dispatch_shape(args), gin))
        jit::get_kernel(source, impl.device, launch::ll_net_compile_options(gin));
}

LowLatencyDispatchResult Buffer::ll_dispatch(const LowLatencyDispatchArgs& args, cudaStream_t stream) {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_dispatch");
    require_supported_nodes(impl, "ll_dispatch");
    core::validate_ll_dispatch(args, ll_validation_context(impl));
    core::require_device_resident(args.topk_idx, "topk_idx", impl.device);
    const std::shared_ptr<LowLatencyHandle> handle =
        make_dispatch_handle(args, num_ranks(), impl.config.ll_max_tokens_per_rank, impl.topology.num_nodes);
    const launch::LlDispatchPlan plan = dispatch_plan(args, *handle, impl.config);
    const int phases = first_phases(args.return_recv_hook);
    const device::OpTrace trace = ll_dispatch_trace(impl, phases);
    const launch::LaunchContext context = impl.context(stream);

    LowLatencyDispatchResult result;
    launch::LlDispatchViews views;
    result.done = impl.run_ordered(stream, args.order, [&] {
        // Allocated on the op's stream once it follows the caller's stream.
        allocate_dispatch_outputs(impl, *handle, result, impl.op_stream(stream));
        views = dispatch_views(args, *handle, result);
        launch_dispatch(impl, context, plan, views, *handle, phases, trace);
    });
    result.recv_count = handle->recv_count;
    result.handle = handle;
    if (!args.return_recv_hook) return result;

    // The receive half reads nothing of the caller's inputs; it keeps the outputs alive.
    Impl* impl_pointer = impl_.get();
    const OpOrder receive_order{nullptr, args.order.async};
    result.receive = [impl_pointer, plan, views, stream, receive_order, handle, recv_x = result.recv_x,
                      offsets = result.recv_expert_offsets] {
        const device::OpTrace receive_trace = ll_dispatch_trace(*impl_pointer, device::kLlRecvHalf);
        return impl_pointer->run_ordered(stream, receive_order, [&] {
            launch_dispatch(*impl_pointer, impl_pointer->context(stream), plan, views, *handle,
                            device::kLlRecvHalf, receive_trace);
        });
    };
    return result;
}

LowLatencyCombineResult Buffer::ll_combine(const LowLatencyCombineArgs& args,
                                           const std::shared_ptr<const LowLatencyHandle>& handle,
                                           cudaStream_t stream) {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_combine");
    require_supported_nodes(impl, "ll_combine");
    core::validate_ll_combine(args, handle.get(), ll_validation_context(impl));
    core::require_device_resident(args.topk_idx, "topk_idx", impl.device);
    const TensorView y =
        args.zero_copy ? ll_combine_input(*handle) : core::ll_combine_y_view(args.y, *handle);
    const launch::LlCombinePlan plan = combine_plan(args, *handle, impl.config);
    const int phases = first_phases(args.return_recv_hook);
    const device::OpTrace trace = ll_combine_trace(impl, phases);
    const launch::LaunchContext context = impl.context(stream);

    LowLatencyCombineResult result;
    launch::LlCombineViews views;
    result.done = impl.run_ordered(stream, args.order, [&] {
        result.out = args.out.defined()
                         ? DeviceTensor::borrow(args.out)
                         : impl.outputs->allocate(DType::kBFloat16, {handle->num_tokens, handle->hidden},
                                                  impl.op_stream(stream));
        views = combine_views(args, *handle, y, result.out.view());
        launch_combine(impl, context, plan, views, *handle, phases, trace);
    });
    if (!args.return_recv_hook) return result;

    Impl* impl_pointer = impl_.get();
    const OpOrder receive_order{nullptr, args.order.async};
    result.receive = [impl_pointer, plan, views, stream, receive_order, handle, out = result.out] {
        const device::OpTrace receive_trace = ll_combine_trace(*impl_pointer, device::kLlRecvHalf);
        return impl_pointer->run_ordered(stream, receive_order, [&] {
            launch_combine(*impl_pointer, impl_pointer->context(stream), plan, views, *handle,
                           device::kLlRecvHalf, receive_trace);
        });
    };
    return result;
}

TensorView Buffer::ll_combine_input(const LowLatencyHandle& handle) const {
    const Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_combine_input");
    core::validate_ll_combine_input(handle, impl.layout.ll_zero_copy_bytes != 0, ll_validation_context(impl));
    const int64_t L = handle.local_experts, rows = handle.rows_per_expert(), H = handle.hidden;
    return TensorView::strided(impl.memory->local() + impl.layout.ll_zero_copy_offset, DType::kBFloat16,
                               {L, rows, H}, {rows * H, H, 1}, Device::cuda(impl.device));
}

}  // namespace switchyard
