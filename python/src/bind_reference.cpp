// switchyard.reference: the CPU reference implementation (include/switchyard/reference.hpp).
//
// The structs mirror the C++ ones. Their array fields read as NumPy arrays (copies, flat as in
// C++) and accept any host array of the right element size: NumPy, torch CPU tensors (bf16 bits
// may be given as uint16, int16 or bfloat16), lists.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <string>
#include <vector>

#include "bind.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::python {
namespace {

using namespace nb::literals;
namespace ref = switchyard::reference;
namespace dl = nb::dlpack;

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

template <typename T>
constexpr const char* numpy_dtype() {
    if constexpr (std::is_same_v<T, uint16_t>) return "uint16";
    if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
    if constexpr (std::is_same_v<T, uint32_t>) return "uint32";
    if constexpr (std::is_same_v<T, int32_t>) return "int32";
    if constexpr (std::is_same_v<T, int64_t>) return "int64";
    if constexpr (std::is_same_v<T, float>) return "float32";
    return "";
}

// Any host array (or list) whose elements are T-sized and of an allowed kind -> std::vector<T>.
template <typename T>
std::vector<T> to_vector(nb::handle value, const char* name, bool allow_float, bool allow_int) {
    if (value.is_none()) return {};
    HostArray array;
    if (!nb::try_cast(value, array, false)) {
        nb::object converted = nb::module_::import_("numpy").attr("ascontiguousarray")(value, numpy_dtype<T>());
        if (!nb::try_cast(converted, array, false))
            throw InvalidArgument(std::string("switchyard.reference: ") + name + " must be a host array");
    }
    const dl::dtype dtype = array.dtype();
    const bool is_float = dtype.code == uint8_t(dl::dtype_code::Float) || dtype.code == uint8_t(dl::dtype_code::Bfloat);
    const bool is_int = dtype.code == uint8_t(dl::dtype_code::Int) || dtype.code == uint8_t(dl::dtype_code::UInt) ||
                        dtype.code == uint8_t(dl::dtype_code::Bool);
    if (dtype.bits != sizeof(T) * 8 || dtype.lanes != 1 || (is_float && !allow_float) || (is_int && !allow_int) ||
        (!is_float && !is_int))
        throw InvalidArgument(std::string("switchyard.reference: ") + name + " must hold " + numpy_dtype<T>() +
                              " values (" + std::to_string(sizeof(T) * 8) + "-bit elements), got code " +
                              std::to_string(dtype.code) + " bits " + std::to_string(dtype.bits));
    std::vector<T> out(array.size());
    if (!out.empty()) std::memcpy(out.data(), array.data(), out.size() * sizeof(T));
    return out;
}

// A flat NumPy array holding a copy of `values`.
template <typename T>
nb::object to_numpy(const std::vector<T>& values) {
    auto* copy = new std::vector<T>(values);
    nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    return nb::cast(nb::ndarray<nb::numpy, T, nb::ndim<1>>(copy->data(), {copy->size()}, owner));
}

// Array properties on a bound struct: read a NumPy copy, assign any host array.
#define SY_ARRAY_FIELD(Struct, field, T, allow_float, allow_int)                                   \
    def_prop_rw(                                                                                   \
        #field, [](const Struct& self) { return to_numpy<T>(self.field); },                        \
        [](Struct& self, nb::handle value) { self.field = to_vector<T>(value, #field, allow_float, allow_int); })

template <typename T>
void set_from_kwargs(nb::handle object, const nb::kwargs& kwargs) {
    for (auto [key, value] : kwargs) {
        const std::string name = nb::str(key).c_str();
        if (!nb::hasattr(object, name.c_str()))
            throw InvalidArgument("switchyard.reference: " + std::string(nb::type_name(object.type()).c_str()) +
                                  " has no field '" + name + "'");
        nb::setattr(object, name.c_str(), value);
    }
}

// Struct(**fields): default-construct, then set each field through its property (on a temporary
// wrapped as a Python object, so the properties' own conversions and checks apply).
template <typename Class>
void add_kwargs_factory(Class& cls) {
    using T = typename Class::Type;
    cls.def(
        "__init__",
        [](T* self, nb::kwargs kwargs) {
            T fields{};
            {
                nb::object wrapper = nb::cast(&fields, nb::rv_policy::reference);
                set_from_kwargs<T>(wrapper, kwargs);
            }
            new (self) T(std::move(fields));
        },
        "kwargs"_a);
}

}  // namespace

void bind_reference(nb::module_& parent) {
    nb::module_ m = parent.def_submodule(
        "reference", "The CPU reference of Switchyard's semantics (DESIGN.md §2): every rank's inputs in, every "
                     "rank's outputs out, bit-exact with the GPU. bf16 and fp8 values are raw bits (uint16 / uint8).");

    // Numerics, vectorized over arrays.
    m.def(
        "bf16_to_float",
        [](nb::handle bits) {
            const auto in = to_vector<uint16_t>(bits, "bits", true, true);
            std::vector<float> out(in.size());
            for (size_t i = 0; i < in.size(); ++i) out[i] = ref::bf16_to_float(in[i]);
            return to_numpy(out);
        },
        "bits"_a, "bf16 bit patterns -> float32 (flat).");
    m.def(
        "float_to_bf16",
        [](nb::handle values) {
            const auto in = to_vector<float>(values, "values", true, false);
            std::vector<uint16_t> out(in.size());
            for (size_t i = 0; i < in.size(); ++i) out[i] = ref::float_to_bf16(in[i]);
            return to_numpy(out);
        },
        "values"_a, "float32 -> bf16 bit patterns, round to nearest even (flat).");
    m.def(
        "e4m3_to_float",
        [](nb::handle bits) {
            const auto in = to_vector<uint8_t>(bits, "bits", true, true);
            std::vector<float> out(in.size());
            for (size_t i = 0; i < in.size(); ++i) out[i] = ref::e4m3_to_float(in[i]);
            return to_numpy(out);
        },
        "bits"_a);
    m.def(
        "float_to_e4m3_satfinite",
        [](nb::handle values) {
            const auto in = to_vector<float>(values, "values", true, false);
            std::vector<uint8_t> out(in.size());
            for (size_t i = 0; i < in.size(); ++i) out[i] = ref::float_to_e4m3_satfinite(in[i]);
            return to_numpy(out);
        },
        "values"_a);

    // The API's enums (bound by bind_config): one Python class each, as in C++ (formats.hpp).
    m.attr("ScaleFormat") = parent.attr("ScaleFormat");
    m.attr("RecvLayout") = parent.attr("RecvLayout");
    nb::enum_<ref::Payload>(m, "Payload").value("BF16", ref::Payload::kBF16).value("FP8", ref::Payload::kFP8);

    m.def("num_scale_words", &ref::num_scale_words, "hidden"_a, "format"_a);
    m.def(
        "quantize_token",
        [](nb::handle x_bf16, ref::ScaleFormat format) {
            const auto x = to_vector<uint16_t>(x_bf16, "x_bf16", true, true);
            const int hidden = int(x.size());
            std::vector<uint8_t> q(x.size());
            std::vector<uint32_t> scales(size_t(ref::num_scale_words(hidden, format)));
            ref::quantize_token(x.data(), hidden, format, q.data(), scales.data());
            return nb::make_tuple(to_numpy(q), to_numpy(scales));
        },
        "x_bf16"_a, "format"_a, "Quantize one token (DESIGN.md §2): returns (e4m3 bytes, 32-bit scale words).");

    nb::class_<ref::Problem> problem(m, "Problem");
    add_kwargs_factory(problem);
    problem.def_rw("num_ranks", &ref::Problem::num_ranks)
        .def_rw("num_experts", &ref::Problem::num_experts)
        .def_rw("hidden", &ref::Problem::hidden)
        .def_rw("topk", &ref::Problem::topk)
        .def_rw("max_tokens_per_rank", &ref::Problem::max_tokens_per_rank)
        .def("local_experts", &ref::Problem::local_experts);
    m.def("validate_problem", &ref::validate_problem, "problem"_a);
    m.def(
        "validate_routing",
        [](const ref::Problem& problem, int rank, int num_tokens, nb::handle topk_idx) {
            ref::validate_routing(problem, rank, num_tokens, to_vector<int64_t>(topk_idx, "topk_idx", false, true));
        },
        "problem"_a, "rank"_a, "num_tokens"_a, "topk_idx"_a);

    nb::class_<ref::DispatchInput> input(m, "DispatchInput");
    add_kwargs_factory(input);
    input.def_rw("num_tokens", &ref::DispatchInput::num_tokens)
        .def_rw("payload", &ref::DispatchInput::payload)
        .SY_ARRAY_FIELD(ref::DispatchInput, x_bf16, uint16_t, true, true)
        .SY_ARRAY_FIELD(ref::DispatchInput, x_fp8, uint8_t, true, true)
        .def_rw("scale_format", &ref::DispatchInput::scale_format)
        .SY_ARRAY_FIELD(ref::DispatchInput, scales, uint32_t, true, true)
        .SY_ARRAY_FIELD(ref::DispatchInput, topk_idx, int64_t, false, true)
        .SY_ARRAY_FIELD(ref::DispatchInput, topk_weights, float, true, false);

    nb::class_<ref::DispatchOptions> options(m, "DispatchOptions");
    add_kwargs_factory(options);
    options.def_rw("layout", &ref::DispatchOptions::layout)
        .def_rw("expert_alignment", &ref::DispatchOptions::expert_alignment)
        .def_rw("zero_padding", &ref::DispatchOptions::zero_padding)
        .def_rw("quantize", &ref::DispatchOptions::quantize)
        .def_rw("quantize_format", &ref::DispatchOptions::quantize_format)
        .def_rw("absent_ranks", &ref::DispatchOptions::absent_ranks);

    nb::class_<ref::DispatchOutput>(m, "DispatchOutput")
        .def_ro("layout", &ref::DispatchOutput::layout)
        .def_ro("num_rows", &ref::DispatchOutput::num_rows)
        .def_ro("payload", &ref::DispatchOutput::payload)
        .def_ro("scale_format", &ref::DispatchOutput::scale_format)
        .def_prop_ro("x_bf16", [](const ref::DispatchOutput& self) { return to_numpy(self.x_bf16); })
        .def_prop_ro("x_fp8", [](const ref::DispatchOutput& self) { return to_numpy(self.x_fp8); })
        .def_prop_ro("scales", [](const ref::DispatchOutput& self) { return to_numpy(self.scales); })
        .def_prop_ro("topk_idx", [](const ref::DispatchOutput& self) { return to_numpy(self.topk_idx); })
        .def_prop_ro("topk_weights", [](const ref::DispatchOutput& self) { return to_numpy(self.topk_weights); })
        .def_prop_ro("sources",
                     [](const ref::DispatchOutput& self) {
                         // [num_rows, 3]: (rank, token, k) of each row, -1 for padding.
                         std::vector<int32_t> flat;
                         flat.reserve(self.sources.size() * 3);
                         for (const ref::RowSource& source : self.sources) {
                             flat.push_back(source.rank);
                             flat.push_back(source.token);
                             flat.push_back(source.k);
                         }
                         return to_numpy(flat).attr("reshape")(-1, 3);
                     })
        .def_prop_ro("num_tokens_per_expert",
                     [](const ref::DispatchOutput& self) { return to_numpy(self.num_tokens_per_expert); })
        .def_prop_ro("num_rows_per_source",
                     [](const ref::DispatchOutput& self) { return to_numpy(self.num_rows_per_source); })
        .def_prop_ro("expert_offsets", [](const ref::DispatchOutput& self) { return to_numpy(self.expert_offsets); });

    nb::class_<ref::Routing>(m, "Routing", "The routing of one dispatch for all ranks (what a handle holds).")
        .def_ro("problem", &ref::Routing::problem)
        .def_ro("options", &ref::Routing::options)
        .def_ro("num_tokens", &ref::Routing::num_tokens);

    nb::class_<ref::GlobalDispatch>(m, "GlobalDispatch", "Every rank's dispatch output and the routing.")
        .def_ro("outputs", &ref::GlobalDispatch::outputs)
        .def_ro("routing", &ref::GlobalDispatch::routing);

    m.def(
        "dispatch",
        [](const ref::Problem& problem, const std::vector<ref::DispatchInput>& inputs,
           const ref::DispatchOptions& options) {
            nb::gil_scoped_release release;
            return ref::dispatch(problem, inputs, options);
        },
        "problem"_a, "inputs"_a, "options"_a = ref::DispatchOptions{},
        "Dispatch every rank's input (one DispatchInput per rank).");
    m.def(
        "cached_dispatch",
        [](const ref::Routing& routing, const std::vector<ref::DispatchInput>& inputs) {
            nb::gil_scoped_release release;
            return ref::cached_dispatch(routing, inputs);
        },
        "routing"_a, "inputs"_a, "New data with the routing of an earlier dispatch (topk_idx ignored).");

    nb::class_<ref::CombineInput> combine_input(m, "CombineInput");
    add_kwargs_factory(combine_input);
    combine_input.SY_ARRAY_FIELD(ref::CombineInput, y, uint16_t, true, true)
        .SY_ARRAY_FIELD(ref::CombineInput, row_weights, float, true, false);

    nb::class_<ref::CombineHomeInput> home_input(m, "CombineHomeInput");
    add_kwargs_factory(home_input);
    home_input.SY_ARRAY_FIELD(ref::CombineHomeInput, topk_weights, float, true, false)
        .SY_ARRAY_FIELD(ref::CombineHomeInput, bias0, uint16_t, true, true)
        .SY_ARRAY_FIELD(ref::CombineHomeInput, bias1, uint16_t, true, true);

    nb::class_<ref::CombineOptions> combine_options(m, "CombineOptions");
    add_kwargs_factory(combine_options);
    combine_options.def_rw("weighted", &ref::CombineOptions::weighted)
        .def_rw("hierarchical", &ref::CombineOptions::hierarchical)
        .def_rw("absent_ranks", &ref::CombineOptions::absent_ranks);

    nb::class_<ref::CombineOutput>(m, "CombineOutput")
        .def_prop_ro("out", [](const ref::CombineOutput& self) { return to_numpy(self.out); })
        .def_prop_ro("combined_topk_weights",
                     [](const ref::CombineOutput& self) { return to_numpy(self.combined_topk_weights); });

    m.def(
        "combine",
        [](const ref::Routing& routing, const std::vector<ref::CombineInput>& inputs,
           nb::handle home_inputs, const ref::CombineOptions& options) {
            std::vector<ref::CombineHomeInput> homes =
                home_inputs.is_none() ? std::vector<ref::CombineHomeInput>(routing.problem.num_ranks)
                                      : nb::cast<std::vector<ref::CombineHomeInput>>(home_inputs);
            nb::gil_scoped_release release;
            return ref::combine(routing, inputs, homes, options);
        },
        "routing"_a, "inputs"_a, "home_inputs"_a.none() = nb::none(), "options"_a = ref::CombineOptions{},
        "Combine back to every home rank (one CombineInput per receiving rank; home_inputs: one per home rank "
        "or None).");
}

}  // namespace switchyard::python
