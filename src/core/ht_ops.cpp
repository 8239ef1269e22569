// High-throughput dispatch, cached dispatch and combine (DESIGN.md §2, §5). Core validates a call,
// plans it (launch::HtDispatchPlan, HtCombinePlan: record format, SM count, output sizes),
// allocates its outputs and handle, and calls one launcher per kernel (src/launch/ht_*.cpp) on the
// communication stream:
//   dispatch:  routing kernel -> dispatch kernel -> [host waits for counts] -> receive kernel
//   combine:   combine kernel
// With ranks on several nodes the dispatch and combine kernels are the hierarchical ones
// (src/launch/hier_*.cpp); routing, receive, outputs and handle are the same.
#include <algorithm>
#include <chrono>
#include <thread>

#include "core/buffer_impl.hpp"
#include "core/ht_handle.hpp"
#include "core/tuning.hpp"
#include "core/validation.hpp"
#include "launch/hier_launch.hpp"
#include "launch/ht_launch.hpp"
#include "switchyard/sm_model.hpp"

namespace switchyard {
namespace {

int choose_num_sms(const Buffer::Impl& impl, int requested, int num_experts, int topk, SmModelOp op) {
    const int budget = impl.sm_budget;
    int num_sms = requested > 0 ? requested : impl.config.num_sms;
    if (num_sms > budget)
        throw InvalidArgument("switchyard: num_sms = " + std::to_string(num_sms) +
                              " exceeds this rank's SM budget of " + std::to_string(budget) + " (the GPU's " +
                              std::to_string(impl.device_sms) + " SMs shared by " +
                              std::to_string(impl.topology.ranks_on_my_gpu) + " ranks" +
                              (impl.network && impl.network->kind() == net::NetworkKind::kEmulated
                                   ? ", less " + std::to_string(tuning::kEmulatedNetworkSmsPerRank) +
                                         " per rank for the emulated network's copies)"
                                   : std::string(")")));
    if (num_sms > 0) return num_sms;
    SmModelInput input;
    input.num_experts = num_experts;
    input.topk = topk;
    input.num_ranks = impl.communicator->size();
    input.num_nodes = impl.topology.num_nodes;
    input.num_device_sms = impl.device_sms;
    input.max_sms = budget;
    int major = 9;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, impl.device);
    input.bandwidth = default_arch_bandwidth(major);
    input.op = op;
    input.combine_send_fraction = tuning::kHtCombineSendFraction;
    return std::max(1, model_num_sms(input).num_sms);
}

bool stream_is_capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    util::cuda_check(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
}

// A strided view of one section of the records in the receive region.
TensorView record_view(uint8_t* base, DType dtype, int64_t rows, int64_t columns, int64_t record_bytes,
                       int device) {
    return TensorView::strided(base, dtype, {rows, columns}, {record_bytes / int64_t(dtype_size(dtype)), 1},
                               Device::cuda(device));
}

// Waits (bounded) for the dispatch kernel to publish this rank's receive counts.
void wait_for_host_counts(Buffer::Impl& impl) {
    const auto deadline = std::chrono::steady_clock::now() + impl.timeout() + std::chrono::seconds(1);
    volatile int32_t* flag = impl.host_counts;
    while (flag[0] == 0) {
        impl.errors->throw_if_error(impl.config.timeout_seconds);
        if (std::chrono::steady_clock::now() > deadline)
            throw TimeoutError(
                "switchyard: rank " + std::to_string(impl.communicator->rank()) +
                    " waited longer than the timeout for its dispatch receive counts on the host",
                impl.communicator->rank(), -1, "high-throughput notify (host)");
        std::this_thread::yield();
    }
}

// The buffer and its ranks allow HT ops.
void require_high_throughput(const Buffer::Impl& impl) {
    if (!impl.config.enable_high_throughput)
        throw InvalidArgument(
            "switchyard: this buffer was created without high-throughput regions "
            "(BufferConfig::enable_high_throughput = false)");
    if (impl.communicator->size() > device::kHtMaxRanks)
        throw UnsupportedError("switchyard: high-throughput kernels support up to " +
                               std::to_string(device::kHtMaxRanks) + " ranks");
    if (impl.topology.num_nodes > 1 && !impl.network)
        throw UnsupportedError("switchyard: the ranks span " + std::to_string(impl.topology.num_nodes) +
                               " nodes but the buffer has no network");
    if (impl.topology.num_nodes > device::kHierMaxNodes)
        throw UnsupportedError("switchyard: the high-throughput kernels across nodes support up to " +
                               std::to_string(device::kHierMaxNodes) + " nodes, the ranks span " +
                               std::to_string(impl.topology.num_nodes));
}

// The hierarchical path's fields of a plan (ranks on several nodes).
template <typename Plan>
void plan_nodes(const Buffer::Impl& impl, Plan& plan) {
    plan.num_nodes = std::max(1, impl.topology.num_nodes);
    plan.ranks_per_node = impl.communicator->size() / plan.num_nodes;
    plan.gin = impl.network && impl.network->kind() == net::NetworkKind::kGin;
}

// The call's arguments, validated. A cached dispatch takes its routing (ids, layout, counts mode)
// from the handle: only the data is new.
DispatchArgs checked_dispatch_args(const Buffer::Impl& impl, const DispatchArgs& args,
                                   const DispatchHandle* cached) {
    const Device device = Device::cuda(impl.device);
    const auto validation = core::make_validation_context(impl.config, impl.communicator->size(), device,
                                                          impl.config.max_tokens_per_rank);
    DispatchArgs checked = args;
    if (cached) {
        checked.num_experts = cached->num_experts;
        checked.layout = cached->layout;
        checked.expert_alignment = cached->expert_alignment;
        checked.zero_padding = cached->zero_padding;
        checked.counts = cached->host_num_rows >= 0 ? CountMode::kHostSynced : CountMode::kDevice;
        checked.topk_idx = TensorView::contiguous(cached->topk_idx.view().data, DType::kInt32,
                                                  {cached->num_tokens, cached->topk}, device);
        if (args.x.defined() && args.x.ndim == 2 && args.x.shape[0] != cached->num_tokens)
            throw InvalidArgument("switchyard: cached dispatch needs x with the handle's " +
                                  std::to_string(cached->num_tokens) + " tokens, got " + args.x.describe());
    }
    core::validate_dispatch(checked, validation);
    return checked;
}

launch::HtDispatchPlan plan_dispatch(const Buffer::Impl& impl, const DispatchArgs& checked, bool cached) {
    const int32_t R = impl.communicator->size();
    launch::HtDispatchPlan plan;
    launch::HtExtents& extents = plan.extents;
    extents.num_tokens = int32_t(checked.x.shape[0]);
    extents.max_tokens = impl.config.max_tokens_per_rank;
    extents.hidden = int32_t(checked.x.shape[1]);
    extents.topk = int32_t(checked.topk_idx.shape[1]);
    extents.num_experts = checked.num_experts;
    extents.local_experts = checked.num_experts / R;
    int32_t record_payload = device::kPayloadBf16;
    if (checked.quantize_fp8) {
        record_payload = device::kPayloadFp8;
        plan.scale_kind =
            checked.quantize_format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0 : device::kScaleFloat32;
    } else if (checked.x.dtype == DType::kFloat8E4M3) {
        plan.input_payload = record_payload = device::kPayloadFp8;
        plan.scale_kind =
            checked.x_scales.dtype == DType::kFloat32 ? device::kScaleFloat32 : device::kScaleUe8m0;
    }
    plan.record =
        device::RecordLayout::dispatch(extents.hidden, record_payload, plan.scale_kind, extents.topk);
    plan.index_is_int64 = checked.topk_idx.dtype == DType::kInt64;
    plan.cached = cached;
    plan.has_weights = checked.topk_weights.defined();
    plan.layout = checked.layout;
    plan.expert_alignment = checked.expert_alignment;
    plan.zero_padding = checked.zero_padding;
    plan.host_synced = checked.counts == CountMode::kHostSynced;
    plan.num_sms =
        choose_num_sms(impl, checked.num_sms, checked.num_experts, extents.topk, SmModelOp::kDispatch);
    plan_nodes(impl, plan);
    const int64_t L = extents.local_experts, worst_rows = int64_t(R) * extents.max_tokens;
    plan.rows = worst_rows;
    if (plan.layout == RecvLayout::kExpertContiguous)
        plan.expert_rows = worst_rows * std::min<int64_t>(extents.topk, L) + L * (plan.expert_alignment - 1);
    else if (plan.layout == RecvLayout::kExpertMasked)
        plan.expert_rows = L * worst_rows;
    return plan;
}

std::shared_ptr<DispatchHandle> make_handle(const launch::HtDispatchPlan& plan, int32_t num_ranks) {
    auto handle = std::make_shared<DispatchHandle>();
    handle->num_tokens = plan.extents.num_tokens;
    handle->hidden = plan.extents.hidden;
    handle->topk = plan.extents.topk;
    handle->num_experts = plan.extents.num_experts;
    handle->num_ranks = num_ranks;
    handle->local_experts = plan.extents.local_experts;
    handle->max_tokens = plan.extents.max_tokens;
    handle->layout = plan.layout;
    handle->expert_alignment = plan.expert_alignment;
    handle->zero_padding = plan.zero_padding;
    handle->has_weights = plan.has_weights;
    handle->payload_kind = plan.scale_kind == device::kScaleNone ? device::kPayloadBf16 : device::kPayloadFp8;
    handle->scale_kind = plan.scale_kind;
    handle->record = plan.record;
    handle->num_nodes = plan.num_nodes;
    return handle;
}

// The hierarchical path's arrays of the handle: the node streams (shared with a cached dispatch's
// handle, like the routing), the records forwarded from each node (rewritten with the same values by
// a cached dispatch, like recv_info) and the forward metadata (this dispatch's own: its weights).
void node_arrays(Buffer::Impl& impl, const launch::HtDispatchPlan& plan, const DispatchHandle* cached,
                 DispatchHandle& handle, cudaStream_t stream) {
    const int64_t T = plan.extents.num_tokens, N = plan.num_nodes;
    const int64_t words = device::HierForwardMeta::words(plan.extents.topk, plan.ranks_per_node);
    if (cached) {
        handle.token_node_slot = cached->token_node_slot;
        handle.num_tokens_per_node = cached->num_tokens_per_node;
        handle.forward_counts = cached->forward_counts;
        handle.forward_meta =
            impl.outputs->allocate(DType::kInt32, {N, int64_t(plan.extents.max_tokens), words}, stream);
        return;
    }
    auto arrays = impl.outputs->allocate_group({{DType::kInt32, {T, N}},
                                                {DType::kInt32, {N}},
                                                {DType::kInt32, {N, int64_t(plan.extents.max_tokens), words}},
                                                {DType::kInt32, {N}}},
                                               stream);
    handle.token_node_slot = arrays[0];
    handle.num_tokens_per_node = arrays[1];
    handle.forward_meta = arrays[2];
    handle.forward_counts = arrays[3];
}

// The handle's routing arrays. A cached dispatch shares its handle's (and copies the new weights:
// no routing kernel copies them); otherwise one allocation (host time, see allocate_group) that
// the routing kernel fills.
void routing_arrays(Buffer::Impl& impl, const launch::HtDispatchPlan& plan, const DispatchArgs& checked,
                    const DispatchHandle* cached, DispatchHandle& handle, cudaStream_t stream) {
    const int64_t T = plan.extents.num_tokens, K = plan.extents.topk, R = impl.communicator->size();
    if (cached) {
        handle.token_rank_slot = cached->token_rank_slot;
        handle.token_expert_pos = cached->token_expert_pos;
        handle.topk_idx = cached->topk_idx;
        handle.num_tokens_per_rank = cached->num_tokens_per_rank;
        handle.num_tokens_per_expert = cached->num_tokens_per_expert;
        handle.recv_info = cached->recv_info;
        if (!plan.has_weights) return;
        handle.topk_weights = impl.outputs->allocate(DType::kFloat32, {T, K}, stream);
        if (T > 0)
            SY_CUDA_CHECK(cudaMemcpy2DAsync(handle.topk_weights.data<float>(), sizeof(float) * K,
                                            checked.topk_weights.ptr(),
                                            sizeof(float) * checked.topk_weights.strides[0],
                                            sizeof(float) * K, T, cudaMemcpyDeviceToDevice, stream));
        return;
    }
    const device::HtRecvInfoLayout info{int32_t(R), plan.extents.local_experts};
    auto routing = impl.outputs->allocate_group({{DType::kInt32, {T, R}},
                                                 {DType::kInt32, {T, K}},
                                                 {DType::kInt32, {T, K}},
                                                 {DType::kInt32, {R}},
                                                 {DType::kInt32, {plan.extents.num_experts}},
                                                 {DType::kInt32, {info.total_ints()}},
                                                 {DType::kFloat32, {plan.has_weights ? T : 0, K}}},
                                                stream);
    handle.token_rank_slot = routing[0];
    handle.token_expert_pos = routing[1];
    handle.topk_idx = routing[2];
    handle.num_tokens_per_rank = routing[3];
    handle.num_tokens_per_expert = routing[4];
    handle.recv_info = routing[5];
    if (plan.has_weights) handle.topk_weights = routing[6];
}

// Across nodes, the handle's per-node routing and forwarding arrays (the dispatch writes them, the
// combine reads them back).
template <typename Views>
void node_views(const DispatchHandle& handle, Views& views) {
    if (handle.num_nodes <= 1) return;
    views.token_node_slot = handle.token_node_slot.data<int32_t>();
    views.num_tokens_per_node = handle.num_tokens_per_node.data<int32_t>();
    views.forward_meta = handle.forward_meta.data<int32_t>();
    views.forward_counts = handle.forward_counts.data<int32_t>();
}

// What the routing and dispatch kernels read and write: the inputs and the handle's routing.
launch::HtDispatchViews dispatch_views(const DispatchArgs& checked, DispatchHandle& handle) {
    launch::HtDispatchViews views;
    views.x = checked.x;
    views.x_scales = checked.x_scales;
    views.topk_idx = checked.topk_idx;
    views.topk_weights = checked.topk_weights;
    views.token_rank_slot = handle.token_rank_slot.data<int32_t>();
    views.token_expert_pos = handle.token_expert_pos.data<int32_t>();
    views.topk_copy = handle.topk_idx.data<int32_t>();
    views.weights_copy = handle.has_weights ? handle.topk_weights.data<float>() : nullptr;
    views.num_tokens_per_rank = handle.num_tokens_per_rank.data<int32_t>();
    views.num_tokens_per_expert = handle.num_tokens_per_expert.data<int32_t>();
    views.recv_info = handle.recv_info.data<int32_t>();
    node_views(handle, views);
    return views;
}

// Host-synced counts: waits for this rank's and sizes the outputs exactly (the plan's worst case
// otherwise stands; the masked layout's rows are fixed).
void take_host_counts(Buffer::Impl& impl, launch::HtDispatchPlan& plan, DispatchHandle& handle,
                      DispatchResult& result) {
    wait_for_host_counts(impl);
    plan.rows = impl.host_counts[1];
    if (plan.layout == RecvLayout::kExpertContiguous) plan.expert_rows = impl.host_counts[2];
    result.host_num_recv_rows = plan.layout == RecvLayout::kRankMajor ? plan.rows : plan.expert_rows;
    result.host_num_recv_tokens_per_expert.assign(impl.host_counts + 3,
                                                  impl.host_counts + 3 + plan.extents.local_experts);
    handle.host_num_rows = plan.rows;
}

// The receive kernel's outputs: the handle's per-row arrays and the received rows, as views of the
// receive region (rank-major) or in memory the result owns (expert-major).
void receive_outputs(Buffer::Impl& impl, const launch::HtDispatchPlan& plan, DispatchHandle& handle,
                     DispatchResult& result, launch::HtDispatchViews& views, cudaStream_t stream) {
    const int64_t H = plan.extents.hidden, K = plan.extents.topk, L = plan.extents.local_experts;
    handle.row_capacity = plan.rows;
    handle.expert_row_capacity = plan.expert_rows;
    const int64_t row_slots = std::max<int64_t>(plan.rows, 1);
    auto rows = impl.outputs->allocate_group({{DType::kInt32, {row_slots}},
                                              {DType::kInt32, {row_slots}},
                                              {DType::kInt32, {row_slots, K}},
                                              {DType::kFloat32, {row_slots, K}},
                                              {DType::kInt32, {1}}},
                                             stream);
    handle.row_src_token = rows[0];
    handle.row_combine_slot = rows[1];
    handle.row_expert_row = rows[2];
    handle.row_weights = rows[3];
    result.num_recv_rows = rows[4];
    views.row_src_token = handle.row_src_token.data<int32_t>();
    views.row_combine_slot = handle.row_combine_slot.data<int32_t>();
    views.row_expert_row = handle.row_expert_row.data<int32_t>();
    views.row_weights = handle.row_weights.data<float>();
    views.out_num_rows = result.num_recv_rows.data<int32_t>();

    const DType payload = plan.scale_kind == device::kScaleNone ? DType::kBFloat16 : DType::kFloat8E4M3;
    const DType scale = plan.scale_kind == device::kScaleFloat32 ? DType::kFloat32 : DType::kInt32;
    const int64_t scale_words = plan.record.scale_bytes / 4;
    if (plan.layout == RecvLayout::kRankMajor) {
        uint8_t* region = impl.memory->local() + impl.layout.ht_dispatch_offset;
        const int64_t record = plan.record.total_bytes, n = plan.rows;
        const int64_t meta = plan.record.meta_offset;
        result.recv_x = DeviceTensor::borrow(record_view(region, payload, n, H, record, impl.device));
        if (scale_words)
            result.recv_scales = DeviceTensor::borrow(
                record_view(region + plan.record.scale_offset, scale, n, scale_words, record, impl.device));
        result.recv_topk_idx =
            DeviceTensor::borrow(record_view(region + meta + 8, DType::kInt32, n, K, record, impl.device));
        if (plan.has_weights)
            result.recv_topk_weights = DeviceTensor::borrow(
                record_view(region + meta + 8 + 4 * K, DType::kFloat32, n, K, record, impl.device));
        return;
    }
    const int64_t out_rows = std::max<int64_t>(plan.expert_rows, 1);
    if (plan.layout == RecvLayout::kExpertMasked) {
        const int64_t per_expert = int64_t(impl.communicator->size()) * plan.extents.max_tokens;
        result.recv_x = impl.outputs->allocate(payload, {L, per_expert, H}, stream);
        if (scale_words)
            result.recv_scales = impl.outputs->allocate(scale, {L, per_expert, scale_words}, stream);
    } else {
        result.recv_x = impl.outputs->allocate(payload, {out_rows, H}, stream);
        if (scale_words) result.recv_scales = impl.outputs->allocate(scale, {out_rows, scale_words}, stream);
    }
    if (plan.has_weights)
        result.recv_topk_weights = impl.outputs->allocate(DType::kFloat32, {out_rows}, stream);
    views.out_x = result.recv_x.data<uint8_t>();
    views.out_scales = scale_words ? result.recv_scales.data<uint32_t>() : nullptr;
    views.out_weights = plan.has_weights ? result.recv_topk_weights.data<float>() : nullptr;
}

}  // namespace

