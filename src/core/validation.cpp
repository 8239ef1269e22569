// Host-side argument validation (see validation.hpp).
#include "core/validation.hpp"

#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

#include "core/ll_handle.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::core {
namespace {

// Bulk copies move rows in 16-byte units from 16-byte aligned addresses.
constexpr int64_t kRowAlignmentBytes = 16;
constexpr int32_t kMaxSupportedTopk = 32;  // one warp lane per top-k slot
constexpr int32_t kMaxSupportedExperts = 4096;
constexpr int32_t kMaxSupportedHidden = 65536;

[[noreturn]] void fail(const std::string& message) {
    throw InvalidArgument("switchyard: " + message);
}

std::string shape_text(const TensorView& view) {
    return view.describe();
}

std::string extents_text(std::initializer_list<int64_t> extents) {
    std::string text = "[";
    for (int64_t extent : extents) text += (text.size() > 1 ? ", " : "") + std::to_string(extent);
    return text + "]";
}

void require_defined(const TensorView& view, const char* name) {
    if (!view.defined()) fail(std::string(name) + " is required");
}

void require_ndim(const TensorView& view, const char* name, int ndim) {
    if (view.ndim != ndim)
        fail(std::string(name) + " must be " + std::to_string(ndim) + "-D, got " + shape_text(view));
    for (int d = 0; d < ndim; ++d)
        if (view.shape[d] < 0) fail(std::string(name) + " has a negative extent: " + shape_text(view));
}

void require_2d(const TensorView& view, const char* name) {
    require_ndim(view, name, 2);
}

void require_device(const TensorView& view, const char* name, const ValidationContext& context) {
    if (!(view.device == context.device)) {
        std::ostringstream out;
        out << name << " must be on the buffer's device ("
            << (context.device.type == DeviceType::kCUDA ? "cuda:" + std::to_string(context.device.id)
                                                         : "cpu")
            << "), got " << shape_text(view);
        fail(out.str());
    }
}

void require_dtype(const TensorView& view, const char* name, DType expected) {
    if (view.dtype != expected)
        fail(std::string(name) + " must be " + dtype_name(expected) + ", got " + dtype_name(view.dtype));
}

void require_inner_contiguous(const TensorView& view, const char* name) {
    const int last = view.ndim - 1;
    if (view.shape[last] > 1 && view.strides[last] != 1)
        fail(std::string(name) + " must have unit stride in its last dimension, got " + shape_text(view));
}

// A device tensor of `dtype` with `ndim` dimensions on the buffer's device, unit stride in the last.
void require_tensor(const TensorView& view, const char* name, DType dtype, int ndim,
                    const ValidationContext& context) {
    require_defined(view, name);
    require_ndim(view, name, ndim);
    require_device(view, name, context);
    require_dtype(view, name, dtype);
    require_inner_contiguous(view, name);
}

void require_rows(const TensorView& view, const char* name, int64_t rows) {
    if (view.shape[0] != rows)
        fail(std::string(name) + " must have " + std::to_string(rows) + " rows (one per token), got " +
             shape_text(view));
}

void require_shape(const TensorView& view, const char* name, std::initializer_list<int64_t> shape) {
    int d = 0;
    for (int64_t extent : shape)
        if (view.shape[d++] != extent)
            fail(std::string(name) + " must have shape " + extents_text(shape) + ", got " + shape_text(view));
}

// Rows are moved in 16-byte units from 16-byte aligned addresses: the rows' bytes, every stride
// but the last and the base address are multiples of 16 bytes.
void require_aligned_rows(const TensorView& view, const char* name) {
    const int64_t element = static_cast<int64_t>(view.element_size());
    const int last = view.ndim - 1;
    const int64_t row_bytes = view.shape[last] * element;
    const auto address = reinterpret_cast<uintptr_t>(view.ptr());
    if (row_bytes % kRowAlignmentBytes != 0)
        fail(std::string(name) + " rows must be a multiple of " + std::to_string(kRowAlignmentBytes) +
             " bytes for bulk copies, got " + std::to_string(row_bytes) + " bytes (" + shape_text(view) +
             "); pad the hidden size");
    for (int d = 0; d < last; ++d) {
        const int64_t stride_bytes = view.strides[d] * element;
        if (view.shape[d] > 1 && stride_bytes % kRowAlignmentBytes != 0)
            fail(std::string(name) + (d == last - 1 ? " row stride" : " stride " + std::to_string(d)) +
                 " must be a multiple of " + std::to_string(kRowAlignmentBytes) + " bytes, got " +
                 std::to_string(stride_bytes) + " bytes");
    }
    if (address % kRowAlignmentBytes != 0)
        fail(std::string(name) + " data must be " + std::to_string(kRowAlignmentBytes) +
             "-byte aligned, got address 0x" + [&] {
                 std::ostringstream hex;
                 hex << std::hex << address;
                 return hex.str();
             }());
}

// topk_idx: [T, K] int32 or int64 on the buffer's device, K within the buffer's max_topk. Returns K.
int64_t require_topk_idx(const TensorView& topk_idx, const ValidationContext& context, int64_t num_tokens) {
    require_2d(topk_idx, "topk_idx");
    require_device(topk_idx, "topk_idx", context);
    if (topk_idx.dtype != DType::kInt32 && topk_idx.dtype != DType::kInt64)
        fail(std::string("topk_idx must be int32 or int64, got ") + dtype_name(topk_idx.dtype));
    require_rows(topk_idx, "topk_idx", num_tokens);
    require_inner_contiguous(topk_idx, "topk_idx");
    const int64_t topk = topk_idx.shape[1];
    if (topk < 1 || topk > context.max_topk)
        fail("top-k must be between 1 and the buffer's max_topk (" + std::to_string(context.max_topk) +
             "), got " + std::to_string(topk));
    return topk;
}

// topk_weights of a dispatch: fp32 in the shape of topk_idx.
void require_topk_weights(const TensorView& weights, const ValidationContext& context, int64_t num_tokens,
                          int64_t topk) {
    require_2d(weights, "topk_weights");
    require_device(weights, "topk_weights", context);
    require_dtype(weights, "topk_weights", DType::kFloat32);
    require_inner_contiguous(weights, "topk_weights");
    if (weights.shape[0] != num_tokens || weights.shape[1] != topk)
        fail("topk_weights must have the shape of topk_idx [" + std::to_string(num_tokens) + ", " +
             std::to_string(topk) + "], got " + shape_text(weights));
}

// An optional per-expert or per-rank statistics vector: `dtype` [extent] when given.
void require_optional_vector(const TensorView& view, const char* name, DType dtype, int64_t extent,
                             const ValidationContext& context) {
    if (!view.defined()) return;
    require_tensor(view, name, dtype, 1, context);
    require_shape(view, name, {extent});
}

void validate_topk(const DispatchArgs& args, const ValidationContext& context, int64_t num_tokens) {
    if (!args.topk_idx.defined()) fail("topk_idx is required for a dispatch without a handle");
    const int64_t topk = require_topk_idx(args.topk_idx, context, num_tokens);
    if (args.topk_weights.defined()) require_topk_weights(args.topk_weights, context, num_tokens, topk);
}

void validate_scales(const DispatchArgs& args, const ValidationContext& context, int64_t num_tokens,
                     int64_t hidden) {
    if (!args.x_scales.defined())
        fail("an fp8 x needs x_scales (fp32 [T, ceil(H/128)] or int32 [T, ceil(H/512)])");
    require_2d(args.x_scales, "x_scales");
    require_device(args.x_scales, "x_scales", context);
    require_rows(args.x_scales, "x_scales", num_tokens);
    int64_t expected_columns = 0;
    if (args.x_scales.dtype == DType::kFloat32)
        expected_columns = (hidden + 127) / 128;
    else if (args.x_scales.dtype == DType::kInt32)
        expected_columns = (hidden + 511) / 512;
    else
        fail(std::string(
                 "x_scales must be fp32 (one scale per 128 channels) or int32 (UE8M0, four per word), got ") +
             dtype_name(args.x_scales.dtype));
    if (args.x_scales.shape[1] != expected_columns)
        fail("x_scales must have " + std::to_string(expected_columns) + " columns for hidden " +
             std::to_string(hidden) + ", got " + shape_text(args.x_scales));
}

}  // namespace

