// Low-latency (LL) dispatch and combine (DESIGN.md §2, §5): argument checks, output allocation,
// and the launches of kernels/switchyard/ll/ on the buffer's communication stream. Both ops are
// one kernel each (or a send and a receive half in hook mode), with no host round-trip, so they
// can be captured in CUDA graphs.
#include <cstdlib>
#include <memory>
#include <string>

#include "core/buffer_impl.hpp"
#include "util/cuda_check.hpp"
#include "core/ll_handle.hpp"
#include "core/op_trace.hpp"
#include "core/validation.hpp"
#include "launch/ll_launch.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

core::ValidationContext ll_validation_context(const BufferConfig& config, int num_ranks, int device) {
    return core::make_validation_context(config, num_ranks, Device::cuda(device),
                                         config.ll_max_tokens_per_rank);
}

// The ops' timelines (SWITCHYARD_TRACE=1; common/trace_marks.cuh lists the marks). Each half of a
// hook-mode op is traced as an op of its own.
device::OpTrace ll_trace(Buffer::Impl& impl, int32_t kind, int phases) {
    static const char* const kDispatchNames[device::kLlDispatchMarks] = {
        "start", "entered", "routed", "sent", "arrived", "waited", "planned", "received", "end"};
    static const char* const kCombineNames[device::kLlCombineMarks] = {
        "start", "entered", "planned", "sent", "arrived", "waited", "reduced", "end"};
    static const core::TracedOpMarks kMarks[2][3] = {
        {{"ll dispatch send", kDispatchNames, device::kLlDispatchMarks},
         {"ll dispatch receive", kDispatchNames, device::kLlDispatchMarks},
         {"ll dispatch", kDispatchNames, device::kLlDispatchMarks}},
        {{"ll combine send", kCombineNames, device::kLlCombineMarks},
         {"ll combine receive", kCombineNames, device::kLlCombineMarks},
         {"ll combine", kCombineNames, device::kLlCombineMarks}}};
    static const core::TracedOp kOps[2][3] = {
        {core::TracedOp::kLlDispatchSend, core::TracedOp::kLlDispatchReceive, core::TracedOp::kLlDispatch},
        {core::TracedOp::kLlCombineSend, core::TracedOp::kLlCombineReceive, core::TracedOp::kLlCombine}};
    return impl.tracer->begin(kOps[kind][phases - 1], kMarks[kind][phases - 1]);
}

int32_t scale_kind_of(bool use_fp8, ScaleFormat format) {
    if (!use_fp8) return device::kScaleNone;
    return format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0 : device::kScaleFloat32;
}

// The extents of a validated LL dispatch.
struct LlDispatchExtents {
    int64_t T, H, K;
    int32_t E, L;
};

LlDispatchExtents ll_dispatch_extents(int R, const LowLatencyDispatchArgs& args) {
    return {args.x.shape[0], args.x.shape[1], args.topk_idx.shape[1], args.num_experts, args.num_experts / R};
}

}  // namespace

void Buffer::ll_load_kernels(const LowLatencyDispatchArgs& args) {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_load_kernels");
    core::validate_ll_dispatch(args, ll_validation_context(impl.config, num_ranks(), impl.device));
    const LlDispatchExtents extents = ll_dispatch_extents(num_ranks(), args);
    launch::LlDispatchShape dispatch;
    dispatch.hidden = static_cast<int>(extents.H);
    dispatch.topk = static_cast<int>(extents.K);
    dispatch.scale_kind = scale_kind_of(args.use_fp8, args.scale_format);
    dispatch.index_is_int64 = args.topk_idx.dtype == DType::kInt64;
    dispatch.contiguous = args.layout == RecvLayout::kExpertContiguous;
    launch::LlCombineShape combine;
    combine.hidden = dispatch.hidden;
    combine.topk = dispatch.topk;
    combine.index_is_int64 = dispatch.index_is_int64;
    combine.contiguous = dispatch.contiguous;
    // Both reductions' combine kernels: either may follow the dispatch.
    for (int phases : {device::kLlBothHalves, device::kLlSendHalf, device::kLlRecvHalf}) {
        dispatch.phases = combine.phases = phases;
        jit::get_kernel(launch::ll_dispatch_source(dispatch), impl.device);
        for (bool hierarchical : {false, true}) {
            combine.hierarchical = hierarchical;
            jit::get_kernel(launch::ll_combine_source(combine), impl.device);
        }
    }
}

