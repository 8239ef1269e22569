// Planning before a Buffer exists (switchyard/planning.hpp): buffer memory, output shapes, kernels
// from shapes. The sizes come from the functions the Buffer and the ops use (buffer_sizing.hpp,
// the record and LL layouts of kernels/switchyard/), so a plan is what an op allocates.
#include "switchyard/planning.hpp"

#include <algorithm>
#include <string>

#include "core/buffer_sizing.hpp"
#include "core/validation.hpp"
#include "jit/jit.hpp"
#include "launch/hier_launch.hpp"
#include "launch/ht_launch.hpp"
#include "launch/ll_launch.hpp"
#include "launch/ll_net_launch.hpp"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/ll/dispatch_shape.cuh"
#include "switchyard/ops.hpp"

namespace switchyard {

// --- What the Buffer allocates (buffer_sizing.hpp) ---------------------------------------------------

namespace core {

device::BufferCapacity buffer_capacity(const BufferConfig& config, int num_ranks, int num_nodes) {
    device::BufferCapacity capacity{};
    capacity.num_ranks = num_ranks;
    capacity.max_experts = config.max_experts;
    capacity.max_tokens_per_rank = config.max_tokens_per_rank;
    capacity.max_hidden = config.max_hidden;
    capacity.max_topk = config.max_topk;
    capacity.ll_max_tokens_per_rank = config.ll_max_tokens_per_rank;
    capacity.high_throughput = config.enable_high_throughput;
    capacity.low_latency = config.enable_low_latency;
    capacity.ll_zero_copy_combine = config.ll_zero_copy_combine;
    capacity.num_nodes = num_nodes;
    return capacity;
}

// The HT dispatch's owned per-row arrays and an expert-major copy of R * T_max rows plus the
// combine output, or the LL masked output [L, R * T_ll, H] with its scales and the LL combine
// output, with an eighth of slack.
size_t output_pool_reserve_bytes(const BufferConfig& config, int num_ranks) {
    const int64_t hidden = config.max_hidden, topk = config.max_topk;
    const int64_t row = 2 * hidden + 4 * ((hidden + 127) / 128) + 16 * topk + 64;
    int64_t bytes = 0;
    if (config.enable_high_throughput) {
        const int64_t rows = int64_t(num_ranks) * config.max_tokens_per_rank;
        bytes = std::max(bytes, rows * row + int64_t(config.max_tokens_per_rank) * (2 * hidden + 8 * topk));
    }
    if (config.enable_low_latency) {
        const int64_t local_experts = (config.max_experts + num_ranks - 1) / num_ranks;
        const int64_t rows = local_experts * num_ranks * config.ll_max_tokens_per_rank;
        bytes =
            std::max(bytes, rows * row + int64_t(config.ll_max_tokens_per_rank) * (2 * hidden + 8 * topk));
    }
    // Capped: the reserve comes on top of the buffer itself, and beyond 1 GiB (large EP) the pool
    // still grows on demand.
    return static_cast<size_t>(std::min<int64_t>(bytes + bytes / 8, int64_t(1) << 30));
}

// [chunks][E + R (+ nodes)] tagged totals for T_max tokens at the largest top-k, then the epoch word.
device::RoutingScratch routing_scratch_extent(const BufferConfig& config, int num_ranks, int num_nodes) {
    device::RoutingScratch scratch;
    scratch.max_chunks = device::layout_num_chunks(config.max_tokens_per_rank, config.max_topk);
    scratch.total_words =
        int64_t(scratch.max_chunks) * (config.max_experts + device::routing_rank_columns(num_ranks, num_nodes));
    return scratch;
}

}  // namespace core

namespace {

[[noreturn]] void fail(const std::string& message) {
    throw InvalidArgument("switchyard: " + message);
}

BufferConfig checked_config(const BufferConfig& config, int num_ranks) {
    core::validate_config(config);
    if (num_ranks < 1) fail("num_ranks must be >= 1, got " + std::to_string(num_ranks));
    return upgraded(config);
}

TensorSpec spec(DType dtype, std::initializer_list<int64_t> shape) {
    TensorSpec out;
    out.dtype = dtype;
    out.ndim = int32_t(shape.size());
    int d = 0;
    for (int64_t extent : shape) out.shape[d++] = extent;
    int64_t stride = 1;
    for (int i = out.ndim - 1; i >= 0; --i) {
        out.strides[i] = stride;
        stride *= out.shape[i];
    }
    return out;
}

TensorSpec strided_spec(DType dtype, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
    TensorSpec out = spec(dtype, shape);
    int d = 0;
    for (int64_t stride : strides) out.strides[d++] = stride;
    return out;
}

// The checks of an op's arguments that shapes alone allow (core/validation makes them on a call).
void check_common_shape(const BufferConfig& config, int num_ranks, int64_t tokens, int64_t max_tokens,
                        int64_t hidden, int64_t topk, int32_t num_experts) {
    core::ValidationContext context =
        core::make_validation_context(config, num_ranks, Device::cuda(0), int32_t(max_tokens));
    core::validate_num_experts(num_experts, context);
    if (tokens < 0 || tokens > max_tokens)
        fail("num_tokens " + std::to_string(tokens) + " is outside [0, " + std::to_string(max_tokens) +
             "] (the buffer's tokens per rank)");
    if (hidden < 1 || hidden > config.max_hidden)
        fail("hidden " + std::to_string(hidden) + " is outside [1, max_hidden = " +
             std::to_string(config.max_hidden) + "]");
    if (topk < 1 || topk > config.max_topk)
        fail("topk " + std::to_string(topk) + " is outside [1, max_topk = " + std::to_string(config.max_topk) +
             "]");
}

// The records' payload and scale kinds of an HT dispatch of `shape`: the same decision as the op's
// plan (core/ht_ops.cpp, plan_dispatch).
struct HtRecordKinds {
    int32_t input_payload = device::kPayloadBf16;
    int32_t record_payload = device::kPayloadBf16;
    int32_t scale_kind = device::kScaleNone;
};

HtRecordKinds ht_record_kinds(const HtDispatchShape& shape) {
    HtRecordKinds kinds;
    if (shape.quantize_fp8) {
        kinds.record_payload = device::kPayloadFp8;
        kinds.scale_kind =
            shape.quantize_format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0 : device::kScaleFloat32;
    } else if (shape.x_dtype == DType::kFloat8E4M3) {
        kinds.input_payload = kinds.record_payload = device::kPayloadFp8;
        kinds.scale_kind = shape.x_scales == ScaleFormat::kUE8M0 ? device::kScaleUe8m0 : device::kScaleFloat32;
    }
    return kinds;
}

void check_ht_shape(const BufferConfig& config, int num_ranks, const HtDispatchShape& shape) {
    if (!config.enable_high_throughput)
        fail("this configuration has no high-throughput regions (enable_high_throughput = false)");
    check_common_shape(config, num_ranks, shape.num_tokens, config.max_tokens_per_rank, shape.hidden, shape.topk,
                       shape.num_experts);
    if (shape.x_dtype != DType::kBFloat16 && shape.x_dtype != DType::kFloat8E4M3)
        fail(std::string("x must be bf16 or fp8_e4m3, got ") + dtype_name(shape.x_dtype));
    if (shape.x_dtype == DType::kFloat8E4M3 && shape.x_scales == ScaleFormat::kNone)
        fail("an fp8 x needs x_scales kFloat32 or kUE8M0");
    if (shape.x_dtype == DType::kFloat8E4M3 && shape.quantize_fp8)
        fail("quantize_fp8 needs a bf16 x; this x is already fp8");
    if (shape.quantize_fp8 && shape.quantize_format == ScaleFormat::kNone)
        fail("quantize_fp8 needs quantize_format kFloat32 or kUE8M0");
    if (shape.expert_alignment < 1)
        fail("expert_alignment must be >= 1, got " + std::to_string(shape.expert_alignment));
    if (shape.layout != RecvLayout::kExpertContiguous && shape.expert_alignment != 1)
        fail("expert_alignment applies to the expert-major contiguous layout only");
}

}  // namespace

int64_t TensorSpec::numel() const {
    if (ndim == 0) return 0;
    int64_t count = 1;
    for (int d = 0; d < ndim; ++d) count *= shape[d];
    return count;
}

int64_t TensorSpec::span_bytes() const {
    if (ndim == 0 || numel() == 0) return 0;
    int64_t last = 0;
    for (int d = 0; d < ndim; ++d) last += (shape[d] - 1) * strides[d];
    return (last + 1) * int64_t(dtype_size(dtype));
}

// --- Memory of a BufferConfig ------------------------------------------------------------------------

BufferSizes buffer_sizes(const BufferConfig& given, int num_ranks, int num_nodes) {
    const BufferConfig config = checked_config(given, num_ranks);
    if (num_nodes < 1 || num_ranks % num_nodes != 0)
        fail("num_nodes must be >= 1 and divide num_ranks (" + std::to_string(num_ranks) + "), got " +
             std::to_string(num_nodes));
    const device::BufferLayout layout =
        device::BufferLayout::make(core::buffer_capacity(config, num_ranks, num_nodes));
    BufferSizes sizes;
    sizes.workspace = layout.workspace.total_bytes;
    sizes.ht_dispatch = layout.ht_dispatch_bytes;
    sizes.ht_combine = layout.ht_combine_bytes;
    sizes.low_latency = 2 * layout.ll_set_bytes;
    sizes.ll_forward = layout.ll_forward_bytes;
    sizes.ll_zero_copy = layout.ll_zero_copy_bytes;
    sizes.symmetric = layout.total_bytes;
    sizes.output_pool_reserve = int64_t(core::output_pool_reserve_bytes(config, num_ranks));
    sizes.routing_scratch = int64_t(core::routing_scratch_extent(config, num_ranks, num_nodes).bytes());
    sizes.total = sizes.symmetric + sizes.output_pool_reserve + sizes.routing_scratch;
    return sizes;
}

size_t buffer_bytes(const BufferConfig& config, int num_ranks, int num_nodes) {
    return size_t(buffer_sizes(config, num_ranks, num_nodes).symmetric);
}

// --- HT ----------------------------------------------------------------------------------------------

HtDispatchShape HtDispatchShape::of(const DispatchArgs& args) {
    HtDispatchShape shape;
    if (args.x.ndim == 2) {
        shape.num_tokens = int32_t(args.x.shape[0]);
        shape.hidden = int32_t(args.x.shape[1]);
    }
    if (args.topk_idx.ndim == 2) shape.topk = int32_t(args.topk_idx.shape[1]);
    shape.num_experts = args.num_experts;
    shape.x_dtype = args.x.dtype;
    if (args.x.dtype == DType::kFloat8E4M3)
        shape.x_scales = args.x_scales.defined() && args.x_scales.dtype == DType::kInt32 ? ScaleFormat::kUE8M0
                                                                                         : ScaleFormat::kFloat32;
    shape.quantize_fp8 = args.quantize_fp8;
    shape.quantize_format = args.quantize_format;
    shape.has_weights = args.topk_weights.defined();
    shape.layout = args.layout;
    shape.expert_alignment = args.expert_alignment;
    shape.counts = args.counts;
    return shape;
}

HtOutputShapes ht_output_shapes(const BufferConfig& given, int num_ranks, const HtDispatchShape& shape,
                                int64_t host_num_recv_rows) {
    const BufferConfig config = checked_config(given, num_ranks);
    check_ht_shape(config, num_ranks, shape);
    const int64_t R = num_ranks, T = shape.num_tokens, H = shape.hidden, K = shape.topk;
    const int64_t L = shape.num_experts / num_ranks, T_max = config.max_tokens_per_rank;
    const HtRecordKinds kinds = ht_record_kinds(shape);
    const device::RecordLayout record =
        device::RecordLayout::dispatch(H, kinds.record_payload, kinds.scale_kind, int32_t(K));

    // Rows: the plan's worst case (core/ht_ops.cpp, plan_dispatch), or the host-synced count.
    const int64_t worst_rank_rows = R * T_max;
    int64_t worst = worst_rank_rows;
    if (shape.layout == RecvLayout::kExpertContiguous)
        worst = worst_rank_rows * std::min<int64_t>(K, L) + L * (shape.expert_alignment - 1);
    else if (shape.layout == RecvLayout::kExpertMasked)
        worst = L * worst_rank_rows;
    HtOutputShapes out;
    out.num_recv_rows = worst;
    out.exact = shape.layout == RecvLayout::kExpertMasked;
    if (host_num_recv_rows >= 0 && shape.layout != RecvLayout::kExpertMasked) {
        if (shape.counts != CountMode::kHostSynced)
            fail("host_num_recv_rows applies to host-synced counts; a dispatch with device counts is sized for "
                 "the worst case");
        if (host_num_recv_rows > worst)
            fail("host_num_recv_rows " + std::to_string(host_num_recv_rows) + " exceeds the worst case " +
                 std::to_string(worst) + " of this layout");
        out.num_recv_rows = host_num_recv_rows;
        out.exact = true;
    }
    const int64_t rows = out.num_recv_rows;

    const DType payload = kinds.scale_kind == device::kScaleNone ? DType::kBFloat16 : DType::kFloat8E4M3;
    const DType scale = kinds.scale_kind == device::kScaleFloat32 ? DType::kFloat32 : DType::kInt32;
    const int64_t words = record.scale_bytes / 4;
    if (shape.layout == RecvLayout::kRankMajor) {
        // Views of the receive region: one record per row (core/ht_ops.cpp, receive_outputs).
        const int64_t record_bytes = record.total_bytes;
        out.recv_x = strided_spec(payload, {rows, H}, {record_bytes / int64_t(dtype_size(payload)), 1});
        if (words) out.recv_scales = strided_spec(scale, {rows, words}, {record_bytes / 4, 1});
        out.recv_topk_idx = strided_spec(DType::kInt32, {rows, K}, {record_bytes / 4, 1});
        if (shape.has_weights) out.recv_topk_weights = strided_spec(DType::kFloat32, {rows, K}, {record_bytes / 4, 1});
        out.combine_y = spec(DType::kBFloat16, {rows, H});
        out.combine_row_weights = spec(DType::kFloat32, {rows, K});
    } else {
        const int64_t owned_rows = std::max<int64_t>(rows, 1);
        if (shape.layout == RecvLayout::kExpertMasked) {
            out.recv_x = spec(payload, {L, R * T_max, H});
            if (words) out.recv_scales = spec(scale, {L, R * T_max, words});
            out.combine_y = spec(DType::kBFloat16, {L, R * T_max, H});
        } else {
            out.recv_x = spec(payload, {owned_rows, H});
            if (words) out.recv_scales = spec(scale, {owned_rows, words});
            out.combine_y = spec(DType::kBFloat16, {rows, H});
        }
        if (shape.has_weights) out.recv_topk_weights = spec(DType::kFloat32, {owned_rows});
        out.combine_row_weights = spec(DType::kFloat32, {rows});
    }
    out.num_recv_tokens_per_expert = spec(DType::kInt32, {L});
    out.num_recv_rows_tensor = spec(DType::kInt32, {1});
    out.combine_out = spec(DType::kBFloat16, {T, H});
    out.combined_topk_weights = spec(DType::kFloat32, {T, K});
    return out;
}

void ht_load_kernels(int device, const HtDispatchShape& shape) {
    if (shape.hidden < 1 || shape.topk < 1) fail("ht_load_kernels needs the shape's hidden and topk");
    const HtRecordKinds kinds = ht_record_kinds(shape);
    launch::HtDispatchPlan plan;
    plan.extents.hidden = shape.hidden;
    plan.extents.topk = shape.topk;
    plan.input_payload = kinds.input_payload;
    plan.scale_kind = kinds.scale_kind;
    plan.record = device::RecordLayout::dispatch(shape.hidden, kinds.record_payload, kinds.scale_kind, shape.topk);
    plan.layout = shape.layout;
    plan.num_nodes = std::max(1, shape.num_nodes);
    plan.gin = shape.network_backend == NetworkBackend::kGin;
    // As Buffer::ht_load_kernels (core/ht_ops.cpp).
    if (plan.hierarchical())
        launch::load_hier_kernels(device, plan);
    else
        launch::load_ht_kernels(device, plan);
}

// --- LL ----------------------------------------------------------------------------------------------

LlDispatchShape LlDispatchShape::of(const LowLatencyDispatchArgs& args) {
    LlDispatchShape shape;
    if (args.x.ndim == 2) {
        shape.num_tokens = int32_t(args.x.shape[0]);
        shape.hidden = int32_t(args.x.shape[1]);
    }
    if (args.topk_idx.ndim == 2) shape.topk = int32_t(args.topk_idx.shape[1]);
    shape.num_experts = args.num_experts;
    shape.index_dtype = args.topk_idx.dtype;
    shape.use_fp8 = args.use_fp8;
    shape.scale_format = args.scale_format;
    shape.layout = args.layout;
    shape.expert_alignment = args.expert_alignment;
    return shape;
}

namespace {

void check_ll_shape(const BufferConfig& config, int num_ranks, const LlDispatchShape& shape) {
    if (!config.enable_low_latency)
        fail("this configuration has no low-latency regions (enable_low_latency = false)");
    check_common_shape(config, num_ranks, shape.num_tokens, config.ll_max_tokens_per_rank, shape.hidden,
                       shape.topk, shape.num_experts);
    if (shape.hidden % 16 != 0) fail("the LL hidden size must be a multiple of 16, got " + std::to_string(shape.hidden));
    if (shape.index_dtype != DType::kInt32 && shape.index_dtype != DType::kInt64)
        fail(std::string("topk_idx must be int32 or int64, got ") + dtype_name(shape.index_dtype));
    if (shape.use_fp8 && shape.scale_format != ScaleFormat::kFloat32 && shape.scale_format != ScaleFormat::kUE8M0)
        fail("use_fp8 needs scale_format kFloat32 or kUE8M0");
    LowLatencyDispatchArgs layout_args;
    layout_args.layout = shape.layout;
    layout_args.expert_alignment = shape.expert_alignment;
    core::validate_ll_layout(layout_args);
}

launch::LlDispatchShape ll_kernel_shape(const LlDispatchShape& shape) {
    launch::LlDispatchShape kernel;
    kernel.hidden = shape.hidden;
    kernel.topk = shape.topk;
    kernel.scale_kind = !shape.use_fp8 ? device::kScaleNone
                                       : (shape.scale_format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0
                                                                                    : device::kScaleFloat32);
    kernel.index_is_int64 = shape.index_dtype == DType::kInt64;
    kernel.contiguous = shape.layout == RecvLayout::kExpertContiguous;
    return kernel;
}

}  // namespace

LlOutputShapes ll_output_shapes(const BufferConfig& given, int num_ranks, const LlDispatchShape& shape) {
    const BufferConfig config = checked_config(given, num_ranks);
    check_ll_shape(config, num_ranks, shape);
    const int64_t R = num_ranks, T = shape.num_tokens, H = shape.hidden, L = shape.num_experts / num_ranks;
    const int64_t per_expert = R * config.ll_max_tokens_per_rank;
    const launch::LlDispatchShape kernel = ll_kernel_shape(shape);
    const int64_t words = device::RecordLayout::scale_words(H, kernel.scale_kind);
    const DType payload = shape.use_fp8 ? DType::kFloat8E4M3 : DType::kBFloat16;
    const DType scale = kernel.scale_kind == device::kScaleUe8m0 ? DType::kInt32 : DType::kFloat32;
    LlOutputShapes out;
    // As core/ll_ops.cpp (allocate_dispatch_outputs) allocates them.
    if (shape.layout == RecvLayout::kExpertContiguous) {
        const int64_t rows = device::ll_contiguous_rows(num_ranks, config.ll_max_tokens_per_rank, shape.topk,
                                                        int32_t(L), shape.expert_alignment);
        out.num_recv_rows = rows;
        out.recv_x = spec(payload, {rows, H});
        if (shape.use_fp8) out.recv_scales = strided_spec(scale, {rows, words}, {1, rows});
        out.combine_y = spec(DType::kBFloat16, {rows, H});
    } else {
        out.num_recv_rows = L * per_expert;
        out.recv_x = spec(payload, {L, per_expert, H});
        if (shape.use_fp8) out.recv_scales = strided_spec(scale, {L, per_expert, words}, {words * per_expert, 1, per_expert});
        out.combine_y = spec(DType::kBFloat16, {L, per_expert, H});
    }
    out.recv_count = spec(DType::kInt32, {L});
    out.recv_expert_offsets = spec(DType::kInt32, {L + 1});
    out.combine_out = spec(DType::kBFloat16, {T, H});
    return out;
}

void ll_load_kernels(int device, const LlDispatchShape& shape) {
    if (shape.hidden < 1 || shape.topk < 1) fail("ll_load_kernels needs the shape's hidden and topk");
    if (shape.hidden % 16 != 0) fail("the LL hidden size must be a multiple of 16, got " + std::to_string(shape.hidden));
    if (shape.index_dtype != DType::kInt32 && shape.index_dtype != DType::kInt64)
        fail(std::string("topk_idx must be int32 or int64, got ") + dtype_name(shape.index_dtype));
    if (shape.num_nodes <= 1) {
        for (const jit::KernelSource& source : launch::ll_op_sources(ll_kernel_shape(shape)))
            jit::get_kernel(source, device);
        return;
    }
    // As Buffer::ll_load_kernels on a buffer spanning nodes (core/ll_ops.cpp).
    const bool gin = shape.network_backend == NetworkBackend::kGin;
    for (const jit::KernelSource& source : launch::ll_net_op_sources(ll_kernel_shape(shape), gin))
        jit::get_kernel(source, device, launch::ll_net_compile_options(gin));
}

}  // namespace switchyard