ValidationContext make_validation_context(const BufferConfig& config, int num_ranks, Device device,
                                          int32_t max_tokens_per_rank) {
    ValidationContext context;
    context.num_ranks = num_ranks;
    context.max_tokens_per_rank = max_tokens_per_rank;
    context.max_hidden = config.max_hidden;
    context.max_topk = config.max_topk;
    context.max_experts = config.max_experts;
    context.ll_zero_copy_combine = config.ll_zero_copy_combine;
    context.device = device;
    return context;
}

void validate_config(const BufferConfig& config) {
    if (config.struct_size < offsetof(BufferConfig, num_sms) + sizeof(config.num_sms) || config.version < 1)
        fail("BufferConfig has an unknown size or version: was it initialised with BufferConfig{}?");
    if (config.max_tokens_per_rank < 1)
        fail("max_tokens_per_rank must be >= 1, got " + std::to_string(config.max_tokens_per_rank));
    if (config.max_hidden < 16 || config.max_hidden > kMaxSupportedHidden)
        fail("max_hidden must be in [16, " + std::to_string(kMaxSupportedHidden) + "], got " +
             std::to_string(config.max_hidden));
    if (config.max_topk < 1 || config.max_topk > kMaxSupportedTopk)
        fail("max_topk must be in [1, " + std::to_string(kMaxSupportedTopk) + "], got " +
             std::to_string(config.max_topk));
    if (config.max_experts < 1 || config.max_experts > kMaxSupportedExperts)
        fail("max_experts must be in [1, " + std::to_string(kMaxSupportedExperts) + "], got " +
             std::to_string(config.max_experts));
    if (config.enable_low_latency && config.ll_max_tokens_per_rank < 1)
        fail("ll_max_tokens_per_rank must be >= 1 when low latency is enabled");
    if (!(config.timeout_seconds > 0.0)) fail("timeout_seconds must be positive");
    if (config.emulated_nodes < 0) fail("emulated_nodes must be >= 0");
    if (config.num_sms < 0) fail("num_sms must be >= 0 (0 = analytical model)");
}