LowLatencyDispatchResult Buffer::ll_dispatch(const LowLatencyDispatchArgs& args, cudaStream_t stream) {
    Impl& impl = *impl_;
    const BufferConfig& config = impl.config;
    core::validate_low_latency(config, "ll_dispatch");
    const int R = num_ranks(), device = impl.device;
    const int32_t max_tokens = config.ll_max_tokens_per_rank;
    core::validate_ll_dispatch(args, ll_validation_context(config, R, device));
    const auto [T, H, K, E, L] = ll_dispatch_extents(R, args);

    auto handle = std::make_shared<LowLatencyHandle>();
    handle->num_tokens = static_cast<int32_t>(T);
    handle->hidden = static_cast<int32_t>(H);
    handle->topk = static_cast<int32_t>(K);
    handle->num_experts = E;
    handle->num_ranks = R;
    handle->local_experts = L;
    handle->max_tokens = max_tokens;
    handle->index_is_int64 = args.topk_idx.dtype == DType::kInt64;
    handle->use_fp8 = args.use_fp8;
    handle->scale_format = args.use_fp8 ? args.scale_format : ScaleFormat::kNone;
    handle->has_weights = args.topk_weights.defined();
    const bool contiguous = args.layout == RecvLayout::kExpertContiguous;
    handle->layout = args.layout;
    handle->expert_alignment = args.expert_alignment;
    handle->contiguous_rows =
        contiguous ? device::ll_contiguous_rows(R, max_tokens, int32_t(K), L, args.expert_alignment) : 0;
    const int32_t scale_kind = scale_kind_of(args.use_fp8, args.scale_format);
    const int64_t rows = int64_t(R) * max_tokens;
    const int64_t words = device::RecordLayout::scale_words(H, scale_kind);
    device::LlDispatchArgs dispatch{};
    dispatch.x = args.x.ptr();
    dispatch.x_row_stride = args.x.strides[0];
    dispatch.topk_idx = args.topk_idx.ptr();
    dispatch.topk_row_stride = args.topk_idx.strides[0];
    dispatch.topk_weights = handle->has_weights ? args.topk_weights.ptr_as<float>() : nullptr;
    dispatch.weights_row_stride = handle->has_weights ? args.topk_weights.strides[0] : 0;
    dispatch.num_tokens = static_cast<int32_t>(T);
    dispatch.num_experts = E;
    dispatch.local_experts = L;
    dispatch.cumulative_local_expert_recv_stats =
        args.cumulative_local_expert_recv_stats.defined()
            ? args.cumulative_local_expert_recv_stats.ptr_as<int32_t>()
            : nullptr;
    dispatch.wait_time_stats =
        args.wait_time_stats.defined() ? args.wait_time_stats.ptr_as<int64_t>() : nullptr;
    dispatch.expert_alignment = contiguous ? args.expert_alignment : 0;
    dispatch.recv_rows = handle->contiguous_rows;
    dispatch.zero_padding = contiguous && args.zero_padding ? 1 : 0;

    launch::LlDispatchShape shape;
    shape.hidden = static_cast<int>(H);
    shape.topk = static_cast<int>(K);
    shape.scale_kind = scale_kind;
    shape.index_is_int64 = handle->index_is_int64;
    shape.phases = args.return_recv_hook ? device::kLlSendHalf : device::kLlBothHalves;
    shape.contiguous = contiguous;

    const launch::LaunchContext context = impl.context(stream);
    dispatch.buffer = launch::ll_buffer_args(context, config.ll_mask_unresponsive_ranks);
    dispatch.buffer.trace = ll_trace(impl, device::kLlDispatch, shape.phases);
    // With zero_padding the grid also covers the segments' most padding rows.
    const int64_t max_padding_rows = dispatch.zero_padding ? int64_t(L) * (args.expert_alignment - 1) : 0;
    const int blocks =
        launch::ll_dispatch_blocks(context, config.num_sms, shape, max_tokens, max_padding_rows);

    LowLatencyDispatchResult result;
    result.done = impl.run_ordered(stream, args.order, [&] {
        // Allocated on the op's stream once it follows the caller's stream (inside a capture they
        // become graph allocation nodes).
        const cudaStream_t comm = impl.op_stream(stream);
        // One allocation for all of the op's outputs (host time, see allocate_group).
        // recv_x and the scales: [L, R*T_ll] rows masked, the contiguous capacity otherwise; then
        // the per-record routing of a hierarchical combine.
        const DType x_dtype = args.use_fp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
        const DType scale_dtype = scale_kind == device::kScaleUe8m0 ? DType::kInt32 : DType::kFloat32;
        const int64_t x_rows = handle->contiguous_rows;
        auto outputs = contiguous
                           ? impl.outputs->allocate_group({{x_dtype, {x_rows, H}},
                                                           {DType::kInt32, {L}},
                                                           {DType::kInt32, {L, rows}},
                                                           {scale_dtype, {args.use_fp8 ? words : 0, x_rows}},
                                                           {DType::kInt32, {L + 1}},
                                                           {DType::kInt32, {rows, K + 1}},
                                                           {DType::kFloat32, {rows, K}},
                                                           {DType::kInt32, {R + 1}}},
                                                          comm)
                           : impl.outputs->allocate_group({{x_dtype, {L, rows, H}},
                                                           {DType::kInt32, {L}},
                                                           {DType::kInt32, {L, rows}},
                                                           {scale_dtype, {args.use_fp8 ? L : 0, words, rows}},
                                                           {DType::kInt32, {L + 1}},
                                                           {DType::kInt32, {rows, K + 1}},
                                                           {DType::kFloat32, {rows, K}},
                                                           {DType::kInt32, {R + 1}}},
                                                          comm);
        result.recv_x = outputs[0];
        handle->recv_count = outputs[1];
        handle->recv_source = outputs[2];
        result.recv_expert_offsets = outputs[4];
        handle->recv_token_rows = outputs[5];
        handle->recv_token_weights = outputs[6];
        handle->recv_record_starts = outputs[7];
        if (args.use_fp8) {
            handle->recv_scales_storage = outputs[3];
            result.recv_scales = DeviceTensor::borrow(
                contiguous ? TensorView::strided(handle->recv_scales_storage.view().ptr(),
                                                 handle->recv_scales_storage.view().dtype, {x_rows, words},
                                                 {1, x_rows}, Device::cuda(device))
                           : TensorView::strided(handle->recv_scales_storage.view().ptr(),
                                                 handle->recv_scales_storage.view().dtype, {L, rows, words},
                                                 {words * rows, 1, rows}, Device::cuda(device)));
        }
        dispatch.recv_x = result.recv_x.view().ptr();
        dispatch.recv_scales = args.use_fp8 ? handle->recv_scales_storage.data<uint32_t>() : nullptr;
        dispatch.recv_count = handle->recv_count.data<int32_t>();
        dispatch.recv_source = handle->recv_source.data<int32_t>();
        dispatch.recv_expert_offsets = result.recv_expert_offsets.data<int32_t>();
        dispatch.recv_token_rows = handle->recv_token_rows.data<int32_t>();
        dispatch.recv_token_weights = handle->recv_token_weights.data<float>();
        dispatch.recv_record_starts = handle->recv_record_starts.data<int32_t>();
        launch::launch_ll_dispatch(context, dispatch, shape, blocks);
    });
    result.recv_count = handle->recv_count;
    result.handle = handle;

    if (args.return_recv_hook) {
        Impl* impl_pointer = impl_.get();
        launch::LlDispatchShape receive_shape = shape;
        receive_shape.phases = device::kLlRecvHalf;
        // The receive half reads nothing of the caller's inputs; it keeps the outputs alive.
        const OpOrder receive_order{nullptr, args.order.async};
        result.receive = [impl_pointer, dispatch, receive_shape, blocks, stream, receive_order, handle,
                          recv_x = result.recv_x, offsets = result.recv_expert_offsets] {
            device::LlDispatchArgs receive_args = dispatch;
            receive_args.buffer.trace = ll_trace(*impl_pointer, device::kLlDispatch, receive_shape.phases);
            return impl_pointer->run_ordered(stream, receive_order, [&] {
                launch::launch_ll_dispatch(impl_pointer->context(stream), receive_args, receive_shape,
                                           blocks);
            });
        };
    }
    return result;
}

