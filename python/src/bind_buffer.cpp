// switchyard.Buffer and its results: every op of include/switchyard/buffer.hpp.
//
// Each op converts its tensors at the edge (bridge.hpp), resolves the caller's stream and the
// `after` event, releases the GIL around the C++ call (a host-synced dispatch waits for its peers,
// which may be threads of this process), and returns a result whose tensors are converted to the
// caller's framework on first access.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bind.hpp"
#include "bridge.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {
namespace {

using namespace nb::literals;

// One rank's Buffer. Asynchronous ops' inputs are kept in `pending` as well as on their Event, so
// they stay alive until the op is done even if the caller drops the Event.
struct PyBuffer {
    std::unique_ptr<Buffer> buffer;
    Framework framework = Framework::kNone;  // for stream=None where no tensor says which
    std::vector<std::pair<OpEvent, std::vector<nb::object>>> pending;

    Buffer& get() {
        if (!buffer) throw InvalidArgument("switchyard: this Buffer was destroyed");
        return *buffer;
    }
    void prune() {
        if (pending.empty()) return;
        std::erase_if(pending, [](const auto& entry) { return entry.first.done(); });
    }
    // Collective (the C++ destructor waits for the peers at a barrier): every rank calls it.
    void destroy() {
        if (buffer) {
            nb::gil_scoped_release release;
            buffer.reset();
        }
        pending.clear();
    }
    ~PyBuffer() { destroy(); }
};

struct PyDispatchHandle {
    std::shared_ptr<const DispatchHandle> handle;
    Framework framework = Framework::kNone;
    RecvLayout layout = RecvLayout::kRankMajor;
};

struct PyLowLatencyHandle {
    std::shared_ptr<const LowLatencyHandle> handle;
    Framework framework = Framework::kNone;
    int device = 0;
};

// Tensors of a result, converted on first access and cached.
template <size_t N>
struct LazyTensors {
    Framework framework = Framework::kNone;
    std::array<nb::object, N> cache;
    nb::object get(size_t index, const DeviceTensor& tensor) {
        if (!cache[index].is_valid()) cache[index] = export_tensor(tensor, framework);
        return cache[index];
    }
};

struct PyDispatchResult {
    DispatchResult result;
    LazyTensors<6> tensors;
    nb::object event;
    nb::object handle;
};

struct PyCombineResult {
    CombineResult result;
    LazyTensors<2> tensors;
    nb::object event;
};

nb::object hook_of(std::function<OpEvent()> receive, Framework framework, int device) {
    if (!receive) return nb::none();
    return nb::cpp_function(
        [receive = std::move(receive), framework, device]() {
            Event event;
            {
                nb::gil_scoped_release release;
                event.event = receive();
            }
            event.framework = framework;
            event.device = device;
            return event;
        },
        "Run the receive half (hook mode) on the stream the op was issued on; returns its Event.");
}

struct PyLowLatencyDispatchResult {
    LowLatencyDispatchResult result;
    LazyTensors<4> tensors;
    nb::object event;
    nb::object handle;
    int device = 0;
};

struct PyLowLatencyCombineResult {
    LowLatencyCombineResult result;
    LazyTensors<1> tensors;
    nb::object event;
    int device = 0;
};

RecvLayout parse_layout(nb::handle value) {
    if (nb::isinstance<RecvLayout>(value)) return nb::cast<RecvLayout>(value);
    const std::string name = nb::cast<std::string>(nb::str(value));
    if (name == "rank_major") return RecvLayout::kRankMajor;
    if (name == "expert_contiguous" || name == "contiguous") return RecvLayout::kExpertContiguous;
    if (name == "expert_masked" || name == "masked") return RecvLayout::kExpertMasked;
    throw InvalidArgument(
        "switchyard: layout must be a RecvLayout or one of 'rank_major', 'expert_contiguous', "
        "'expert_masked', got '" +
        name + "'");
}

ScaleFormat parse_scale_format(nb::handle value) {
    if (nb::isinstance<ScaleFormat>(value)) return nb::cast<ScaleFormat>(value);
    const std::string name = nb::cast<std::string>(nb::str(value));
    if (name == "float32" || name == "fp32") return ScaleFormat::kFloat32;
    if (name == "ue8m0") return ScaleFormat::kUE8M0;
    if (name == "none") return ScaleFormat::kNone;
    throw InvalidArgument(
        "switchyard: scale format must be a ScaleFormat or one of 'float32', 'ue8m0', got '" + name + "'");
}

CountMode parse_counts(nb::handle value) {
    if (nb::isinstance<CountMode>(value)) return nb::cast<CountMode>(value);
    const std::string name = nb::cast<std::string>(nb::str(value));
    if (name == "host_synced" || name == "host") return CountMode::kHostSynced;
    if (name == "device") return CountMode::kDevice;
    throw InvalidArgument("switchyard: counts must be a CountMode or 'host_synced' / 'device', got '" + name +
                          "'");
}

// The framework of an op's outputs: its first tensor's, else the buffer's.
Framework framework_of(const PyBuffer& self, nb::handle tensor) {
    const Framework framework = detect_framework(tensor);
    return framework == Framework::kNone ? self.framework : framework;
}

// The op's Event; an asynchronous op's inputs go to it and to the buffer's pending list.
nb::object make_event(PyBuffer& self, const OpEvent& done, bool async_op, Inputs& inputs,
                      Framework framework) {
    Event event;
    event.event = done;
    event.framework = framework;
    event.device = self.buffer->device();
    if (async_op) {
        event.keep_alive = inputs.release();
        self.pending.emplace_back(done, event.keep_alive);
    }
    return nb::cast(std::move(event));
}

OpOrder make_order(nb::handle after, bool async_op) {
    OpOrder order;
    order.after = resolve_event(after);
    order.async = async_op;
    return order;
}

PyDispatchResult* dispatch_common(PyBuffer& self, const PyDispatchHandle* cached, nb::handle x,
                                  nb::handle topk_idx, int num_experts, nb::handle x_scales,
                                  nb::handle topk_weights, nb::handle layout, int expert_alignment,
                                  bool zero_padding, bool quantize_fp8, nb::handle quantize_format,
                                  nb::handle counts, int num_sms, nb::handle after, bool async_op,
                                  nb::handle stream) {
    Buffer& buffer = self.get();
    const Framework framework = framework_of(self, x);
    Inputs inputs;
    DispatchArgs args;
    args.x = inputs.add(x, "x");
    args.x_scales = inputs.add(x_scales, "x_scales");
    args.topk_idx = inputs.add(topk_idx, "topk_idx");
    args.topk_weights = inputs.add(topk_weights, "topk_weights");
    args.num_experts = num_experts;
    args.layout = parse_layout(layout);
    args.expert_alignment = expert_alignment;
    args.zero_padding = zero_padding;
    args.quantize_fp8 = quantize_fp8;
    args.quantize_format = parse_scale_format(quantize_format);
    args.counts = parse_counts(counts);
    args.num_sms = num_sms;
    args.order = make_order(after, async_op);
    const cudaStream_t caller = resolve_stream(stream, framework, buffer.device());
    self.prune();
    auto result = std::make_unique<PyDispatchResult>();
    {
        nb::gil_scoped_release release;
        result->result =
            cached ? buffer.cached_dispatch(args, cached->handle, caller) : buffer.dispatch(args, caller);
    }
    result->tensors.framework = framework;
    result->event = make_event(self, result->result.done, async_op, inputs, framework);
    PyDispatchHandle handle{result->result.handle, framework, cached ? cached->layout : args.layout};
    result->handle = nb::cast(std::move(handle));
    return result.release();
}

LowLatencyDispatchArgs ll_dispatch_args(Inputs& inputs, nb::handle x, nb::handle topk_idx, int num_experts,
                                        nb::handle topk_weights, bool use_fp8, nb::handle scale_format,
                                        nb::handle cumulative_local_expert_recv_stats,
                                        nb::handle wait_time_stats, bool return_recv_hook, nb::handle layout,
                                        int expert_alignment, bool zero_padding) {
    LowLatencyDispatchArgs args;
    args.x = inputs.add(x, "x");
    args.topk_idx = inputs.add(topk_idx, "topk_idx");
    args.topk_weights = inputs.add(topk_weights, "topk_weights");
    args.num_experts = num_experts;
    args.use_fp8 = use_fp8;
    args.scale_format = use_fp8 ? parse_scale_format(scale_format) : ScaleFormat::kFloat32;
    args.cumulative_local_expert_recv_stats =
        inputs.add(cumulative_local_expert_recv_stats, "cumulative_local_expert_recv_stats");
    args.wait_time_stats = inputs.add(wait_time_stats, "wait_time_stats");
    args.return_recv_hook = return_recv_hook;
    args.layout = parse_layout(layout);
    args.expert_alignment = expert_alignment;
    args.zero_padding = zero_padding;
    return args;
}

}  // namespace