void validate_num_experts(int32_t num_experts, const ValidationContext& context) {
    if (num_experts < 1) fail("num_experts must be >= 1, got " + std::to_string(num_experts));
    if (num_experts > context.max_experts)
        fail("num_experts (" + std::to_string(num_experts) + ") exceeds the buffer's max_experts (" +
             std::to_string(context.max_experts) + ")");
    if (num_experts % context.num_ranks != 0)
        fail("num_experts (" + std::to_string(num_experts) + ") must be a multiple of the number of ranks (" +
             std::to_string(context.num_ranks) + ") so every rank owns E/R experts");
}

void require_device_resident(const TensorView& view, const char* name, int device) {
    if (!view.defined()) return;
    const std::string where = "cuda:" + std::to_string(device);
    if (view.device.type != DeviceType::kCUDA || view.device.id != device)
        fail(std::string(name) + " must be in device memory on the buffer's GPU (" + where +
             "): the expert ids are checked and routed on the GPU; got " + shape_text(view));
    if (view.numel() == 0) return;
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, view.ptr());
    if (status != cudaSuccess) {
        (void)cudaGetLastError();
        fail(std::string(name) + " is labelled " + where + " but its pointer is not device memory (" +
             cudaGetErrorName(status) + ")");
    }
    if (attributes.type == cudaMemoryTypeManaged) return;
    if (attributes.type == cudaMemoryTypeDevice && attributes.device == device) return;
    const char* what = attributes.type == cudaMemoryTypeHost           ? "pinned host memory"
                       : attributes.type == cudaMemoryTypeUnregistered ? "pageable host memory"
                                                                       : "memory of another GPU";
    fail(
        std::string(name) + " is labelled " + where + " but its pointer is " + what +
        (attributes.type == cudaMemoryTypeDevice ? " (cuda:" + std::to_string(attributes.device) + ")" : "") +
        "; copy it to the buffer's GPU first");
}