LowLatencyCombineResult Buffer::ll_combine(const LowLatencyCombineArgs& args,
                                           const std::shared_ptr<const LowLatencyHandle>& handle,
                                           cudaStream_t stream) {
    Impl& impl = *impl_;
    const BufferConfig& config = impl.config;
    core::validate_low_latency(config, "ll_combine");
    const int R = num_ranks(), device = impl.device;
    core::validate_ll_combine(args, handle.get(), ll_validation_context(config, R, device));
    const int64_t T = handle->num_tokens, H = handle->hidden, K = handle->topk, L = handle->local_experts;
    const bool contiguous = handle->layout == RecvLayout::kExpertContiguous;
    const TensorView y = args.zero_copy ? ll_combine_input(*handle) : args.y;

    device::LlCombineArgs combine{};
    combine.y = y.ptr();
    combine.y_expert_stride = contiguous ? 0 : y.strides[0];
    combine.y_row_stride = contiguous ? y.strides[0] : y.strides[1];
    combine.y_alignment = contiguous ? handle->expert_alignment : 0;
    combine.topk_idx = args.topk_idx.ptr();
    combine.topk_row_stride = args.topk_idx.strides[0];
    combine.topk_weights = args.hierarchical ? nullptr : args.topk_weights.ptr_as<float>();
    combine.weights_row_stride = args.hierarchical ? 0 : args.topk_weights.strides[0];
    combine.num_tokens = static_cast<int32_t>(T);
    combine.num_experts = handle->num_experts;
    combine.local_experts = static_cast<int32_t>(L);
    combine.recv_count = handle->recv_count.data<int32_t>();
    combine.recv_source = handle->recv_source.data<int32_t>();
    combine.wait_time_stats =
        args.wait_time_stats.defined() ? args.wait_time_stats.ptr_as<int64_t>() : nullptr;
    combine.recv_token_rows = handle->recv_token_rows.data<int32_t>();
    combine.recv_token_weights = handle->recv_token_weights.data<float>();
    combine.recv_record_starts = handle->recv_record_starts.data<int32_t>();

    launch::LlCombineShape shape;
    shape.hidden = static_cast<int>(H);
    shape.topk = static_cast<int>(K);
    shape.index_is_int64 = args.topk_idx.dtype == DType::kInt64;
    shape.phases = args.return_recv_hook ? device::kLlSendHalf : device::kLlBothHalves;
    shape.hierarchical = args.hierarchical;
    shape.contiguous = contiguous;

    const launch::LaunchContext context = impl.context(stream);
    combine.buffer = launch::ll_buffer_args(context, config.ll_mask_unresponsive_ranks);
    combine.buffer.trace = ll_trace(impl, device::kLlCombine, shape.phases);
    const int blocks = launch::ll_num_blocks(context, config.num_sms);

    LowLatencyCombineResult result;
    result.done = impl.run_ordered(stream, args.order, [&] {
        result.out = args.out.defined()
                         ? DeviceTensor::borrow(args.out)
                         : impl.outputs->allocate(DType::kBFloat16, {T, H}, impl.op_stream(stream));
        combine.out = result.out.view().ptr();
        combine.out_row_stride = result.out.view().ndim == 2 && T > 0 ? result.out.view().strides[0] : H;
        launch::launch_ll_combine(context, combine, shape, blocks);
    });

    if (args.return_recv_hook) {
        Impl* impl_pointer = impl_.get();
        launch::LlCombineShape receive_shape = shape;
        receive_shape.phases = device::kLlRecvHalf;
        const OpOrder receive_order{nullptr, args.order.async};
        result.receive = [impl_pointer, combine, receive_shape, blocks, stream, receive_order, handle,
                          out = result.out] {
            device::LlCombineArgs receive_args = combine;
            receive_args.buffer.trace = ll_trace(*impl_pointer, device::kLlCombine, receive_shape.phases);
            return impl_pointer->run_ordered(stream, receive_order, [&] {
                launch::launch_ll_combine(impl_pointer->context(stream), receive_args, receive_shape, blocks);
            });
        };
    }
    return result;
}

