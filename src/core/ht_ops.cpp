// High-throughput dispatch, cached dispatch and combine (DESIGN.md §2, §5): validation, the plan
// (record format, SM count, output sizes), and the kernel sequence on the communication stream:
//   dispatch:  layout kernel -> dispatch kernel -> [host waits for counts] -> receive kernel
//   combine:   combine kernel
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <cstdlib>
#include <chrono>
#include <thread>

#include "core/buffer_impl.hpp"
#include "core/ht_handle.hpp"
#include "util/mapped_host.hpp"
#include "core/validation.hpp"
#include "launch/ht_launch.hpp"
#include "switchyard/ht/combine_bulk_send.cuh"
#include "switchyard/common/trace_marks.cuh"
#include "switchyard/sm_model.hpp"
#include "util/env_knobs.hpp"

namespace switchyard {
namespace {

// Warps of each 16-warp combine block that send rows; with the publisher (the default) one more
// publishes their arrivals and the others reduce as the rows arrive. Senders that never stall in
// their own fences need fewer warps: 4 with the publisher (run B at 8750589: 240 us at 16 SMs
// against 265 with 6), 6 without (7e254c9 sweep of 6-12). SWITCHYARD_HT_COMBINE_SEND_WARPS
// overrides it, for tuning (read once per process: the op's host path stays free of environment
// lookups).
int combine_send_warps() {
    static const int send_warps =
        4;
    return send_warps;
}

// Rows a combine sender warp writes per system fence, on a grid of `num_sms` blocks. Fewer blocks
// have fewer sender warps, and each then needs more rows in flight between its fences: at 16 SMs
// 8 rows per fence took 287-288 us against 302-303 us with 4, while at 40 SMs 4 rows took 237 us
// against 254-255 us with 8 (2 x H200, EP2, 4096 tokens, logs ht-bench-send-group-7da09d9 and
// ht-combine-knobs-8c58851). Since the senders claim their rows (6fa0db8) and chunks are 2 tokens
// (48a8fbc), 2 rows beat 4 above 16 SMs (195.3 / 199.7 against 206.8 / 208.1 us at 24 / 32 SMs)
// and 4 beat 8 at 16 (228.3 against 233.8 us; at 8 SMs 414-416 us either way; log
// ht-ab-runs-eighth-session). SWITCHYARD_HT_COMBINE_SEND_GROUP overrides it (read once per
// process), for tuning.
int combine_send_group(int num_sms) {
    static const int forced = 0;
    if (forced > 0) return forced;
    return num_sms <= 16 ? 4 : 2;
}

// Tokens a dispatch warp claims at a time (WarpTokens in ht/dispatch.cuh); 0 keeps the static
// split of tokens over warps. One token, claimed a token ahead, was best on 2 x H200 (EP2, 4,096
// tokens: 120.2 us at 16 SMs and 122.4 at 24 against 128.0 and 140.7 static; 2 tokens 121.5 / 125.3;
// 8 tokens 128.5 / 142.2). SWITCHYARD_HT_CLAIM_TOKENS overrides it (read once per process).
int dispatch_claim_tokens() {
    static const int tokens = 1;
    return tokens;
}

// Rank-major combine rows leave through bulk copies (combine_bulk_send.cuh) only when
// SWITCHYARD_HT_COMBINE_BULK_SEND=1 (read once per process): an experiment that is correct (the HT
// tests pass with it) but slower than the register senders, 415 against 287 us at 16 SMs and 257
// against 236 us at 40 (2 x H200, EP2, 71320ca; design notes §3). It needs y's rows 16-byte
// aligned and at least two records in the stages.
int32_t combine_bulk_stages(bool rank_major, const TensorView& y, const device::RecordLayout& record) {
    static const bool bulk_send = false;
    const int32_t stages = device::ht_bulk_send_stages(record.total_bytes);
    const bool aligned = reinterpret_cast<uintptr_t>(y.ptr()) % 16 == 0 && (y.strides[0] * 2) % 16 == 0;
    return rank_major && bulk_send && aligned && stages >= 2 ? stages : 0;
}

// The HT ops' timelines (SWITCHYARD_TRACE=1; common/trace_marks.cuh lists the marks).
device::OpTrace ht_trace(Buffer::Impl& impl, core::TracedOp op) {
    static const char* const kDispatchNames[device::kHtDispatchMarks] = {
        "start",        "routing end",    "routing loaded", "routing published", "routing looked back",
        "dispatch start", "routing done", "notified",       "counts in",         "sent",
        "first sent",   "signalled",      "rows in",        "end",               "receive start",
        "receive end"};
    static const char* const kCombineNames[device::kHtCombineMarks] = {
        "start", "entered", "senders done", "publisher done", "reduce done", "first reduce done", "end"};
    static const core::TracedOpMarks kDispatch{"ht dispatch", kDispatchNames, device::kHtDispatchMarks};
    static const core::TracedOpMarks kCombine{"ht combine", kCombineNames, device::kHtCombineMarks};
    return impl.tracer->begin(op, op == core::TracedOp::kHtDispatch ? kDispatch : kCombine);
}

int choose_num_sms(const Buffer::Impl& impl, int requested, int num_experts, int topk, SmModelOp op) {
    const int budget = impl.sm_budget;
    int num_sms = requested > 0 ? requested : impl.config.num_sms;
    if (num_sms > budget)
        throw InvalidArgument("switchyard: num_sms = " + std::to_string(num_sms) +
                              " exceeds this rank's SM budget of " + std::to_string(budget) + " (the GPU's " +
                              std::to_string(impl.device_sms) + " SMs shared by " +
                              std::to_string(impl.topology.ranks_on_my_gpu) + " ranks)");
    if (num_sms > 0) return num_sms;
    SmModelInput input;
    input.num_experts = num_experts;
    input.topk = topk;
    input.num_ranks = impl.communicator->size();
    input.num_device_sms = impl.device_sms;
    input.max_sms = budget;
    int major = 9;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, impl.device);
    input.bandwidth = default_arch_bandwidth(major);
    input.op = op;
    // The model's share of a combine block's write throughput (a calibration constant that the
    // bench's sweep checks): 10 of 16 warps' worth. The publisher's 4 senders, which never stall in
    // fences and claim their rows, move that much: since the claims (6fa0db8) 24 SMs are as fast
    // as 40 (207-211 against 209-213 us on 2 x H200, EP2), and 10 / 16 makes the model pick 24
    // there (6 / 16, the share before, picked 40).
    input.combine_send_fraction = 10.0 / 16.0;
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

struct DispatchPlan {
    int32_t payload_kind = device::kPayloadBf16;
    int32_t scale_kind = device::kScaleNone;
    device::RecordLayout record{};
    int num_sms = 1;
};

DispatchPlan plan_dispatch(const Buffer::Impl& impl, const DispatchArgs& args, int topk) {
    DispatchPlan plan;
    const int64_t hidden = args.x.shape[1];
    if (args.quantize_fp8) {
        plan.payload_kind = device::kPayloadFp8;
        plan.scale_kind =
            args.quantize_format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0 : device::kScaleFloat32;
    } else if (args.x.dtype == DType::kFloat8E4M3) {
        plan.payload_kind = device::kPayloadFp8;
        plan.scale_kind =
            args.x_scales.dtype == DType::kFloat32 ? device::kScaleFloat32 : device::kScaleUe8m0;
    }
    plan.record = device::RecordLayout::dispatch(hidden, plan.payload_kind, plan.scale_kind, topk);
    plan.num_sms = choose_num_sms(impl, args.num_sms, args.num_experts, topk, SmModelOp::kDispatch);
    return plan;
}

}  // namespace

// The shared body of dispatch and cached dispatch.
static DispatchResult run_dispatch(Buffer& buffer, Buffer::Impl& impl, const DispatchArgs& args,
                                   const std::shared_ptr<const DispatchHandle>& cached, cudaStream_t stream) {
    const int R = buffer.num_ranks(), device = impl.device;
    if (!impl.config.enable_high_throughput)
        throw InvalidArgument(
            "switchyard: this buffer was created without high-throughput regions "
            "(BufferConfig::enable_high_throughput = false)");
    if (R > device::kHtMaxRanks)
        throw UnsupportedError("switchyard: high-throughput kernels support up to " +
                               std::to_string(device::kHtMaxRanks) + " ranks");
    if (impl.topology.num_nodes > 1)
        throw UnsupportedError(
            "switchyard: the ranks span " + std::to_string(impl.topology.num_nodes) +
            " nodes; only the direct (one NVLink domain) high-throughput kernels exist so far");
    auto validation =
        core::make_validation_context(impl.config, R, Device::cuda(device), impl.config.max_tokens_per_rank);
    DispatchArgs checked = args;
    if (cached) {
        // Routing comes from the handle: only the data is new.
        checked.num_experts = cached->num_experts;
        checked.layout = cached->layout;
        checked.expert_alignment = cached->expert_alignment;
        checked.zero_padding = cached->zero_padding;
        checked.counts = cached->host_num_rows >= 0 ? CountMode::kHostSynced : CountMode::kDevice;
        checked.topk_idx = TensorView::contiguous(cached->topk_idx.view().data, DType::kInt32,
                                                  {cached->num_tokens, cached->topk}, Device::cuda(device));
        if (args.x.defined() && args.x.ndim == 2 && args.x.shape[0] != cached->num_tokens)
            throw InvalidArgument("switchyard: cached dispatch needs x with the handle's " +
                                  std::to_string(cached->num_tokens) + " tokens, got " + args.x.describe());
    }
    core::validate_dispatch(checked, validation);
    const bool host_synced = checked.counts == CountMode::kHostSynced;
    if (host_synced && stream_is_capturing(stream))
        throw InvalidArgument(
            "switchyard: host-synced counts cannot be captured in a CUDA graph (the host reads "
            "the counts); use CountMode::kDevice");
    const int32_t T = int32_t(checked.x.shape[0]), H = int32_t(checked.x.shape[1]);
    const int32_t K = int32_t(checked.topk_idx.shape[1]), E = checked.num_experts, L = E / R;
    const DispatchPlan plan = plan_dispatch(impl, checked, K);
    const cudaStream_t comm = impl.op_stream(stream);

    auto handle = std::make_shared<DispatchHandle>();
    handle->num_tokens = T;
    handle->hidden = H;
    handle->topk = K;
    handle->num_experts = E;
    handle->num_ranks = R;
    handle->local_experts = L;
    handle->max_tokens = impl.config.max_tokens_per_rank;
    handle->layout = checked.layout;
    handle->expert_alignment = checked.expert_alignment;
    handle->zero_padding = checked.zero_padding;
    handle->has_weights = checked.topk_weights.defined();
    handle->payload_kind = plan.payload_kind;
    handle->scale_kind = plan.scale_kind;
    handle->record = plan.record;
    const int64_t worst_rows = int64_t(R) * impl.config.max_tokens_per_rank;
    const device::HtRecvInfoLayout info{R, L};
    DispatchResult result;

    result.done = impl.run_ordered(stream, args.order, [&] {
        const launch::LaunchContext context = impl.context(stream);
        const device::OpTrace trace = ht_trace(impl, core::TracedOp::kHtDispatch);
        if (cached) {
            handle->token_rank_slot = cached->token_rank_slot;
            handle->token_expert_pos = cached->token_expert_pos;
            handle->topk_idx = cached->topk_idx;
            handle->num_tokens_per_rank = cached->num_tokens_per_rank;
            handle->num_tokens_per_expert = cached->num_tokens_per_expert;
            handle->recv_info = cached->recv_info;
        } else {
            // The handle's routing arrays: one allocation (host time, see allocate_group).
            auto routing = impl.outputs->allocate_group({{DType::kInt32, {T, R}},
                                                         {DType::kInt32, {T, K}},
                                                         {DType::kInt32, {T, K}},
                                                         {DType::kInt32, {R}},
                                                         {DType::kInt32, {E}},
                                                         {DType::kInt32, {info.total_ints()}},
                                                         {DType::kFloat32, {handle->has_weights ? T : 0, K}}},
                                                        comm);
            handle->token_rank_slot = routing[0];
            handle->token_expert_pos = routing[1];
            handle->topk_idx = routing[2];
            handle->num_tokens_per_rank = routing[3];
            handle->num_tokens_per_expert = routing[4];
            handle->recv_info = routing[5];
            if (handle->has_weights) handle->topk_weights = routing[6];
            device::RoutingArgs layout{};
            layout.topk_idx = checked.topk_idx.ptr();
            layout.topk_row_stride = checked.topk_idx.strides[0];
            layout.num_tokens = T;
            layout.topk = K;
            layout.num_experts = E;
            layout.num_ranks = R;
            layout.num_tokens_per_rank = handle->num_tokens_per_rank.data<int32_t>();
            layout.num_tokens_per_expert = handle->num_tokens_per_expert.data<int32_t>();
            layout.token_rank_slot = handle->token_rank_slot.data<int32_t>();
            layout.token_expert_pos = handle->token_expert_pos.data<int32_t>();
            layout.topk_copy = handle->topk_idx.data<int32_t>();
            if (handle->has_weights) {  // the layout copies the weights with the ids
                layout.topk_weights = checked.topk_weights.ptr_as<const float>();
                layout.weights_row_stride = checked.topk_weights.strides[0];
                layout.weights_copy = handle->topk_weights.data<float>();
            }
            layout.trace = trace;
            // The layout kernel sends the counts notify as soon as it has the totals.
            layout.notify = launch::ht_notify_target(context, L);
            launch::launch_routing(context, layout, checked.topk_idx.dtype == DType::kInt64);
        }
        if (cached && handle->has_weights) {  // no layout kernel to copy them
            handle->topk_weights = impl.outputs->allocate(DType::kFloat32, {T, K}, comm);
            if (T > 0)
                SY_CUDA_CHECK(cudaMemcpy2DAsync(handle->topk_weights.data<float>(), sizeof(float) * K,
                                                checked.topk_weights.ptr(),
                                                sizeof(float) * checked.topk_weights.strides[0],
                                                sizeof(float) * K, T, cudaMemcpyDeviceToDevice, comm));
        }

        device::HtDispatchArgs dispatch{};
        dispatch.common = launch::ht_common(context);
        dispatch.common.num_tokens = T;
        dispatch.common.max_tokens = impl.config.max_tokens_per_rank;
        dispatch.common.hidden = H;
        dispatch.common.topk = K;
        dispatch.common.num_experts = E;
        dispatch.common.local_experts = L;
        dispatch.x = static_cast<const uint8_t*>(checked.x.ptr());
        dispatch.x_row_stride_bytes = checked.x.strides[0] * int64_t(checked.x.element_size());
        if (checked.x_scales.defined()) {
            dispatch.x_scales = static_cast<const uint32_t*>(checked.x_scales.ptr());
            dispatch.scale_row_stride = checked.x_scales.strides[0];
            dispatch.scale_col_stride = checked.x_scales.strides[1];
        }
        if (checked.topk_weights.defined()) {
            dispatch.topk_weights = checked.topk_weights.ptr_as<const float>();
            dispatch.weights_row_stride = checked.topk_weights.strides[0];
        }
        dispatch.topk_idx = handle->topk_idx.data<int32_t>();
        dispatch.token_rank_slot = handle->token_rank_slot.data<int32_t>();
        dispatch.token_expert_pos = handle->token_expert_pos.data<int32_t>();
        dispatch.num_tokens_per_rank = handle->num_tokens_per_rank.data<int32_t>();
        dispatch.num_tokens_per_expert = handle->num_tokens_per_expert.data<int32_t>();
        dispatch.input_payload =
            checked.x.dtype == DType::kFloat8E4M3 ? device::kPayloadFp8 : device::kPayloadBf16;
        dispatch.quantize = checked.quantize_fp8 ? 1 : 0;
        dispatch.scale_kind = plan.scale_kind;
        dispatch.record = plan.record;
        dispatch.stage_bytes = int32_t(plan.record.meta_offset);
        // Records go to the peers with plain 16-byte stores. Bulk (TMA) stores are faster to issue,
        // but on 2 x H200 a 1,000-iteration soak with them read stale rows on the other GPU after
        // the completion flag (iteration 126), and passed with plain stores: until the bulk path's
        // ordering is understood it is opt-in, for investigation (SWITCHYARD_HT_BULK_STORES=1).
        static const bool bulk_stores = false;
        dispatch.generic_stores = bulk_stores ? 0 : 1;
        // This rank's own rows leave through a bulk store (they stay on this GPU, so the ordering
        // question above does not arise) and cost the lanes no stores: 2-3% at EP2 on 2 x H200.
        // SWITCHYARD_HT_SELF_BULK_STORES=0 copies them as the peers' rows (an A/B knob).
        static const bool self_bulk = true;
        dispatch.self_bulk = self_bulk ? 1 : 0;
        dispatch.claim_tokens = dispatch_claim_tokens();
        dispatch.counts_notified = cached ? 0 : 1;
        dispatch.recv_info = handle->recv_info.data<int32_t>();
        dispatch.expert_alignment = checked.expert_alignment;
        dispatch.masked_layout = checked.layout == RecvLayout::kExpertMasked ? 1 : 0;
        if (host_synced) {
            impl.host_counts[0] = 0;
            dispatch.host_counts = impl.host_counts_device;
        }
        dispatch.trace = trace;
        launch::launch_ht_dispatch(context, dispatch, plan.num_sms);

        int64_t rows = worst_rows;
        int64_t expert_rows = 0;
        if (checked.layout == RecvLayout::kExpertContiguous)
            expert_rows = worst_rows * std::min(K, L) + int64_t(L) * (checked.expert_alignment - 1);
        else if (checked.layout == RecvLayout::kExpertMasked)
            expert_rows = int64_t(L) * worst_rows;
        if (host_synced) {
            wait_for_host_counts(impl);
            rows = impl.host_counts[1];
            if (checked.layout == RecvLayout::kExpertContiguous) expert_rows = impl.host_counts[2];
            result.host_num_recv_rows = checked.layout == RecvLayout::kRankMajor ? rows : expert_rows;
            result.host_num_recv_tokens_per_expert.assign(impl.host_counts + 3, impl.host_counts + 3 + L);
            handle->host_num_rows = rows;
        }
        handle->row_capacity = rows;
        handle->expert_row_capacity = expert_rows;
        const int64_t row_slots = std::max<int64_t>(rows, 1);
        auto row_arrays = impl.outputs->allocate_group({{DType::kInt32, {row_slots}},
                                                        {DType::kInt32, {row_slots}},
                                                        {DType::kInt32, {row_slots, K}},
                                                        {DType::kFloat32, {row_slots, K}},
                                                        {DType::kInt32, {1}}},
                                                       comm);
        handle->row_src_token = row_arrays[0];
        handle->row_combine_slot = row_arrays[1];
        handle->row_expert_row = row_arrays[2];
        handle->row_weights = row_arrays[3];
        result.num_recv_rows = row_arrays[4];

        const DType payload_dtype =
            plan.payload_kind == device::kPayloadFp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
        const DType scale_dtype = plan.scale_kind == device::kScaleFloat32 ? DType::kFloat32 : DType::kInt32;
        const int64_t scale_words = plan.record.scale_bytes / 4;
        device::HtReceiveArgs receive{};
        receive.common = dispatch.common;
        receive.record = plan.record;
        receive.recv_info = handle->recv_info.data<int32_t>();
        receive.layout_kind = int32_t(checked.layout);
        receive.zero_padding = checked.zero_padding ? 1 : 0;
        receive.has_weights = handle->has_weights ? 1 : 0;
        receive.row_src_token = handle->row_src_token.data<int32_t>();
        receive.row_combine_slot = handle->row_combine_slot.data<int32_t>();
        receive.row_expert_row = handle->row_expert_row.data<int32_t>();
        receive.row_weights = handle->row_weights.data<float>();
        receive.out_num_rows = result.num_recv_rows.data<int32_t>();
        receive.trace = dispatch.trace;
        if (checked.layout == RecvLayout::kRankMajor) {
            uint8_t* region = impl.memory->local() + impl.layout.ht_dispatch_offset;
            const int64_t record = plan.record.total_bytes;
            result.recv_x = DeviceTensor::borrow(record_view(region, payload_dtype, rows, H, record, device));
            if (scale_words)
                result.recv_scales = DeviceTensor::borrow(record_view(
                    region + plan.record.scale_offset, scale_dtype, rows, scale_words, record, device));
            result.recv_topk_idx = DeviceTensor::borrow(
                record_view(region + plan.record.meta_offset + 8, DType::kInt32, rows, K, record, device));
            if (handle->has_weights)
                result.recv_topk_weights =
                    DeviceTensor::borrow(record_view(region + plan.record.meta_offset + 8 + 4 * int64_t(K),
                                                     DType::kFloat32, rows, K, record, device));
        } else {
            const int64_t out_rows = std::max<int64_t>(expert_rows, 1);
            if (checked.layout == RecvLayout::kExpertMasked) {
                result.recv_x = impl.outputs->allocate(
                    payload_dtype, {L, int64_t(R) * impl.config.max_tokens_per_rank, H}, comm);
                if (scale_words)
                    result.recv_scales = impl.outputs->allocate(
                        scale_dtype, {L, int64_t(R) * impl.config.max_tokens_per_rank, scale_words}, comm);
            } else {
                result.recv_x = impl.outputs->allocate(payload_dtype, {out_rows, H}, comm);
                if (scale_words)
                    result.recv_scales = impl.outputs->allocate(scale_dtype, {out_rows, scale_words}, comm);
            }
            if (handle->has_weights)
                result.recv_topk_weights = impl.outputs->allocate(DType::kFloat32, {out_rows}, comm);
            receive.out_x = result.recv_x.data<uint8_t>();
            receive.out_scales = scale_words ? result.recv_scales.data<uint32_t>() : nullptr;
            receive.out_weights = handle->has_weights ? result.recv_topk_weights.data<float>() : nullptr;
        }
        launch::launch_ht_receive(context, receive);
    });
    result.num_recv_tokens_per_expert = DeviceTensor::borrow(TensorView::contiguous(
        handle->recv_info.data<int32_t>() + info.expert_counts(), DType::kInt32, {L}, Device::cuda(device)));
    result.handle = handle;
    return result;
}

DispatchResult Buffer::dispatch(const DispatchArgs& args, cudaStream_t stream) {
    return run_dispatch(*this, *impl_, args, nullptr, stream);
}

DispatchResult Buffer::cached_dispatch(const DispatchArgs& args,
                                       const std::shared_ptr<const DispatchHandle>& handle,
                                       cudaStream_t stream) {
    if (!handle) throw InvalidArgument("switchyard: cached_dispatch needs the handle of an earlier dispatch");
    return run_dispatch(*this, *impl_, args, handle, stream);
}

CombineResult Buffer::combine(const CombineArgs& args, const std::shared_ptr<const DispatchHandle>& handle,
                              cudaStream_t stream) {
    Impl& impl = *impl_;
    if (!handle) throw InvalidArgument("switchyard: combine needs the handle of the dispatch it answers");
    const int device = impl.device;
    const auto validation = core::make_validation_context(impl.config, num_ranks(), Device::cuda(device),
                                                          impl.config.max_tokens_per_rank);
    const bool rank_major = handle->layout == RecvLayout::kRankMajor;
    core::CombineShape shape;
    shape.layout = handle->layout;
    shape.num_rows = rank_major ? handle->row_capacity : handle->expert_row_capacity;
    if (handle->layout == RecvLayout::kExpertMasked) shape.num_rows = handle->expert_row_capacity;
    shape.num_tokens = handle->num_tokens;
    shape.hidden = handle->hidden;
    shape.topk = handle->topk;
    TensorView y = args.y;
    if (handle->layout == RecvLayout::kExpertMasked && y.defined() && y.ndim == 3) {
        // Accept the masked layout's natural [L, R*T_max, H] shape as rows.
        y = TensorView::strided(y.data, y.dtype, {y.shape[0] * y.shape[1], y.shape[2]},
                                {y.strides[1], y.strides[2]}, y.device);
        y.byte_offset = args.y.byte_offset;
    }
    CombineArgs checked = args;
    checked.y = y;
    core::validate_combine(checked, shape, validation);
    if (args.weighted && !args.topk_weights.defined() && !handle->has_weights)
        throw InvalidArgument(
            "switchyard: weighted combine needs topk_weights here or weights given to the dispatch");
    if (args.hierarchical && args.weighted && !handle->has_weights)
        throw InvalidArgument(
            "switchyard: weighted hierarchical combine applies the dispatch's weights, and the "
            "dispatch had none");
    const int32_t T = handle->num_tokens, H = handle->hidden, K = handle->topk;
    const cudaStream_t comm = impl.op_stream(stream);
    CombineResult result;
    result.done = impl.run_ordered(stream, args.order, [&] {
        const launch::LaunchContext context = impl.context(stream);
        result.out = args.out.defined() ? DeviceTensor::borrow(args.out)
                                        : impl.outputs->allocate(DType::kBFloat16, {T, H}, comm);
        if (args.row_weights.defined())
            result.combined_topk_weights = impl.outputs->allocate(DType::kFloat32, {T, K}, comm);
        device::HtCombineArgs combine{};
        combine.common = launch::ht_common(context);
        combine.common.num_tokens = T;
        combine.common.max_tokens = impl.config.max_tokens_per_rank;
        combine.common.hidden = H;
        combine.common.topk = K;
        combine.common.num_experts = handle->num_experts;
        combine.common.local_experts = handle->local_experts;
        combine.record = device::RecordLayout::combine(H, K);
        combine.recv_info = handle->recv_info.data<int32_t>();
        combine.layout_kind = int32_t(handle->layout);
        combine.mode = rank_major ? 0 : (args.hierarchical ? 2 : 1);
        combine.weighted = args.weighted ? 1 : 0;
        const int num_sms = choose_num_sms(impl, args.num_sms, handle->num_experts, K, SmModelOp::kCombine);
        combine.send_warps = combine_send_warps();
        combine.send_group = combine_send_group(num_sms);
        // Sender warps claim their rows at run time (SWITCHYARD_HT_COMBINE_CLAIM=0: the strided
        // static split, an A/B knob): 210.5 against 247 us at 24 SMs (design notes §3).
        static const bool claim_sends = true;
        combine.claim_sends = claim_sends ? 1 : 0;
        combine.publish = launch::combine_publisher() ? 1 : 0;
        // SWITCHYARD_HT_COMBINE_ENTRY=1: an A/B knob
        static const bool entry_handshake = false;
        combine.entry_handshake = entry_handshake ? 1 : 0;
        // The last chunks to arrive are reduced by many warps at once (ht/combine.cuh,
        // reduce_items); SWITCHYARD_HT_COMBINE_SPLIT_TAIL=0 reduces them whole (an A/B knob).
        static const bool split_tail = true;
        combine.split_tail = split_tail ? 1 : 0;
        combine.bulk_stages = combine_bulk_stages(rank_major, y, combine.record);
        combine.y = static_cast<const uint8_t*>(y.ptr());
        combine.y_row_stride_bytes = y.strides[0] * 2;
        if (args.row_weights.defined()) {
            combine.row_weights = args.row_weights.ptr_as<const float>();
            combine.row_weights_stride =
                args.row_weights.ndim == 2 ? args.row_weights.strides[0] : args.row_weights.strides[0];
        }
        combine.row_src_token = handle->row_src_token.data<int32_t>();
        combine.row_combine_slot = handle->row_combine_slot.data<int32_t>();
        combine.row_expert_row = handle->row_expert_row.data<int32_t>();
        combine.dispatch_row_weights = handle->row_weights.data<float>();
        combine.topk_idx = handle->topk_idx.data<int32_t>();
        combine.token_rank_slot = handle->token_rank_slot.data<int32_t>();
        if (args.topk_weights.defined()) {
            combine.home_weights = args.topk_weights.ptr_as<const float>();
            combine.home_weights_stride = args.topk_weights.strides[0];
        } else if (handle->has_weights) {
            combine.home_weights = handle->topk_weights.data<float>();
            combine.home_weights_stride = K;
        }
        if (args.bias0.defined()) {
            combine.bias0 = args.bias0.ptr_as<const uint16_t>();
            combine.bias0_stride = args.bias0.strides[0];
        }
        if (args.bias1.defined()) {
            combine.bias1 = args.bias1.ptr_as<const uint16_t>();
            combine.bias1_stride = args.bias1.strides[0];
        }
        combine.out = result.out.data<uint16_t>();
        combine.out_stride = result.out.view().strides[0];
        combine.combined_weights =
            result.combined_topk_weights.defined() ? result.combined_topk_weights.data<float>() : nullptr;
        combine.trace = ht_trace(impl, core::TracedOp::kHtCombine);
        launch::launch_ht_combine(context, combine, num_sms);
    });
    return result;
}

}  // namespace switchyard