void validate_dispatch(const DispatchArgs& args, const ValidationContext& context) {
    validate_num_experts(args.num_experts, context);
    if (!args.x.defined()) fail("x is required");
    require_2d(args.x, "x");
    require_device(args.x, "x", context);
    const int64_t num_tokens = args.x.shape[0], hidden = args.x.shape[1];
    if (num_tokens > context.max_tokens_per_rank)
        fail("x has " + std::to_string(num_tokens) + " tokens, more than the buffer's max_tokens_per_rank (" +
             std::to_string(context.max_tokens_per_rank) + ")");
    if (hidden < 1 || hidden > context.max_hidden)
        fail("hidden size " + std::to_string(hidden) +
             " is outside [1, max_hidden = " + std::to_string(context.max_hidden) + "]");
    require_inner_contiguous(args.x, "x");
    if (args.x.dtype == DType::kBFloat16) {
        if (args.x_scales.defined())
            fail("x_scales given for a bf16 x; scales travel only with fp8 payloads");
    } else if (args.x.dtype == DType::kFloat8E4M3) {
        if (args.quantize_fp8) fail("quantize_fp8 needs a bf16 x; this x is already fp8");
        validate_scales(args, context, num_tokens, hidden);
    } else {
        fail(std::string("x must be bf16 or fp8_e4m3, got ") + dtype_name(args.x.dtype));
    }
    if (args.quantize_fp8 && args.quantize_format == ScaleFormat::kNone)
        fail("quantize_fp8 needs quantize_format kFloat32 or kUE8M0");
    require_aligned_rows(args.x, "x");
    validate_topk(args, context, num_tokens);
    if (args.expert_alignment < 1)
        fail("expert_alignment must be >= 1, got " + std::to_string(args.expert_alignment));
    if (args.layout != RecvLayout::kExpertContiguous && (args.expert_alignment != 1 || args.zero_padding))
        fail("expert_alignment and zero_padding apply to the expert-major contiguous layout only");
    if (args.num_sms < 0) fail("num_sms must be >= 0 (0 = analytical model)");
}

void validate_combine(const CombineArgs& args, const CombineShape& shape, const ValidationContext& context) {
    if (!args.y.defined()) fail("combine needs y (the expert outputs)");
    require_2d(args.y, "y");
    require_device(args.y, "y", context);
    require_dtype(args.y, "y", DType::kBFloat16);
    require_inner_contiguous(args.y, "y");
    if (args.y.shape[0] != shape.num_rows || args.y.shape[1] != shape.hidden)
        fail("y must have the dispatch's output shape [" + std::to_string(shape.num_rows) + ", " +
             std::to_string(shape.hidden) + "], got " + shape_text(args.y));
    require_aligned_rows(args.y, "y");
    const bool rank_major = shape.layout == RecvLayout::kRankMajor;
    if (rank_major && (args.weighted || args.hierarchical))
        fail(
            "rank-major combine is an unweighted sum over receiving ranks; pre-multiply y, or dispatch into "
            "an "
            "expert-major layout to use weighted or hierarchical combine");
    if (args.row_weights.defined()) {
        require_device(args.row_weights, "row_weights", context);
        require_dtype(args.row_weights, "row_weights", DType::kFloat32);
        const bool ok = rank_major
                            ? (args.row_weights.ndim == 2 && args.row_weights.shape[0] == shape.num_rows &&
                               args.row_weights.shape[1] == shape.topk)
                            : (args.row_weights.ndim == 1 && args.row_weights.shape[0] == shape.num_rows);
        if (!ok)
            fail(std::string("row_weights must be ") + (rank_major ? "[rows, K]" : "[rows]") +
                 " for this layout, got " + shape_text(args.row_weights));
    }
    if (args.topk_weights.defined()) {
        if (rank_major) fail("topk_weights on the home rank apply to weighted expert-major combine only");
        if (args.hierarchical)
            fail(
                "hierarchical combine weights each partial with the dispatch's weights on the receiving "
                "rank; "
                "home-rank topk_weights cannot be applied there");
        require_2d(args.topk_weights, "topk_weights");
        require_device(args.topk_weights, "topk_weights", context);
        require_dtype(args.topk_weights, "topk_weights", DType::kFloat32);
        if (args.topk_weights.shape[0] != shape.num_tokens || args.topk_weights.shape[1] != shape.topk)
            fail("topk_weights must be [T, K] = [" + std::to_string(shape.num_tokens) + ", " +
                 std::to_string(shape.topk) + "], got " + shape_text(args.topk_weights));
    }
    for (const auto* bias : {&args.bias0, &args.bias1}) {
        if (!bias->defined()) continue;
        const char* name = bias == &args.bias0 ? "bias0" : "bias1";
        require_2d(*bias, name);
        require_device(*bias, name, context);
        require_dtype(*bias, name, DType::kBFloat16);
        require_inner_contiguous(*bias, name);
        if (bias->shape[0] != shape.num_tokens || bias->shape[1] != shape.hidden)
            fail(std::string(name) + " must be [T, H] = [" + std::to_string(shape.num_tokens) + ", " +
                 std::to_string(shape.hidden) + "], got " + shape_text(*bias));
    }
    if (args.bias1.defined() && !args.bias0.defined())
        fail("bias1 given without bias0; pass the first bias as bias0");
    if (args.out.defined()) {
        require_2d(args.out, "out");
        require_device(args.out, "out", context);
        require_dtype(args.out, "out", DType::kBFloat16);
        require_inner_contiguous(args.out, "out");
        if (args.out.shape[0] != shape.num_tokens || args.out.shape[1] != shape.hidden)
            fail("out must be [T, H] = [" + std::to_string(shape.num_tokens) + ", " +
                 std::to_string(shape.hidden) + "], got " + shape_text(args.out));
    }
    if (args.num_sms < 0) fail("num_sms must be >= 0 (0 = analytical model)");
}