TensorView Buffer::ll_combine_input(const LowLatencyHandle& handle) const {
    const Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_combine_input");
    core::validate_ll_combine_input(handle, impl.layout.ll_zero_copy_bytes != 0,
                                    ll_validation_context(impl.config, num_ranks(), impl.device));
    const int64_t L = handle.local_experts, rows = handle.rows_per_expert(), H = handle.hidden;
    return TensorView::strided(impl.memory->local() + impl.layout.ll_zero_copy_offset, DType::kBFloat16,
                               {L, rows, H}, {rows * H, H, 1}, Device::cuda(impl.device));
}

namespace {

// (A template so the private Buffer::Impl is never named outside Buffer's members.)
template <typename BufferImpl>
uint32_t* ll_mask_pointer(const BufferImpl& impl, int num_ranks) {
    return device::LlSignalLayout::make(num_ranks).mask(
        impl.layout.workspace.ll_signals(impl.memory->local()));
}

// Zeroes mask words [first, first + count), then sets the first to 1 if `mask_first`, after the
// ops issued so far: ordered on the comm stream, or (ops on the callers' streams) after a drain
// and complete before the next op.
template <typename BufferImpl>
void write_mask(BufferImpl& impl, int first, int count, bool mask_first) {
    uint32_t* words = ll_mask_pointer(impl, impl.communicator->size()) + first;
    const bool on_callers = impl.config.launch_on_caller_stream;
    if (on_callers) impl.drain();
    SY_CUDA_CHECK(cudaMemsetAsync(words, 0, sizeof(uint32_t) * count, impl.comm_stream));
    if (mask_first)
        SY_CUDA_CHECK(cudaMemsetAsync(words, 1, 1, impl.comm_stream));  // little endian: the word reads 1
    if (on_callers) SY_CUDA_CHECK(cudaStreamSynchronize(impl.comm_stream));
}

}  // namespace