// The shared body of dispatch and cached dispatch.
static DispatchResult run_dispatch(Buffer::Impl& impl, const DispatchArgs& args,
                                   const std::shared_ptr<const DispatchHandle>& cached, cudaStream_t stream) {
    require_high_throughput(impl);
    const DispatchArgs checked = checked_dispatch_args(impl, args, cached.get());
    if (!cached) core::require_device_resident(args.topk_idx, "topk_idx", impl.device);
    launch::HtDispatchPlan plan = plan_dispatch(impl, checked, cached != nullptr);
    if (plan.host_synced && stream_is_capturing(stream))
        throw InvalidArgument(
            "switchyard: host-synced counts cannot be captured in a CUDA graph (the host reads "
            "the counts); use CountMode::kDevice");
    const std::shared_ptr<DispatchHandle> handle = make_handle(plan, impl.communicator->size());
    DispatchResult result;
    result.done = impl.run_ordered(stream, args.order, [&] {
        const launch::LaunchContext context = impl.context(stream);
        const device::OpTrace trace = impl.tracer->begin(core::TracedOp::kHtDispatch);
        routing_arrays(impl, plan, checked, cached.get(), *handle, context.stream);
        if (plan.hierarchical()) node_arrays(impl, plan, cached.get(), *handle, context.stream);
        launch::HtDispatchViews views = dispatch_views(checked, *handle);
        views.trace = trace;
        if (!plan.cached) launch::launch_ht_routing(context, plan, views);
        if (plan.host_synced) {
            impl.host_counts[0] = 0;
            views.host_counts = impl.host_counts_device;
        }
        if (plan.hierarchical())
            launch::launch_hier_dispatch(context, plan, views);
        else
            launch::launch_ht_dispatch(context, plan, views);
        if (plan.host_synced) take_host_counts(impl, plan, *handle, result);
        receive_outputs(impl, plan, *handle, result, views, context.stream);
        launch::launch_ht_receive(context, plan, views);
    });
    const device::HtRecvInfoLayout info{impl.communicator->size(), plan.extents.local_experts};
    result.num_recv_tokens_per_expert = DeviceTensor::borrow(
        TensorView::contiguous(handle->recv_info.data<int32_t>() + info.expert_counts(), DType::kInt32,
                               {plan.extents.local_experts}, Device::cuda(impl.device)));
    result.handle = handle;
    return result;
}

