// Planning before a Buffer exists, from the public planning API (include/switchyard/planning.hpp),
// which the Buffer itself sizes with: buffer_size_hint and buffer_size_breakdown (the memory a
// BufferConfig takes on each rank: engines plan memory first; DeepEP offers size hints),
// ht_output_shapes / ll_output_shapes (every output of an op and the combine's y, as
// {name: (dtype, shape, strides)}), and ht_load_kernels / ll_load_kernels from shapes alone.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "bind.hpp"
#include "switchyard/config.hpp"
#include "switchyard/planning.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {
namespace {

DType dtype_from_name(const std::string& name) {
    if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
    if (name == "fp8" || name == "fp8_e4m3" || name == "float8_e4m3fn") return DType::kFloat8E4M3;
    if (name == "int32") return DType::kInt32;
    if (name == "int64") return DType::kInt64;
    throw InvalidArgument("switchyard: unknown dtype name '" + name + "' (bf16, fp8_e4m3, int32 or int64)");
}

NetworkBackend backend_from_name(const std::string& name) {
    if (name == "emulated") return NetworkBackend::kEmulated;
    if (name == "gin") return NetworkBackend::kGin;
    throw InvalidArgument("switchyard: network_backend must be 'emulated' or 'gin', got '" + name + "'");
}

nb::object spec_tuple(const TensorSpec& spec) {
    if (!spec.defined()) return nb::none();
    nb::list shape, strides;
    for (int d = 0; d < spec.ndim; ++d) {
        shape.append(spec.shape[d]);
        strides.append(spec.strides[d]);
    }
    return nb::make_tuple(dtype_name(spec.dtype), nb::tuple(shape), nb::tuple(strides));
}

HtDispatchShape ht_shape(int num_tokens, int hidden, int topk, int num_experts, const std::string& x_dtype,
                         ScaleFormat x_scales, bool quantize_fp8, ScaleFormat quantize_format, bool has_weights,
                         RecvLayout layout, int expert_alignment, CountMode counts) {
    HtDispatchShape shape;
    shape.num_tokens = num_tokens, shape.hidden = hidden, shape.topk = topk, shape.num_experts = num_experts;
    shape.x_dtype = dtype_from_name(x_dtype);
    shape.x_scales = x_scales;
    shape.quantize_fp8 = quantize_fp8, shape.quantize_format = quantize_format;
    shape.has_weights = has_weights;
    shape.layout = layout, shape.expert_alignment = expert_alignment, shape.counts = counts;
    return shape;
}

LlDispatchShape ll_shape(int num_tokens, int hidden, int topk, int num_experts, const std::string& index_dtype,
                         bool use_fp8, ScaleFormat scale_format, RecvLayout layout, int expert_alignment) {
    LlDispatchShape shape;
    shape.num_tokens = num_tokens, shape.hidden = hidden, shape.topk = topk, shape.num_experts = num_experts;
    shape.index_dtype = dtype_from_name(index_dtype);
    shape.use_fp8 = use_fp8, shape.scale_format = scale_format;
    shape.layout = layout, shape.expert_alignment = expert_alignment;
    return shape;
}

}  // namespace