std::vector<int32_t> Buffer::ll_query_mask() {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_query_mask");
    const int R = num_ranks();
    std::vector<int32_t> mask(R, 0);
    SY_CUDA_CHECK(cudaSetDevice(impl.device));
    // Wait for queued ops first: a copy into pageable memory that waits behind a kernel holds the
    // driver's staging buffers, which a co-located rank's own copy may need (design notes §2).
    impl.drain();
    SY_CUDA_CHECK(cudaMemcpyAsync(mask.data(), ll_mask_pointer(impl, R), sizeof(int32_t) * R,
                                  cudaMemcpyDeviceToHost, impl.comm_stream));
    SY_CUDA_CHECK(cudaStreamSynchronize(impl.comm_stream));
    for (int32_t& value : mask) value = value != 0 ? 1 : 0;
    return mask;
}

void Buffer::ll_set_mask(int rank, bool masked) {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_set_mask");
    core::validate_ll_mask_rank(rank, ll_validation_context(impl.config, num_ranks(), impl.device));
    SY_CUDA_CHECK(cudaSetDevice(impl.device));
    write_mask(impl, rank, 1, masked);
}

void Buffer::ll_clear_mask() {
    Impl& impl = *impl_;
    core::validate_low_latency(impl.config, "ll_clear_mask");
    SY_CUDA_CHECK(cudaSetDevice(impl.device));
    write_mask(impl, 0, num_ranks(), false);
}

}  // namespace switchyard