void bind_buffer(nb::module_& m) {
    nb::class_<PyDispatchHandle>(
        m, "DispatchHandle",
        "The routing of one high-throughput dispatch: pass it to combine and cached_dispatch.")
        .def_prop_ro("layout", [](const PyDispatchHandle& self) { return self.layout; })
        .def_prop_ro("framework",
                     [](const PyDispatchHandle& self) { return framework_name(self.framework); });

    nb::class_<PyLowLatencyHandle>(m, "LowLatencyHandle",
                                   "The routing of one low-latency dispatch: pass it to ll_combine.")
        .def_prop_ro("framework",
                     [](const PyLowLatencyHandle& self) { return framework_name(self.framework); });

    nb::class_<PyDispatchResult>(
        m, "DispatchResult",
        "Outputs of dispatch / cached_dispatch (DESIGN.md §2). Rank-major tensors are views "
        "into the buffer's receive region, valid until the next dispatch on the buffer "
        "(clone to keep); expert-major ones are owned.")
        .def_prop_ro("recv_x", [](PyDispatchResult& r) { return r.tensors.get(0, r.result.recv_x); })
        .def_prop_ro("recv_scales",
                     [](PyDispatchResult& r) { return r.tensors.get(1, r.result.recv_scales); })
        .def_prop_ro("recv_topk_idx",
                     [](PyDispatchResult& r) { return r.tensors.get(2, r.result.recv_topk_idx); })
        .def_prop_ro("recv_topk_weights",
                     [](PyDispatchResult& r) { return r.tensors.get(3, r.result.recv_topk_weights); })
        .def_prop_ro(
            "num_recv_tokens_per_expert",
            [](PyDispatchResult& r) { return r.tensors.get(4, r.result.num_recv_tokens_per_expert); })
        .def_prop_ro("num_recv_rows",
                     [](PyDispatchResult& r) { return r.tensors.get(5, r.result.num_recv_rows); })
        .def_prop_ro("host_num_recv_rows",
                     [](PyDispatchResult& r) -> nb::object {
                         if (r.result.host_num_recv_rows < 0) return nb::none();
                         return nb::int_(r.result.host_num_recv_rows);
                     })
        .def_prop_ro("host_num_recv_tokens_per_expert",
                     [](PyDispatchResult& r) -> nb::object {
                         if (r.result.host_num_recv_rows < 0) return nb::none();
                         return nb::cast(r.result.host_num_recv_tokens_per_expert);
                     })
        .def_prop_ro("handle", [](PyDispatchResult& r) { return r.handle; })
        .def_prop_ro("event", [](PyDispatchResult& r) { return r.event; });

    nb::class_<PyCombineResult>(m, "CombineResult", "Outputs of combine.")
        .def_prop_ro("out", [](PyCombineResult& r) { return r.tensors.get(0, r.result.out); })
        .def_prop_ro("combined_topk_weights",
                     [](PyCombineResult& r) { return r.tensors.get(1, r.result.combined_topk_weights); })
        .def_prop_ro("event", [](PyCombineResult& r) { return r.event; });

    nb::class_<PyLowLatencyDispatchResult>(m, "LowLatencyDispatchResult", "Outputs of ll_dispatch.")
        .def_prop_ro("recv_x",
                     [](PyLowLatencyDispatchResult& r) { return r.tensors.get(0, r.result.recv_x); })
        .def_prop_ro("recv_scales",
                     [](PyLowLatencyDispatchResult& r) { return r.tensors.get(1, r.result.recv_scales); })
        .def_prop_ro("recv_count",
                     [](PyLowLatencyDispatchResult& r) { return r.tensors.get(2, r.result.recv_count); })
        .def_prop_ro(
            "recv_expert_offsets",
            [](PyLowLatencyDispatchResult& r) { return r.tensors.get(3, r.result.recv_expert_offsets); })
        .def_prop_ro("handle", [](PyLowLatencyDispatchResult& r) { return r.handle; })
        .def_prop_ro("event", [](PyLowLatencyDispatchResult& r) { return r.event; })
        .def_prop_ro("hook", [](PyLowLatencyDispatchResult& r) {
            return hook_of(r.result.receive, r.tensors.framework, r.device);
        });

    nb::class_<PyLowLatencyCombineResult>(m, "LowLatencyCombineResult", "Outputs of ll_combine.")
        .def_prop_ro("out", [](PyLowLatencyCombineResult& r) { return r.tensors.get(0, r.result.out); })
        .def_prop_ro("event", [](PyLowLatencyCombineResult& r) { return r.event; })
        .def_prop_ro("hook", [](PyLowLatencyCombineResult& r) {
            return hook_of(r.result.receive, r.tensors.framework, r.device);
        });

    nb::class_<PyBuffer>(
        m, "Buffer", nb::is_weak_referenceable(),
        "One rank's communication buffer (include/switchyard/buffer.hpp). Creating and destroying "
        "it is collective. switchyard.Buffer (the Python class) builds the communicator from a "
        "torch.distributed group; this native constructor takes a Communicator.")
        .def(
            "__init__",
            [](PyBuffer* self, std::shared_ptr<Communicator> communicator, int device,
               const BufferConfig& config) {
                new (self) PyBuffer();
                nb::gil_scoped_release release;
                self->buffer = std::make_unique<Buffer>(std::move(communicator), device, config);
            },
            "communicator"_a, "device"_a, "config"_a)
        .def_rw(
            "framework", &PyBuffer::framework,
            "Whose stream stream=None means where an op has no tensor to tell (barrier), and whose tensors "
            "outputs are when the first tensor argument has no framework.")
        .def_prop_ro("rank", [](PyBuffer& self) { return self.get().rank(); })
        .def_prop_ro("num_ranks", [](PyBuffer& self) { return self.get().num_ranks(); })
        .def_prop_ro("device", [](PyBuffer& self) { return self.get().device(); })
        .def_prop_ro("config", [](PyBuffer& self) { return self.get().config(); })
        .def_prop_ro("topology", [](PyBuffer& self) { return self.get().topology(); })
        .def_prop_ro(
            "buffer_bytes", [](PyBuffer& self) { return self.get().buffer_bytes(); },
            "Bytes of this rank's symmetric allocation.")
        .def_prop_ro(
            "comm_stream",
            [](PyBuffer& self) { return reinterpret_cast<intptr_t>(self.get().comm_stream()); },
            "The communication stream (cudaStream_t as an int).")
        .def_prop_ro("sm_budget", [](PyBuffer& self) { return self.get().sm_budget(); })
        .def_prop_ro("destroyed", [](const PyBuffer& self) { return !self.buffer; })
        .def(
            "barrier",
            [](PyBuffer& self, nb::handle stream) {
                Buffer& buffer = self.get();
                const cudaStream_t caller = resolve_stream(stream, self.framework, buffer.device());
                nb::gil_scoped_release release;
                buffer.barrier(caller);
            },
            "stream"_a.none() = nb::none(),
            "Cross-rank barrier on the GPU: `stream` continues once every rank arrived.")
        .def(
            "get_dispatch_layout",
            [](PyBuffer& self, nb::handle topk_idx, int num_experts, nb::handle num_tokens_per_rank,
               nb::handle num_tokens_per_expert, nb::handle token_rank_slot, nb::handle token_in_rank,
               nb::handle token_expert_pos, nb::handle stream) {
                Buffer& buffer = self.get();
                Inputs inputs;
                const TensorView idx = inputs.add(topk_idx, "topk_idx");
                DispatchLayoutViews out;
                out.num_tokens_per_rank = inputs.add(num_tokens_per_rank, "num_tokens_per_rank");
                out.num_tokens_per_expert = inputs.add(num_tokens_per_expert, "num_tokens_per_expert");
                out.token_rank_slot = inputs.add(token_rank_slot, "token_rank_slot");
                out.token_in_rank = inputs.add(token_in_rank, "token_in_rank");
                out.token_expert_pos = inputs.add(token_expert_pos, "token_expert_pos");
                const cudaStream_t caller =
                    resolve_stream(stream, framework_of(self, topk_idx), buffer.device());
                nb::gil_scoped_release release;
                buffer.get_dispatch_layout(idx, num_experts, out, caller);
            },
            "topk_idx"_a, "num_experts"_a, nb::kw_only(), "num_tokens_per_rank"_a, "num_tokens_per_expert"_a,
            "token_rank_slot"_a, "token_in_rank"_a.none() = nb::none(),
            "token_expert_pos"_a.none() = nb::none(), "stream"_a.none() = nb::none(),
            "Dispatch layout of topk_idx into caller-allocated device tensors (int32 [R], int32 [E], int32 "
            "[T, R], "
            "optional bool/uint8 [T, R], optional int32 [T, K]). Synchronous with the caller's stream.")
        .def(
            "dispatch",
            [](PyBuffer& self, nb::handle x, nb::handle topk_idx, int num_experts, nb::handle x_scales,
               nb::handle topk_weights, nb::handle layout, int expert_alignment, bool zero_padding,
               bool quantize_fp8, nb::handle quantize_format, nb::handle counts, int num_sms,
               nb::handle after, bool async_op, nb::handle stream) {
                return dispatch_common(self, nullptr, x, topk_idx, num_experts, x_scales, topk_weights,
                                       layout, expert_alignment, zero_padding, quantize_fp8, quantize_format,
                                       counts, num_sms, after, async_op, stream);
            },
            nb::rv_policy::take_ownership, "x"_a, "topk_idx"_a, "num_experts"_a, nb::kw_only(),
            "x_scales"_a.none() = nb::none(), "topk_weights"_a.none() = nb::none(),
            "layout"_a = RecvLayout::kRankMajor, "expert_alignment"_a = 1, "zero_padding"_a = false,
            "quantize_fp8"_a = false, "quantize_format"_a = ScaleFormat::kFloat32,
            "counts"_a = CountMode::kHostSynced, "num_sms"_a = 0, "after"_a.none() = nb::none(),
            "async_op"_a = false, "stream"_a.none() = nb::none(),
            "High-throughput dispatch of x ([T, H] bf16, or fp8 with x_scales) to the ranks owning its top-k "
            "experts.")
        .def(
            "cached_dispatch",
            [](PyBuffer& self, const PyDispatchHandle& handle, nb::handle x, nb::handle x_scales,
               nb::handle topk_weights, bool quantize_fp8, nb::handle quantize_format, int num_sms,
               nb::handle after, bool async_op, nb::handle stream) {
                return dispatch_common(self, &handle, x, nb::none(), 0, x_scales, topk_weights,
                                       nb::cast(handle.layout), 1, false, quantize_fp8, quantize_format,
                                       nb::cast(CountMode::kHostSynced), num_sms, after, async_op, stream);
            },
            nb::rv_policy::take_ownership, "handle"_a, "x"_a, nb::kw_only(), "x_scales"_a.none() = nb::none(),
            "topk_weights"_a.none() = nb::none(), "quantize_fp8"_a = false,
            "quantize_format"_a = ScaleFormat::kFloat32, "num_sms"_a = 0, "after"_a.none() = nb::none(),
            "async_op"_a = false, "stream"_a.none() = nb::none(),
            "Dispatch new data with the routing of `handle` (byte-identical layouts; the backward of "
            "combine).")
        .def(
            "combine",
            [](PyBuffer& self, const PyDispatchHandle& handle, nb::handle y, nb::handle row_weights,
               nb::handle topk_weights, nb::handle bias0, nb::handle bias1, bool weighted, bool hierarchical,
               nb::handle out, int num_sms, nb::handle after, bool async_op, nb::handle stream) {
                Buffer& buffer = self.get();
                const Framework framework = framework_of(self, y);
                Inputs inputs;
                CombineArgs args;
                args.y = inputs.add(y, "y");
                args.row_weights = inputs.add(row_weights, "row_weights");
                args.topk_weights = inputs.add(topk_weights, "topk_weights");
                args.bias0 = inputs.add(bias0, "bias0");
                args.bias1 = inputs.add(bias1, "bias1");
                args.weighted = weighted;
                args.hierarchical = hierarchical;
                args.out = inputs.add(out, "out");
                args.num_sms = num_sms;
                args.order = make_order(after, async_op);
                const cudaStream_t caller = resolve_stream(stream, framework, buffer.device());
                self.prune();
                auto result = std::make_unique<PyCombineResult>();
                {
                    nb::gil_scoped_release release;
                    result->result = buffer.combine(args, handle.handle, caller);
                }
                result->tensors.framework = framework;
                // The caller's `out` comes back as the very object passed in.
                if (!out.is_none()) result->tensors.cache[0] = nb::borrow(out);
                result->event = make_event(self, result->result.done, async_op, inputs, framework);
                return result.release();
            },
            nb::rv_policy::take_ownership, "handle"_a, "y"_a, nb::kw_only(),
            "row_weights"_a.none() = nb::none(), "topk_weights"_a.none() = nb::none(),
            "bias0"_a.none() = nb::none(), "bias1"_a.none() = nb::none(), "weighted"_a = false,
            "hierarchical"_a = false, "out"_a.none() = nb::none(), "num_sms"_a = 0,
            "after"_a.none() = nb::none(), "async_op"_a = false, "stream"_a.none() = nb::none(),
            "Combine rows laid out as `handle`'s dispatch produced them back to their home ranks (also the "
            "backward of dispatch).")
        .def(
            "ll_dispatch",
            [](PyBuffer& self, nb::handle x, nb::handle topk_idx, int num_experts, nb::handle topk_weights,
               bool use_fp8, nb::handle scale_format, nb::handle cumulative_local_expert_recv_stats,
               nb::handle wait_time_stats, bool return_recv_hook, nb::handle layout, int expert_alignment,
               bool zero_padding, nb::handle after, bool async_op, nb::handle stream) {
                Buffer& buffer = self.get();
                const Framework framework = framework_of(self, x);
                Inputs inputs;
                LowLatencyDispatchArgs args =
                    ll_dispatch_args(inputs, x, topk_idx, num_experts, topk_weights, use_fp8, scale_format,
                                     cumulative_local_expert_recv_stats, wait_time_stats, return_recv_hook,
                                     layout, expert_alignment, zero_padding);
                args.order = make_order(after, async_op);
                const cudaStream_t caller = resolve_stream(stream, framework, buffer.device());
                self.prune();
                auto result = std::make_unique<PyLowLatencyDispatchResult>();
                {
                    nb::gil_scoped_release release;
                    result->result = buffer.ll_dispatch(args, caller);
                }
                result->device = buffer.device();
                result->tensors.framework = framework;
                result->event = make_event(self, result->result.done, async_op, inputs, framework);
                result->handle =
                    nb::cast(PyLowLatencyHandle{result->result.handle, framework, buffer.device()});
                return result.release();
            },
            nb::rv_policy::take_ownership, "x"_a, "topk_idx"_a, "num_experts"_a, nb::kw_only(),
            "topk_weights"_a.none() = nb::none(), "use_fp8"_a = true,
            "scale_format"_a = ScaleFormat::kFloat32,
            "cumulative_local_expert_recv_stats"_a.none() = nb::none(),
            "wait_time_stats"_a.none() = nb::none(), "return_recv_hook"_a = false,
            "layout"_a = RecvLayout::kExpertMasked, "expert_alignment"_a = 1, "zero_padding"_a = false,
            "after"_a.none() = nb::none(), "async_op"_a = false, "stream"_a.none() = nb::none(),
            "Low-latency dispatch (one kernel, no host round-trip, CUDA-graph capturable).")
        .def(
            "ll_combine",
            [](PyBuffer& self, const PyLowLatencyHandle& handle, nb::handle y, nb::handle topk_idx,
               nb::handle topk_weights, bool hierarchical, nb::handle out, bool zero_copy,
               bool return_recv_hook, nb::handle wait_time_stats, nb::handle after, bool async_op,
               nb::handle stream) {
                Buffer& buffer = self.get();
                const Framework framework = framework_of(self, topk_idx);
                Inputs inputs;
                LowLatencyCombineArgs args;
                args.y = inputs.add(y, "y");
                args.topk_idx = inputs.add(topk_idx, "topk_idx");
                args.topk_weights = inputs.add(topk_weights, "topk_weights");
                args.hierarchical = hierarchical;
                args.out = inputs.add(out, "out");
                args.zero_copy = zero_copy;
                args.return_recv_hook = return_recv_hook;
                args.wait_time_stats = inputs.add(wait_time_stats, "wait_time_stats");
                args.order = make_order(after, async_op);
                const cudaStream_t caller = resolve_stream(stream, framework, buffer.device());
                self.prune();
                auto result = std::make_unique<PyLowLatencyCombineResult>();
                {
                    nb::gil_scoped_release release;
                    result->result = buffer.ll_combine(args, handle.handle, caller);
                }
                result->device = buffer.device();
                result->tensors.framework = framework;
                if (!out.is_none()) result->tensors.cache[0] = nb::borrow(out);
                result->event = make_event(self, result->result.done, async_op, inputs, framework);
                return result.release();
            },
            nb::rv_policy::take_ownership, "handle"_a, "y"_a, "topk_idx"_a,
            "topk_weights"_a.none() = nb::none(), nb::kw_only(), "hierarchical"_a = false,
            "out"_a.none() = nb::none(), "zero_copy"_a = false, "return_recv_hook"_a = false,
            "wait_time_stats"_a.none() = nb::none(), "after"_a.none() = nb::none(), "async_op"_a = false,
            "stream"_a.none() = nb::none(),
            "Low-latency combine: out[t] = sum_k w[t][k] * y(t, k) (flat) or the hierarchical reduction.")
        .def(
            "ll_load_kernels",
            [](PyBuffer& self, nb::handle x, nb::handle topk_idx, int num_experts, nb::handle topk_weights,
               bool use_fp8, nb::handle scale_format, bool return_recv_hook, nb::handle layout,
               int expert_alignment, bool zero_padding) {
                Buffer& buffer = self.get();
                Inputs inputs;
                const LowLatencyDispatchArgs args = ll_dispatch_args(
                    inputs, x, topk_idx, num_experts, topk_weights, use_fp8, scale_format, nb::none(),
                    nb::none(), return_recv_hook, layout, expert_alignment, zero_padding);
                nb::gil_scoped_release release;
                buffer.ll_load_kernels(args);
            },
            "x"_a, "topk_idx"_a, "num_experts"_a, nb::kw_only(), "topk_weights"_a.none() = nb::none(),
            "use_fp8"_a = true, "scale_format"_a = ScaleFormat::kFloat32, "return_recv_hook"_a = false,
            "layout"_a = RecvLayout::kExpertMasked, "expert_alignment"_a = 1, "zero_padding"_a = false,
            "Load (JIT-compiling on a miss) every LL kernel ll_dispatch with these arguments and its "
            "ll_combine can "
            "use. Required before the first LL op when ranks share a GPU.")
        .def(
            "ll_combine_input",
            [](PyBuffer& self, const PyLowLatencyHandle& handle) {
                return export_tensor(DeviceTensor::borrow(self.get().ll_combine_input(*handle.handle)),
                                     handle.framework);
            },
            "handle"_a,
            "The buffer's LL send area as bf16 [L, R*T_ll, H] for a zero-copy combine (needs "
            "BufferConfig.ll_zero_copy_combine and the masked layout).")
        .def("ll_query_mask", [](PyBuffer& self) { return self.get().ll_query_mask(); })
        .def(
            "ll_set_mask",
            [](PyBuffer& self, int rank, bool masked) { self.get().ll_set_mask(rank, masked); }, "rank"_a,
            "masked"_a)
        .def("ll_clear_mask", [](PyBuffer& self) { self.get().ll_clear_mask(); })
        .def("ht_query_mask", [](PyBuffer& self) { return self.get().ht_query_mask(); })
        .def(
            "ht_set_mask",
            [](PyBuffer& self, int rank, bool masked) { self.get().ht_set_mask(rank, masked); }, "rank"_a,
            "masked"_a)
        .def("ht_clear_mask", [](PyBuffer& self) { self.get().ht_clear_mask(); })
        .def("check_errors", [](PyBuffer& self) { self.get().check_errors(); })
        .def(
            "set_op_tracing", [](PyBuffer& self, bool on) { self.get().set_op_tracing(on); }, "on"_a,
            "Trace this buffer's ops (op timelines, without printing); turn it on between ops.")
        .def(
            "op_timeline", [](PyBuffer& self, OpTimelineKind kind) { return self.get().op_timeline(kind); },
            "kind"_a,
            "The latest traced op of `kind` whose kernels have finished (synchronize first); empty when "
            "none finished since the previous call for that kind.")
        .def("synchronize",
             [](PyBuffer& self) {
                 Buffer& buffer = self.get();
                 {
                     nb::gil_scoped_release release;
                     buffer.synchronize();
                 }
                 self.prune();
             })
        .def(
            "reset",
            [](PyBuffer& self) {
                Buffer& buffer = self.get();
                nb::gil_scoped_release release;
                buffer.reset();
            },
            "Collective: clear a recorded error and the control workspace so the buffer can be used again.")
        .def(
            "destroy", [](PyBuffer& self) { self.destroy(); },
            "Collective: free the buffer now (every rank calls it; later ops raise).")
        .def_prop_ro(
            "num_pending", [](const PyBuffer& self) { return self.pending.size(); },
            "Asynchronous ops whose inputs are still held (pruned at each op).");
}

}  // namespace switchyard::python