void bind_sizing(nb::module_& m) {
    using namespace nb::literals;

    m.def(
        "buffer_size_hint",
        [](const BufferConfig& config, int num_ranks, int num_nodes) {
            return buffer_sizes(config, num_ranks, num_nodes).symmetric;
        },
        "config"_a, "num_ranks"_a, "num_nodes"_a = 1,
        "Bytes of the symmetric buffer (control workspace + HT and LL regions) each rank allocates for `config` "
        "with `num_ranks` ranks: what Buffer.buffer_bytes reports once created. Outputs of expert-major layouts "
        "come from a separate per-buffer pool.");
    m.def(
        "buffer_size_breakdown",
        [](const BufferConfig& config, int num_ranks, int num_nodes) {
            const BufferSizes sizes = buffer_sizes(config, num_ranks, num_nodes);
            nb::dict out;
            out["workspace"] = sizes.workspace;
            out["ht_dispatch"] = sizes.ht_dispatch;
            out["ht_combine"] = sizes.ht_combine;
            out["ll"] = sizes.low_latency;
            out["ll_forward"] = sizes.ll_forward;
            out["ll_zero_copy"] = sizes.ll_zero_copy;
            out["total"] = sizes.symmetric;
            out["output_pool_reserve"] = sizes.output_pool_reserve;
            out["routing_scratch"] = sizes.routing_scratch;
            out["device_total"] = sizes.total;
            return out;
        },
        "config"_a, "num_ranks"_a, "num_nodes"_a = 1, "buffer_size_hint by region (bytes; regions are aligned, the total to 2 MiB), and beside the symmetric "
        "buffer the output pool reserved at creation and the routing scratch (device_total: all of it).");

    m.def(
        "ht_output_shapes",
        [](const BufferConfig& config, int num_ranks, int num_tokens, int hidden, int topk, int num_experts,
           const std::string& x_dtype, ScaleFormat x_scales, bool quantize_fp8, ScaleFormat quantize_format,
           bool has_weights, RecvLayout layout, int expert_alignment, CountMode counts,
           std::optional<int64_t> host_num_recv_rows) {
            const HtOutputShapes out = ht_output_shapes(
                config, num_ranks,
                ht_shape(num_tokens, hidden, topk, num_experts, x_dtype, x_scales, quantize_fp8, quantize_format,
                         has_weights, layout, expert_alignment, counts),
                host_num_recv_rows.value_or(-1));
            nb::dict d;
            d["num_recv_rows"] = out.num_recv_rows;
            d["exact"] = out.exact;
            d["recv_x"] = spec_tuple(out.recv_x);
            d["recv_scales"] = spec_tuple(out.recv_scales);
            d["recv_topk_idx"] = spec_tuple(out.recv_topk_idx);
            d["recv_topk_weights"] = spec_tuple(out.recv_topk_weights);
            d["num_recv_tokens_per_expert"] = spec_tuple(out.num_recv_tokens_per_expert);
            d["num_recv_rows_tensor"] = spec_tuple(out.num_recv_rows_tensor);
            d["combine_y"] = spec_tuple(out.combine_y);
            d["combine_row_weights"] = spec_tuple(out.combine_row_weights);
            d["combine_out"] = spec_tuple(out.combine_out);
            d["combined_topk_weights"] = spec_tuple(out.combined_topk_weights);
            return d;
        },
        "config"_a, "num_ranks"_a, nb::kw_only(), "num_tokens"_a, "hidden"_a, "topk"_a, "num_experts"_a,
        "x_dtype"_a = "bf16", "x_scales"_a = ScaleFormat::kNone, "quantize_fp8"_a = false,
        "quantize_format"_a = ScaleFormat::kFloat32, "has_weights"_a = false, "layout"_a = RecvLayout::kRankMajor,
        "expert_alignment"_a = 1, "counts"_a = CountMode::kHostSynced, "host_num_recv_rows"_a.none() = nb::none(),
        "Every tensor an HT dispatch of this shape returns and what its combine takes (y) and returns, as {name: "
        "(dtype, shape, strides) or None}, plus num_recv_rows: exact with host_num_recv_rows (a host-synced "
        "result's), else the worst case that device counts allocate.");
    m.def(
        "ll_output_shapes",
        [](const BufferConfig& config, int num_ranks, int num_tokens, int hidden, int topk, int num_experts,
           const std::string& index_dtype, bool use_fp8, ScaleFormat scale_format, RecvLayout layout,
           int expert_alignment) {
            const LlOutputShapes out =
                ll_output_shapes(config, num_ranks,
                                 ll_shape(num_tokens, hidden, topk, num_experts, index_dtype, use_fp8, scale_format,
                                          layout, expert_alignment));
            nb::dict d;
            d["num_recv_rows"] = out.num_recv_rows;
            d["recv_x"] = spec_tuple(out.recv_x);
            d["recv_scales"] = spec_tuple(out.recv_scales);
            d["recv_count"] = spec_tuple(out.recv_count);
            d["recv_expert_offsets"] = spec_tuple(out.recv_expert_offsets);
            d["combine_y"] = spec_tuple(out.combine_y);
            d["combine_out"] = spec_tuple(out.combine_out);
            return d;
        },
        "config"_a, "num_ranks"_a, nb::kw_only(), "num_tokens"_a, "hidden"_a, "topk"_a, "num_experts"_a,
        "index_dtype"_a = "int64", "use_fp8"_a = true, "scale_format"_a = ScaleFormat::kFloat32,
        "layout"_a = RecvLayout::kExpertMasked, "expert_alignment"_a = 1,
        "Every tensor an LL dispatch of this shape returns and what its combine takes (y) and returns, as {name: "
        "(dtype, shape, strides) or None}.");
    m.def(
        "ht_load_kernels",
        [](int device, int hidden, int topk, const std::string& x_dtype, ScaleFormat x_scales, bool quantize_fp8,
           ScaleFormat quantize_format, RecvLayout layout, int num_nodes, const std::string& network_backend) {
            HtDispatchShape shape = ht_shape(0, hidden, topk, 0, x_dtype, x_scales, quantize_fp8, quantize_format,
                                             false, layout, 1, CountMode::kHostSynced);
            shape.num_nodes = num_nodes;
            shape.network_backend = backend_from_name(network_backend);
            nb::gil_scoped_release release;
            ht_load_kernels(device, shape);
        },
        "device"_a, nb::kw_only(), "hidden"_a, "topk"_a, "x_dtype"_a = "bf16", "x_scales"_a = ScaleFormat::kNone,
        "quantize_fp8"_a = false, "quantize_format"_a = ScaleFormat::kFloat32, "layout"_a = RecvLayout::kRankMajor,
        "num_nodes"_a = 1, "network_backend"_a = "emulated",
        "Load (JIT-compiling on a miss) every HT kernel a dispatch of this shape and its combines can use, from "
        "shapes alone: once per process and device for every rank in it, before the first HT op (required when "
        "ranks share a GPU).");
    m.def(
        "ll_load_kernels",
        [](int device, int hidden, int topk, const std::string& index_dtype, bool use_fp8, ScaleFormat scale_format,
           RecvLayout layout, int num_nodes, const std::string& network_backend) {
            LlDispatchShape shape = ll_shape(0, hidden, topk, 0, index_dtype, use_fp8, scale_format, layout, 1);
            shape.num_nodes = num_nodes;
            shape.network_backend = backend_from_name(network_backend);
            nb::gil_scoped_release release;
            ll_load_kernels(device, shape);
        },
        "device"_a, nb::kw_only(), "hidden"_a, "topk"_a, "index_dtype"_a = "int64", "use_fp8"_a = true,
        "scale_format"_a = ScaleFormat::kFloat32, "layout"_a = RecvLayout::kExpertMasked, "num_nodes"_a = 1,
        "network_backend"_a = "emulated",
        "Load (JIT-compiling on a miss) every LL kernel a dispatch of this shape and its combines can use, from "
        "shapes alone: once per process and device, before the first LL op (required when ranks share a GPU). "
        "Across nodes: num_nodes and the network backend (EMULATED or GIN).");
}

}  // namespace switchyard::python