DispatchResult Buffer::dispatch(const DispatchArgs& args, cudaStream_t stream) {
    return run_dispatch(*impl_, args, nullptr, stream);
}

DispatchResult Buffer::cached_dispatch(const DispatchArgs& args,
                                       const std::shared_ptr<const DispatchHandle>& handle,
                                       cudaStream_t stream) {
    if (!handle) throw InvalidArgument("switchyard: cached_dispatch needs the handle of an earlier dispatch");
    return run_dispatch(*impl_, args, handle, stream);
}

void Buffer::ht_load_kernels(const DispatchArgs& args) {
    Impl& impl = *impl_;
    require_high_throughput(impl);
    const DispatchArgs checked = checked_dispatch_args(impl, args, nullptr);
    const launch::HtDispatchPlan plan = plan_dispatch(impl, checked, false);
    if (plan.hierarchical())
        launch::load_hier_kernels(impl.device, plan);
    else
        launch::load_ht_kernels(impl.device, plan);
}

namespace {

// The combine's arguments, validated against the dispatch it answers. A masked y may come in the
// layout's natural [L, R*T_max, H] shape: it is taken as rows.
CombineArgs checked_combine_args(const Buffer::Impl& impl, const CombineArgs& args,
                                 const DispatchHandle& handle) {
    const auto validation = core::make_validation_context(
        impl.config, impl.communicator->size(), Device::cuda(impl.device), impl.config.max_tokens_per_rank);
    core::CombineShape shape;
    shape.layout = handle.layout;
    shape.num_rows =
        handle.layout == RecvLayout::kRankMajor ? handle.row_capacity : handle.expert_row_capacity;
    shape.num_tokens = handle.num_tokens;
    shape.hidden = handle.hidden;
    shape.topk = handle.topk;
    CombineArgs checked = args;
    const TensorView& y = args.y;
    if (handle.layout == RecvLayout::kExpertMasked && y.defined() && y.ndim == 3) {
        checked.y = TensorView::strided(y.data, y.dtype, {y.shape[0] * y.shape[1], y.shape[2]},
                                        {y.strides[1], y.strides[2]}, y.device);
        checked.y.byte_offset = y.byte_offset;
    }
    core::validate_combine(checked, shape, validation);
    if (args.weighted && !args.topk_weights.defined() && !handle.has_weights)
        throw InvalidArgument(
            "switchyard: weighted combine needs topk_weights here or weights given to the dispatch");
    if (args.hierarchical && args.weighted && !handle.has_weights)
        throw InvalidArgument(
            "switchyard: weighted hierarchical combine applies the dispatch's weights, and the "
            "dispatch had none");
    return checked;
}

launch::HtCombinePlan plan_combine(const Buffer::Impl& impl, const CombineArgs& checked,
                                   const DispatchHandle& handle) {
    launch::HtCombinePlan plan;
    plan.extents = {handle.num_tokens,  impl.config.max_tokens_per_rank,
                    handle.hidden,      handle.topk,
                    handle.num_experts, handle.local_experts};
    plan.mode = handle.layout == RecvLayout::kRankMajor
                    ? device::kHtCombineRankMajor
                    : (checked.hierarchical ? device::kHtCombineHierarchical : device::kHtCombineExpertFlat);
    plan.weighted = checked.weighted;
    plan.num_sms =
        choose_num_sms(impl, checked.num_sms, handle.num_experts, handle.topk, SmModelOp::kCombine);
    plan_nodes(impl, plan);
    return plan;
}

// What the combine kernel reads and writes: the call's tensors, its outputs and the handle's arrays.
launch::HtCombineViews combine_views(const CombineArgs& checked, const DispatchHandle& handle,
                                     const CombineResult& result) {
    launch::HtCombineViews views;
    views.y = checked.y;
    views.row_weights = checked.row_weights;
    if (checked.topk_weights.defined())
        views.home_weights = checked.topk_weights;
    else if (handle.has_weights)
        views.home_weights = handle.topk_weights.view();
    views.bias0 = checked.bias0;
    views.bias1 = checked.bias1;
    views.out = result.out.view();
    views.combined_weights =
        result.combined_topk_weights.defined() ? result.combined_topk_weights.data<float>() : nullptr;
    views.recv_info = handle.recv_info.data<int32_t>();
    views.row_src_token = handle.row_src_token.data<int32_t>();
    views.row_combine_slot = handle.row_combine_slot.data<int32_t>();
    views.row_expert_row = handle.row_expert_row.data<int32_t>();
    views.dispatch_row_weights = handle.row_weights.data<float>();
    views.topk_idx = handle.topk_idx.data<int32_t>();
    views.token_rank_slot = handle.token_rank_slot.data<int32_t>();
    node_views(handle, views);
    return views;
}

}  // namespace