// --- Low latency --------------------------------------------------------------------------------

void validate_low_latency(const BufferConfig& config, const char* op) {
    if (!config.enable_low_latency)
        fail(std::string(op) + " needs a buffer created with BufferConfig::enable_low_latency = true");
}

void validate_ll_layout(const LowLatencyDispatchArgs& args) {
    if (args.layout != RecvLayout::kExpertMasked && args.layout != RecvLayout::kExpertContiguous)
        fail("the LL dispatch's layout must be kExpertMasked or kExpertContiguous");
    if (args.expert_alignment < 1 || args.expert_alignment > 1024)
        fail("expert_alignment must be in [1, 1024], got " + std::to_string(args.expert_alignment));
    if (args.layout != RecvLayout::kExpertContiguous && args.expert_alignment != 1)
        fail("expert_alignment applies to the expert-major contiguous layout only");
    if (args.layout != RecvLayout::kExpertContiguous && args.zero_padding)
        fail(
            "zero_padding applies to the expert-major contiguous layout only: the masked layout has no "
            "padding rows");
}

void validate_ll_dispatch(const LowLatencyDispatchArgs& args, const ValidationContext& context) {
    require_tensor(args.x, "x", DType::kBFloat16, 2, context);
    const int64_t T = args.x.shape[0], H = args.x.shape[1];
    if (T > context.max_tokens_per_rank)
        fail("x has " + std::to_string(T) + " tokens, more than the buffer's ll_max_tokens_per_rank (" +
             std::to_string(context.max_tokens_per_rank) + ")");
    if (H < 16 || H % 16 != 0 || H > context.max_hidden)
        fail("hidden size " + std::to_string(H) +
             " must be a positive multiple of 16 and at most max_hidden (" +
             std::to_string(context.max_hidden) + ")");
    require_aligned_rows(args.x, "x");
    if (!args.topk_idx.defined()) fail("topk_idx is required");
    const int64_t K = require_topk_idx(args.topk_idx, context, T);
    validate_num_experts(args.num_experts, context);
    if (args.use_fp8 && args.scale_format != ScaleFormat::kFloat32 &&
        args.scale_format != ScaleFormat::kUE8M0)
        fail("use_fp8 needs scale_format kFloat32 or kUE8M0");
    validate_ll_layout(args);
    if (args.topk_weights.defined()) require_topk_weights(args.topk_weights, context, T, K);
    require_optional_vector(args.cumulative_local_expert_recv_stats, "cumulative_local_expert_recv_stats",
                            DType::kInt32, args.num_experts / context.num_ranks, context);
    require_optional_vector(args.wait_time_stats, "wait_time_stats", DType::kInt64, context.num_ranks,
                            context);
}

