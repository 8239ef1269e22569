// Errors, configuration, topology, the SM model and communicators.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>

#include "bind.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/config.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/ops.hpp"
#include "switchyard/sm_model.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::python {
namespace {

using namespace nb::literals;

std::atomic<bool> g_exiting{false};

// ---------------------------------------------------------------------------------------------
// Errors: one Python class per C++ class, messages unchanged. InvalidArgument is also a
// ValueError and TimeoutError the builtin TimeoutError, so callers can catch either.
// ---------------------------------------------------------------------------------------------
struct ErrorTypes {
    PyObject* error = nullptr;
    PyObject* invalid_argument = nullptr;
    PyObject* timeout = nullptr;
    PyObject* cuda = nullptr;
    PyObject* unsupported = nullptr;
    PyObject* compile = nullptr;
    PyObject* poisoned = nullptr;
    PyObject* peer_failed = nullptr;
};
ErrorTypes g_errors;

PyObject* new_error_type(nb::module_& m, const char* name, const char* doc, nb::tuple bases) {
    const std::string qualified = std::string("switchyard.") + name;
    PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
    if (!type) throw nb::python_error();
    m.attr(name) = nb::handle(type);
    return type;
}

void raise_timeout(const TimeoutError& error) {
    nb::object instance = nb::steal(PyObject_CallFunction(g_errors.timeout, "s", error.what()));
    if (!instance.is_valid()) return;  // the call set a Python error already
    instance.attr("rank") = error.rank();
    instance.attr("peer") = error.peer();
    instance.attr("phase") = error.phase();
    PyErr_SetObject(g_errors.timeout, instance.ptr());
}

void raise_peer_failed(const PeerFailedError& error) {
    nb::object instance = nb::steal(PyObject_CallFunction(g_errors.peer_failed, "s", error.what()));
    if (!instance.is_valid()) return;
    instance.attr("rank") = error.rank();
    instance.attr("peer") = error.peer();
    instance.attr("phase") = error.phase();
    PyErr_SetObject(g_errors.peer_failed, instance.ptr());
}

void translate(const std::exception_ptr& pointer, void*);

// PoisonedError with the recorded failure, translated, as its __cause__ (and .cause).
void raise_poisoned(const PoisonedError& error) {
    nb::object cause;
    if (error.cause()) {
        translate(error.cause(), nullptr);
        PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
        PyErr_Fetch(&type, &value, &traceback);
        PyErr_NormalizeException(&type, &value, &traceback);
        Py_XDECREF(type);
        Py_XDECREF(traceback);
        cause = nb::steal(value);
    }
    nb::object instance = nb::steal(PyObject_CallFunction(g_errors.poisoned, "s", error.what()));
    if (!instance.is_valid()) return;
    instance.attr("cause") = cause.is_valid() ? cause : nb::none();
    if (cause.is_valid()) PyException_SetCause(instance.ptr(), cause.release().ptr());
    PyErr_SetObject(g_errors.poisoned, instance.ptr());
}

void translate(const std::exception_ptr& pointer, void*) {
    try {
        std::rethrow_exception(pointer);
    } catch (const TimeoutError& error) {
        raise_timeout(error);
    } catch (const PeerFailedError& error) {
        raise_peer_failed(error);
    } catch (const InvalidArgument& error) {
        PyErr_SetString(g_errors.invalid_argument, error.what());
    } catch (const CudaError& error) {
        PyErr_SetString(g_errors.cuda, error.what());
    } catch (const UnsupportedError& error) {
        PyErr_SetString(g_errors.unsupported, error.what());
    } catch (const CompileError& error) {
        PyErr_SetString(g_errors.compile, error.what());
    } catch (const PoisonedError& error) {
        raise_poisoned(error);
    } catch (const Error& error) {
        PyErr_SetString(g_errors.error, error.what());
    }
}

// ---------------------------------------------------------------------------------------------
// A Communicator whose collectives call a Python object: allgather(bytes) -> list[bytes] and
// barrier(). The C++ caller (Buffer creation, destruction, reset) runs without the GIL; each
// callback takes it. Python exceptions become switchyard errors carrying their message, a
// timeout stays a TimeoutError.
// ---------------------------------------------------------------------------------------------
class PythonCommunicator final : public Communicator {
  public:
    PythonCommunicator(nb::object group, int rank, int size, std::string name)
        : group_(std::move(group)), rank_(rank), size_(size), name_(std::move(name)) {}
    ~PythonCommunicator() override {
        if (g_exiting || !Py_IsInitialized()) {
            group_.release();  // the interpreter is going away: leak rather than touch it
            return;
        }
        nb::gil_scoped_acquire acquire;
        group_.reset();
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string describe() const override {
        return "python rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (" + name_ + ")";
    }

    void all_gather(const void* send, size_t bytes, void* recv, std::chrono::milliseconds) override {
        call("all_gather", [&] {
            nb::bytes data(static_cast<const char*>(send), bytes);
            nb::object gathered = group_.attr("allgather")(data);
            size_t index = 0;
            for (nb::handle item : gathered) {
                if (index >= size_t(size_))
                    throw Error("switchyard: the Python communicator's allgather returned more than " +
                                std::to_string(size_) + " items");
                char* buffer = nullptr;
                Py_ssize_t length = 0;
                if (PyBytes_AsStringAndSize(item.ptr(), &buffer, &length) != 0) throw nb::python_error();
                if (size_t(length) != bytes)
                    throw Error("switchyard: the Python communicator's allgather returned " +
                                std::to_string(length) + " bytes from rank " + std::to_string(index) +
                                ", expected " + std::to_string(bytes));
                std::memcpy(static_cast<char*>(recv) + index * bytes, buffer, bytes);
                ++index;
            }
            if (index != size_t(size_))
                throw Error("switchyard: the Python communicator's allgather returned " +
                            std::to_string(index) + " items, expected " + std::to_string(size_));
        });
    }

    void barrier(std::chrono::milliseconds) override {
        call("barrier", [&] { group_.attr("barrier")(); });
    }

  private:
    template <typename Body>
    void call(const char* phase, Body&& body) {
        if (g_exiting) throw Error(std::string("switchyard: Python is exiting; ") + phase + " skipped");
        nb::gil_scoped_acquire acquire;
        try {
            body();
        } catch (nb::python_error& error) {
            const bool timeout = error.matches(PyExc_TimeoutError) || is_timeout_message(error.what());
            const std::string message = std::string("switchyard: ") + describe() + ": " + phase +
                                        " raised in Python: " + error.what();
            if (timeout) throw TimeoutError(message, rank_, -1, std::string("python communicator ") + phase);
            throw Error(message);
        }
    }
    static bool is_timeout_message(const char* text) {
        std::string lower(text);
        for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
        return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
    }

    nb::object group_;
    int rank_;
    int size_;
    std::string name_;
};

std::chrono::milliseconds to_ms(double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// BufferConfig(**fields): each keyword sets the field of that name.
void set_config_field(BufferConfig& config, const std::string& name, nb::handle value) {
    auto as_int = [&] { return nb::cast<int32_t>(value); };
    auto as_bool = [&] { return nb::cast<bool>(value); };
    if (name == "max_tokens_per_rank")
        config.max_tokens_per_rank = as_int();
    else if (name == "max_hidden")
        config.max_hidden = as_int();
    else if (name == "max_topk")
        config.max_topk = as_int();
    else if (name == "max_experts")
        config.max_experts = as_int();
    else if (name == "enable_high_throughput")
        config.enable_high_throughput = as_bool();
    else if (name == "enable_low_latency")
        config.enable_low_latency = as_bool();
    else if (name == "ll_max_tokens_per_rank")
        config.ll_max_tokens_per_rank = as_int();
    else if (name == "timeout_seconds")
        config.timeout_seconds = nb::cast<double>(value);
    else if (name == "emulated_nodes")
        config.emulated_nodes = as_int();
    else if (name == "num_sms")
        config.num_sms = as_int();
    else if (name == "ll_mask_unresponsive_ranks")
        config.ll_mask_unresponsive_ranks = as_bool();
    else if (name == "ht_mask_unresponsive_ranks")
        config.ht_mask_unresponsive_ranks = as_bool();
    else if (name == "ll_zero_copy_combine")
        config.ll_zero_copy_combine = as_bool();
    else if (name == "launch_on_caller_stream")
        config.launch_on_caller_stream = as_bool();
    else
        throw InvalidArgument("switchyard: BufferConfig has no field '" + name + "'");
}

}  // namespace

bool python_is_exiting() {
    return g_exiting;
}

void bind_errors(nb::module_& m) {
    nb::handle runtime_error(PyExc_RuntimeError);
    g_errors.error = new_error_type(m, "Error", "Base of every switchyard error (a RuntimeError).",
                                    nb::make_tuple(runtime_error));
    nb::handle error(g_errors.error);
    g_errors.invalid_argument =
        new_error_type(m, "InvalidArgument",
                       "A caller passed something the library cannot accept (shape, dtype, stride, routing).",
                       nb::make_tuple(error, nb::handle(PyExc_ValueError)));
    g_errors.timeout = new_error_type(
        m, "TimeoutError",
        "A wait on another rank ran past its budget; .rank, .peer (-1 if unknown) and .phase say where.",
        nb::make_tuple(error, nb::handle(PyExc_TimeoutError)));
    g_errors.cuda =
        new_error_type(m, "CudaError", "A CUDA runtime, driver or NVRTC call failed.", nb::make_tuple(error));
    g_errors.unsupported = new_error_type(
        m, "UnsupportedError", "Valid in general but not supported on this machine, build or topology.",
        nb::make_tuple(error));
    g_errors.compile =
        new_error_type(m, "CompileError", "The JIT could not compile a kernel (the message has the log).",
                       nb::make_tuple(error));
    g_errors.poisoned = new_error_type(
        m, "PoisonedError",
        "An op was called on a buffer an earlier failure poisoned; every rank must reset() it. .cause (also "
        "__cause__) is that failure, as its own switchyard error.",
        nb::make_tuple(error));
    g_errors.peer_failed = new_error_type(
        m, "PeerFailedError",
        "Another rank failed the op before any data moved and announced it (invalid routing, or a poisoned "
        "buffer), so this rank stopped at once; .rank, .peer (the failed rank) and .phase say where.",
        nb::make_tuple(error));
    nb::register_exception_translator(translate);

    // Python callbacks stop at exit: buffers destroyed during teardown skip their barrier.
    nb::module_::import_("atexit").attr("register")(nb::cpp_function([] { g_exiting = true; }));
}

void bind_config(nb::module_& m) {
    nb::enum_<RecvLayout>(m, "RecvLayout", "How received rows are laid out (DESIGN.md §2).")
        .value("RANK_MAJOR", RecvLayout::kRankMajor)
        .value("EXPERT_CONTIGUOUS", RecvLayout::kExpertContiguous)
        .value("EXPERT_MASKED", RecvLayout::kExpertMasked);
    nb::enum_<ScaleFormat>(m, "ScaleFormat", "Scales of an FP8 payload, one per 128 channels.")
        .value("NONE", ScaleFormat::kNone)
        .value("FLOAT32", ScaleFormat::kFloat32)
        .value("UE8M0", ScaleFormat::kUE8M0);
    nb::enum_<CountMode>(m, "CountMode",
                         "Host-synced counts (exact sizes) or device counts (graph-capturable).")
        .value("HOST_SYNCED", CountMode::kHostSynced)
        .value("DEVICE", CountMode::kDevice);
    nb::enum_<OpTimelineKind>(m, "OpTimelineKind",
                              "The traced ops (an LL op with a receive hook is traced as its two halves).")
        .value("HT_DISPATCH", OpTimelineKind::kHtDispatch)
        .value("HT_COMBINE", OpTimelineKind::kHtCombine)
        .value("LL_DISPATCH_SEND", OpTimelineKind::kLlDispatchSend)
        .value("LL_DISPATCH_RECEIVE", OpTimelineKind::kLlDispatchReceive)
        .value("LL_DISPATCH", OpTimelineKind::kLlDispatch)
        .value("LL_COMBINE_SEND", OpTimelineKind::kLlCombineSend)
        .value("LL_COMBINE_RECEIVE", OpTimelineKind::kLlCombineReceive)
        .value("LL_COMBINE", OpTimelineKind::kLlCombine);
    nb::class_<OpTimeline>(m, "OpTimeline",
                           "When a traced op's kernels reached the marks of its timeline "
                           "(include/switchyard/op_timeline.hpp): us[i] is mark i in microseconds after mark "
                           "0, NaN where it was not reached.")
        .def_ro("op", &OpTimeline::op)
        .def_ro("marks", &OpTimeline::marks)
        .def_ro("us", &OpTimeline::us)
        .def_ro("start_ns", &OpTimeline::start_ns,
                "Mark 0 on the GPU's global timer (ns): lines up the timelines of ranks on one GPU.")
        .def("empty", &OpTimeline::empty)
        .def(
            "at", [](const OpTimeline& timeline, const std::string& name) { return timeline.at(name); },
            "name"_a, "The time of the mark called `name` (NaN when absent or not reached).");

    nb::class_<BufferConfig>(
        m, "BufferConfig",
        "The capacities a Buffer is sized for (include/switchyard/config.hpp). Every rank "
        "passes the same configuration. Construct with keyword arguments, e.g. "
        "BufferConfig(max_tokens_per_rank=128, enable_low_latency=True).")
        .def(
            "__init__",
            [](BufferConfig* self, nb::kwargs kwargs) {
                new (self) BufferConfig();
                for (auto [key, value] : kwargs) set_config_field(*self, nb::cast<std::string>(key), value);
            },
            "kwargs"_a)
        .def_rw("max_tokens_per_rank", &BufferConfig::max_tokens_per_rank)
        .def_rw("max_hidden", &BufferConfig::max_hidden)
        .def_rw("max_topk", &BufferConfig::max_topk)
        .def_rw("max_experts", &BufferConfig::max_experts)
        .def_rw("enable_high_throughput", &BufferConfig::enable_high_throughput)
        .def_rw("enable_low_latency", &BufferConfig::enable_low_latency)
        .def_rw("ll_max_tokens_per_rank", &BufferConfig::ll_max_tokens_per_rank)
        .def_rw("timeout_seconds", &BufferConfig::timeout_seconds)
        .def_rw("emulated_nodes", &BufferConfig::emulated_nodes)
        .def_rw("num_sms", &BufferConfig::num_sms)
        .def_rw("ll_mask_unresponsive_ranks", &BufferConfig::ll_mask_unresponsive_ranks)
        .def_rw("ht_mask_unresponsive_ranks", &BufferConfig::ht_mask_unresponsive_ranks)
        .def_rw("ll_zero_copy_combine", &BufferConfig::ll_zero_copy_combine)
        .def_rw("launch_on_caller_stream", &BufferConfig::launch_on_caller_stream)
        .def("__repr__", [](const BufferConfig& config) { return "BufferConfig(" + describe(config) + ")"; });

    nb::class_<RankPlacement>(m, "RankPlacement")
        .def_ro("rank", &RankPlacement::rank)
        .def_ro("host_id", &RankPlacement::host_id)
        .def_ro("process_id", &RankPlacement::process_id)
        .def_ro("device", &RankPlacement::device)
        .def_ro("gpu_bus_id", &RankPlacement::gpu_bus_id);
    nb::class_<Topology>(m, "Topology", "Where the ranks run (include/switchyard/topology.hpp).")
        .def_ro("rank", &Topology::rank)
        .def_ro("num_ranks", &Topology::num_ranks)
        .def_ro("placements", &Topology::placements)
        .def_ro("node_of_rank", &Topology::node_of_rank)
        .def_ro("num_nodes", &Topology::num_nodes)
        .def_ro("emulated_nodes", &Topology::emulated_nodes)
        .def_ro("ranks_on_my_gpu", &Topology::ranks_on_my_gpu)
        .def_ro("index_on_my_gpu", &Topology::index_on_my_gpu)
        .def("num_gpus", &Topology::num_gpus)
        .def("describe", &Topology::describe)
        .def("__repr__", &Topology::describe);
}

void bind_communicator(nb::module_& m) {
    nb::enum_<PeerStatus>(m, "PeerStatus", "What a communicator knows about a rank's process.")
        .value("UNKNOWN", PeerStatus::kUnknown)
        .value("ALIVE", PeerStatus::kAlive)
        .value("GONE", PeerStatus::kGone);
    m.def("shrunk_rank", &shrunk_rank, "old_rank"_a, "gone"_a,
          "A rank's rank among the survivors after Communicator.shrink(gone), or -1 if it is gone.");
    nb::class_<Communicator>(
        m, "Communicator",
        "How ranks find each other on the host (bootstrap): rank, size, all-gather of bytes, "
        "barrier. Made by the functions below; switchyard.Buffer makes one from a "
        "torch.distributed group.")
        .def("rank", &Communicator::rank)
        .def("size", &Communicator::size)
        .def("describe", &Communicator::describe)
        .def("peer_status", &Communicator::peer_status, "rank"_a,
             "Whether rank's process is alive, as far as this communicator can tell without communicating.")
        .def("gone_ranks", &Communicator::gone_ranks, "The ranks whose processes are gone, ascending.")
        .def(
            "shrink",
            [](Communicator& self, const std::vector<int>& gone, double timeout_seconds) {
                nb::gil_scoped_release release;
                return self.shrink(gone, to_ms(timeout_seconds));
            },
            "gone"_a, "timeout_seconds"_a = 100.0,
            "The survivors' communicator (every survivor passes the same gone ranks), ranks renumbered in "
            "the old "
            "order: rebuild a Buffer on it after a peer died (docs/python.md).")
        .def(
            "allgather",
            [](Communicator& self, nb::bytes data, double timeout_seconds) {
                const std::string send(data.c_str(), data.size());
                std::string recv(send.size() * size_t(self.size()), '\0');
                {
                    nb::gil_scoped_release release;
                    self.all_gather(send.data(), send.size(), recv.data(), to_ms(timeout_seconds));
                }
                nb::list out;
                for (int rank = 0; rank < self.size(); ++rank)
                    out.append(nb::bytes(recv.data() + size_t(rank) * send.size(), send.size()));
                return out;
            },
            "data"_a, "timeout_seconds"_a = 100.0,
            "Every rank contributes equally long bytes; returns all of them.")
        .def(
            "barrier",
            [](Communicator& self, double timeout_seconds) {
                nb::gil_scoped_release release;
                self.barrier(to_ms(timeout_seconds));
            },
            "timeout_seconds"_a = 100.0)
        .def("__repr__",
             [](const Communicator& self) { return "switchyard.Communicator(" + self.describe() + ")"; });

    m.def("make_in_process_communicators", &make_in_process_communicators, "size"_a,
          "Ranks as threads of one process: `size` communicators sharing one rendezvous.");
    m.def(
        "make_local_process_communicator",
        [](const std::string& key, int rank, int size, double timeout_seconds) {
            nb::gil_scoped_release release;
            return make_local_process_communicator(key, rank, size, to_ms(timeout_seconds));
        },
        "key"_a, "rank"_a, "size"_a, "timeout_seconds"_a = 100.0,
        "Ranks as processes on one host, meeting under `key` (rank 0 hosts the rendezvous).");
    m.def(
        "wrap_nccl_communicator",
        [](intptr_t nccl_comm, int device) {
            return wrap_nccl_communicator(reinterpret_cast<void*>(nccl_comm), device);
        },
        "nccl_comm"_a, "device"_a, "Wrap an existing ncclComm_t (given as an int pointer).");
    m.def(
        "python_communicator",
        [](nb::object group, int rank, int size, const std::string& name) -> std::shared_ptr<Communicator> {
            if (!nb::hasattr(group, "allgather") || !nb::hasattr(group, "barrier"))
                throw InvalidArgument(
                    "switchyard: a Python communicator needs allgather(bytes) -> list[bytes] and "
                    "barrier() methods");
            if (size < 1 || rank < 0 || rank >= size)
                throw InvalidArgument("switchyard: rank " + std::to_string(rank) + " of " +
                                      std::to_string(size) + " is not a valid rank");
            return std::make_shared<PythonCommunicator>(std::move(group), rank, size, name);
        },
        "group"_a, "rank"_a, "size"_a, "name"_a = "python",
        "A Communicator whose collectives call group.allgather(bytes) -> list[bytes] and group.barrier().");
}

void bind_sm_model(nb::module_& m) {
    nb::enum_<SmModelOp>(m, "SmModelOp")
        .value("DISPATCH", SmModelOp::kDispatch)
        .value("COMBINE", SmModelOp::kCombine);
    nb::class_<ArchBandwidth>(m, "ArchBandwidth")
        .def(nb::init<>())
        .def_rw("sm_read_gbps", &ArchBandwidth::sm_read_gbps)
        .def_rw("sm_write_gbps", &ArchBandwidth::sm_write_gbps)
        .def_rw("nvlink_gbps", &ArchBandwidth::nvlink_gbps)
        .def_rw("rdma_gbps", &ArchBandwidth::rdma_gbps);
    nb::class_<SmModelInput>(m, "SmModelInput")
        .def(nb::init<>())
        .def_rw("num_experts", &SmModelInput::num_experts)
        .def_rw("topk", &SmModelInput::topk)
        .def_rw("num_ranks", &SmModelInput::num_ranks)
        .def_rw("num_nodes", &SmModelInput::num_nodes)
        .def_rw("num_device_sms", &SmModelInput::num_device_sms)
        .def_rw("max_sms", &SmModelInput::max_sms)
        .def_rw("headroom", &SmModelInput::headroom)
        .def_rw("bandwidth", &SmModelInput::bandwidth)
        .def_rw("op", &SmModelInput::op)
        .def_rw("combine_send_fraction", &SmModelInput::combine_send_fraction);
    nb::class_<SmModelResult>(m, "SmModelResult")
        .def_ro("expected_ranks_per_token", &SmModelResult::expected_ranks_per_token)
        .def_ro("expected_nodes_per_token", &SmModelResult::expected_nodes_per_token)
        .def_ro("link_bytes_per_token", &SmModelResult::link_bytes_per_token)
        .def_ro("sm_read_bytes_per_token", &SmModelResult::sm_read_bytes_per_token)
        .def_ro("sm_write_bytes_per_token", &SmModelResult::sm_write_bytes_per_token)
        .def_ro("link_gbps", &SmModelResult::link_gbps)
        .def_ro("bottleneck", &SmModelResult::bottleneck)
        .def_ro("exact_sms", &SmModelResult::exact_sms)
        .def_ro("num_sms", &SmModelResult::num_sms);
    m.def("model_num_sms", &model_num_sms, "input"_a, "The analytical SM model (DESIGN.md §7).");
    m.def("expected_distinct_groups", &expected_distinct_groups, "num_experts"_a, "topk"_a, "num_groups"_a);
    m.def("default_arch_bandwidth", &default_arch_bandwidth, "compute_capability_major"_a);
}

}  // namespace switchyard::python