CombineResult Buffer::combine(const CombineArgs& args, const std::shared_ptr<const DispatchHandle>& handle,
                              cudaStream_t stream) {
    Impl& impl = *impl_;
    if (!handle) throw InvalidArgument("switchyard: combine needs the handle of the dispatch it answers");
    require_high_throughput(impl);
    if (handle->num_nodes != std::max(1, impl.topology.num_nodes))
        throw InvalidArgument("switchyard: combine got the handle of a dispatch on another buffer (" +
                              std::to_string(handle->num_nodes) + " node(s), this buffer's ranks span " +
                              std::to_string(impl.topology.num_nodes) + ")");
    const CombineArgs checked = checked_combine_args(impl, args, *handle);
    const launch::HtCombinePlan plan = plan_combine(impl, checked, *handle);
    const int64_t T = handle->num_tokens, H = handle->hidden, K = handle->topk;
    CombineResult result;
    result.done = impl.run_ordered(stream, args.order, [&] {
        const launch::LaunchContext context = impl.context(stream);
        result.out = args.out.defined() ? DeviceTensor::borrow(args.out)
                                        : impl.outputs->allocate(DType::kBFloat16, {T, H}, context.stream);
        if (args.row_weights.defined())
            result.combined_topk_weights = impl.outputs->allocate(DType::kFloat32, {T, K}, context.stream);
        launch::HtCombineViews views = combine_views(checked, *handle, result);
        views.trace = impl.tracer->begin(core::TracedOp::kHtCombine);
        if (plan.hierarchical())
            launch::launch_hier_combine(context, plan, views);
        else
            launch::launch_ht_combine(context, plan, views);
    });
    return result;
}

}  // namespace switchyard