void validate_ll_combine(const LowLatencyCombineArgs& args, const LowLatencyHandle* handle,
                         const ValidationContext& context) {
    if (handle == nullptr) fail("ll_combine needs the handle of the LL dispatch it answers");
    if (handle->num_ranks != context.num_ranks)
        fail("ll_combine: the handle comes from a buffer with a different rank count");
    const int64_t T = handle->num_tokens, H = handle->hidden, K = handle->topk, L = handle->local_experts;
    const bool contiguous = handle->layout == RecvLayout::kExpertContiguous;
    if (args.zero_copy) {
        if (!context.ll_zero_copy_combine)
            fail("ll_combine with zero_copy = true needs BufferConfig::ll_zero_copy_combine = true");
        if (contiguous) fail("ll_combine with zero_copy = true needs a dispatch in the masked layout");
    } else {
        // A masked y may also come flattened to [L * R*T_ll, H], as the HT combine takes it.
        const bool flattened = !contiguous && args.y.ndim == 2;
        require_tensor(args.y, "y", DType::kBFloat16, contiguous || flattened ? 2 : 3, context);
        if (contiguous)
            require_shape(args.y, "y", {handle->contiguous_rows, H});
        else if (flattened)
            require_shape(args.y, "y", {L * handle->rows_per_expert(), H});
        else
            require_shape(args.y, "y", {L, handle->rows_per_expert(), H});
        require_aligned_rows(args.y, "y");
    }
    if (!args.topk_idx.defined()) fail("topk_idx is required: the dispatch's [T, K]");
    require_topk_idx(args.topk_idx, context, T);
    require_shape(args.topk_idx, "topk_idx", {T, K});
    if (args.hierarchical) {
        if (!handle->has_weights)
            fail(
                "hierarchical ll_combine weights each partial on the expert ranks with the weights that "
                "travelled with the dispatch: pass topk_weights to ll_dispatch");
        if (args.topk_weights.defined())
            fail(
                "hierarchical ll_combine applies the dispatch's top-k weights; leave the combine's "
                "topk_weights empty");
    } else {
        require_tensor(args.topk_weights, "topk_weights", DType::kFloat32, 2, context);
        require_shape(args.topk_weights, "topk_weights", {T, K});
    }
    if (args.out.defined()) {
        require_tensor(args.out, "out", DType::kBFloat16, 2, context);
        require_shape(args.out, "out", {T, H});
        require_aligned_rows(args.out, "out");
    }
    require_optional_vector(args.wait_time_stats, "wait_time_stats", DType::kInt64, context.num_ranks,
                            context);
}

TensorView ll_combine_y_view(const TensorView& y, const LowLatencyHandle& handle) {
    if (handle.layout != RecvLayout::kExpertMasked || y.ndim != 2) return y;
    TensorView view =
        TensorView::strided(y.data, y.dtype, {handle.local_experts, handle.rows_per_expert(), y.shape[1]},
                            {handle.rows_per_expert() * y.strides[0], y.strides[0], y.strides[1]}, y.device);
    view.byte_offset = y.byte_offset;
    return view;
}

void validate_ll_combine_input(const LowLatencyHandle& handle, bool has_zero_copy_area,
                               const ValidationContext& context) {
    if (!context.ll_zero_copy_combine || !has_zero_copy_area)
        fail("ll_combine_input needs a buffer created with BufferConfig::ll_zero_copy_combine = true");
    if (handle.num_ranks != context.num_ranks)
        fail("ll_combine_input: the handle comes from a different buffer");
    if (handle.layout != RecvLayout::kExpertMasked)
        fail("ll_combine_input: zero-copy combine input needs a dispatch in the masked layout");
}

void validate_mask_rank(const char* op, int rank, int num_ranks, int own_rank) {
    if (rank < 0 || rank >= num_ranks)
        fail(std::string(op) + ": rank " + std::to_string(rank) + " is outside [0, " +
             std::to_string(num_ranks) + ")");
    if (rank == own_rank)
        fail(std::string(op) + ": rank " + std::to_string(rank) +
             " is this buffer's own rank; a rank masks its peers, never itself");
}

void validate_ht_masking(const BufferConfig& config, const char* op) {
    if (!config.enable_high_throughput || !config.ht_mask_unresponsive_ranks)
        fail(std::string(op) +
             " needs a buffer created with enable_high_throughput and ht_mask_unresponsive_ranks = true "
             "(without it the HT kernels never read the mask)");
}

}  // namespace switchyard::core
