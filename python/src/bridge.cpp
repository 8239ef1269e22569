// DLPack in and out, streams and events (bridge.hpp).
#include "bridge.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <string>
#include <unordered_map>

#include "dlpack_abi.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kVersionedCapsuleName = "dltensor_versioned";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// Framework entry points, looked up once (the first time a tensor of that framework is seen).
struct TorchApi {
    bool ready = false;
    nb::object tensor_type;
    nb::object to_dlpack;       // tensor -> capsule, without __dlpack__'s stream hand-shake
    nb::object from_dlpack;     // capsule -> tensor
    nb::object current_stream;  // device index -> raw cudaStream_t as int
    nb::object float8_e4m3fn;   // torch.float8_e4m3fn (None if this torch has none)
    nb::object uint8;
    // Whether this torch exchanges float8 through DLPack; if not, fp8 tensors travel as uint8 and
    // are viewed as float8_e4m3fn on the torch side. Learned on the first fp8 tensor.
    int fp8_export = -1;
};

TorchApi& torch_api() {
    static TorchApi api;
    if (!api.ready) {
        nb::module_ torch = nb::module_::import_("torch");
        nb::object c = torch.attr("_C");
        api.tensor_type = torch.attr("Tensor");
        api.to_dlpack = nb::hasattr(c, "_to_dlpack") ? c.attr("_to_dlpack")
                                                     : nb::module_::import_("torch.utils.dlpack").attr("to_dlpack");
        api.from_dlpack = nb::hasattr(c, "_from_dlpack")
                              ? c.attr("_from_dlpack")
                              : nb::module_::import_("torch.utils.dlpack").attr("from_dlpack");
        if (nb::hasattr(c, "_cuda_getCurrentRawStream")) {
            api.current_stream = c.attr("_cuda_getCurrentRawStream");
        } else {
            nb::object cuda = torch.attr("cuda");
            api.current_stream = nb::cpp_function(
                [cuda](int device) { return nb::cast<intptr_t>(cuda.attr("current_stream")(device).attr("cuda_stream")); });
        }
        api.float8_e4m3fn = nb::getattr(torch, "float8_e4m3fn", nb::none());
        api.uint8 = torch.attr("uint8");
        api.ready = true;
    }
    return api;
}

nb::object& cupy_module() {
    static nb::object cupy;
    if (!cupy.is_valid()) cupy = nb::module_::import_("cupy");
    return cupy;
}

nb::object& jax_from_dlpack() {
    static nb::object from;
    if (!from.is_valid()) from = nb::module_::import_("jax.dlpack").attr("from_dlpack");
    return from;
}

// Capsule destructor: frees the tensor unless a consumer took it (and renamed the capsule).
void capsule_destructor(PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, kCapsuleName)) {
        auto* managed = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
        if (managed && managed->deleter) managed->deleter(managed);
    } else {
        PyErr_Clear();
    }
}

// What a capsule made here owns: a copy of the DeviceTensor (keeping its memory) and the arrays
// the DLTensor points to.
struct ExportedTensor {
    DeviceTensor tensor;
    int64_t shape[TensorView::kMaxDims];
    int64_t strides[TensorView::kMaxDims];
    dlpack::ManagedTensor managed;
};

nb::object capsule_of(const DeviceTensor& tensor, bool fp8_as_uint8) {
    const TensorView& view = tensor.view();
    auto* exported = new ExportedTensor{};
    exported->tensor = tensor;
    for (int dim = 0; dim < view.ndim; ++dim) {
        exported->shape[dim] = view.shape[dim];
        exported->strides[dim] = view.strides[dim];
    }
    dlpack::Tensor& dl = exported->managed.dl_tensor;
    dl.data = view.data;
    dl.device = {static_cast<int32_t>(view.device.type), view.device.id};
    dl.ndim = view.ndim;
    const DType dtype = (fp8_as_uint8 && view.dtype == DType::kFloat8E4M3) ? DType::kUInt8 : view.dtype;
    const DLPackType type = to_dlpack_type(dtype);
    dl.dtype = {type.code, type.bits, type.lanes};
    dl.shape = exported->shape;
    dl.strides = exported->strides;
    dl.byte_offset = view.byte_offset;
    exported->managed.manager_ctx = exported;
    exported->managed.deleter = [](dlpack::ManagedTensor* self) {
        delete static_cast<ExportedTensor*>(self->manager_ctx);
    };
    PyObject* capsule = PyCapsule_New(&exported->managed, kCapsuleName, capsule_destructor);
    if (!capsule) {
        delete exported;
        throw nb::python_error();
    }
    return nb::steal(capsule);
}

nb::object torch_tensor_of(const DeviceTensor& tensor) {
    TorchApi& torch = torch_api();
    if (tensor.view().dtype != DType::kFloat8E4M3) return torch.from_dlpack(capsule_of(tensor, false));
    if (torch.fp8_export == -1) {
        try {
            nb::object out = torch.from_dlpack(capsule_of(tensor, false));
            torch.fp8_export = 1;
            return out;
        } catch (const nb::python_error&) {
            torch.fp8_export = 0;
        }
    }
    if (torch.fp8_export == 1) return torch.from_dlpack(capsule_of(tensor, false));
    return torch.from_dlpack(capsule_of(tensor, true)).attr("view")(torch.float8_e4m3fn);
}

// The DLTensor inside a capsule of either DLPack version.
const dlpack::Tensor* tensor_in_capsule(PyObject* capsule) {
    if (PyCapsule_IsValid(capsule, kCapsuleName))
        return &static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName))->dl_tensor;
    if (PyCapsule_IsValid(capsule, kVersionedCapsuleName))
        return &static_cast<dlpack::ManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedCapsuleName))
                    ->dl_tensor;
    PyErr_Clear();
    return nullptr;
}

intptr_t int_attribute(nb::handle object, const char* name) {
    return nb::cast<intptr_t>(object.attr(name));
}

}  // namespace

const char* framework_name(Framework framework) {
    switch (framework) {
        case Framework::kTorch:
            return "torch";
        case Framework::kCuPy:
            return "cupy";
        case Framework::kJax:
            return "jax";
        case Framework::kNumPy:
            return "numpy";
        case Framework::kNone:
            break;
    }
    return "none";
}

Framework detect_framework(nb::handle tensor) {
    if (!tensor.is_valid() || tensor.is_none()) return Framework::kNone;
    static std::unordered_map<PyTypeObject*, Framework> known;
    PyTypeObject* type = Py_TYPE(tensor.ptr());
    auto found = known.find(type);
    if (found != known.end()) return found->second;
    Framework framework = Framework::kNone;
    const std::string module = nb::cast<std::string>(nb::handle(reinterpret_cast<PyObject*>(type)).attr("__module__"));
    auto starts = [&](const char* prefix) { return module.rfind(prefix, 0) == 0; };
    if (starts("torch")) {
        framework = Framework::kTorch;
    } else if (starts("cupy")) {
        framework = Framework::kCuPy;
    } else if (starts("jax")) {
        framework = Framework::kJax;
    } else if (starts("numpy")) {
        framework = Framework::kNumPy;
    }
    // A torch.Tensor subclass from another module (a tensor subclass of an engine) is still torch.
    if (framework == Framework::kNone && nb::cast<nb::dict>(nb::module_::import_("sys").attr("modules")).contains("torch") &&
        PyObject_IsInstance(tensor.ptr(), torch_api().tensor_type.ptr()) == 1)
        framework = Framework::kTorch;
    known.emplace(type, framework);
    return framework;
}

Imported import_tensor(nb::handle object, const char* name) {
    Imported imported;
    if (!object.is_valid() || object.is_none()) return imported;
    nb::object capsule;
    bool fp8_viewed_as_uint8 = false;
    if (PyCapsule_CheckExact(object.ptr())) {
        capsule = nb::borrow(object);
    } else if (detect_framework(object) == Framework::kTorch) {
        TorchApi& torch = torch_api();
        if (!torch.float8_e4m3fn.is_none() && object.attr("dtype").is(torch.float8_e4m3fn) && torch.fp8_export != 1) {
            // Older torch cannot put float8 in DLPack: pass the bytes and say what they are.
            try {
                capsule = torch.to_dlpack(object);
                torch.fp8_export = 1;
            } catch (const nb::python_error&) {
                torch.fp8_export = 0;
                capsule = torch.to_dlpack(object.attr("view")(torch.uint8));
                fp8_viewed_as_uint8 = true;
            }
        } else {
            capsule = torch.to_dlpack(object);
        }
    } else if (nb::hasattr(object, "__dlpack__")) {
        capsule = object.attr("__dlpack__")();
    } else {
        throw InvalidArgument(std::string("switchyard: ") + name + " must be a tensor with __dlpack__ (torch, CuPy, " +
                              "JAX, NumPy) or a DLPack capsule, got " +
                              nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(object.ptr()))))));
    }
    const dlpack::Tensor* dl = tensor_in_capsule(capsule.ptr());
    if (!dl)
        throw InvalidArgument(std::string("switchyard: ") + name +
                              ": __dlpack__ did not return a DLPack capsule (or it was already consumed)");
    imported.view = from_dlpack(dl);
    if (fp8_viewed_as_uint8) imported.view.dtype = DType::kFloat8E4M3;
    imported.owner = std::move(capsule);
    return imported;
}

TensorView Inputs::add(nb::handle object, const char* name) {
    if (!object.is_valid() || object.is_none()) return TensorView{};
    Imported imported = import_tensor(object, name);
    owners_.push_back(std::move(imported.owner));
    return imported.view;
}

nb::object make_capsule(const DeviceTensor& tensor) {
    return capsule_of(tensor, false);
}

nb::object export_tensor(const DeviceTensor& tensor, Framework framework) {
    if (!tensor.defined()) return nb::none();
    switch (framework) {
        case Framework::kTorch:
            return torch_tensor_of(tensor);
        case Framework::kCuPy:
            return cupy_module().attr("from_dlpack")(nb::cast(DLPackTensor{tensor}));
        case Framework::kJax:
            return jax_from_dlpack()(nb::cast(DLPackTensor{tensor}));
        case Framework::kNumPy:
            // NumPy holds host memory only; outputs of the GPU ops stay DLPack objects.
            if (tensor.view().device.type == DeviceType::kCPU)
                return nb::module_::import_("numpy").attr("from_dlpack")(nb::cast(DLPackTensor{tensor}));
            return nb::cast(DLPackTensor{tensor});
        case Framework::kNone:
            break;
    }
    return nb::cast(DLPackTensor{tensor});
}

cudaStream_t resolve_stream(nb::handle stream, Framework framework, int device) {
    if (!stream.is_valid() || stream.is_none()) {
        switch (framework) {
            case Framework::kTorch:
                return reinterpret_cast<cudaStream_t>(nb::cast<intptr_t>(torch_api().current_stream(device)));
            case Framework::kCuPy:
                return reinterpret_cast<cudaStream_t>(
                    int_attribute(cupy_module().attr("cuda").attr("get_current_stream")(), "ptr"));
            default:
                // JAX exposes no stream; work is ordered after the legacy default stream.
                return nullptr;
        }
    }
    if (PyLong_Check(stream.ptr())) return reinterpret_cast<cudaStream_t>(nb::cast<intptr_t>(stream));
    if (nb::hasattr(stream, "cuda_stream")) return reinterpret_cast<cudaStream_t>(int_attribute(stream, "cuda_stream"));
    if (nb::hasattr(stream, "__cuda_stream__")) {
        nb::object pair = stream.attr("__cuda_stream__")();
        return reinterpret_cast<cudaStream_t>(nb::cast<intptr_t>(pair[1]));
    }
    if (nb::hasattr(stream, "ptr")) return reinterpret_cast<cudaStream_t>(int_attribute(stream, "ptr"));
    throw InvalidArgument("switchyard: stream must be None, an int (cudaStream_t), a torch.cuda.Stream, a CuPy "
                          "stream or an object with __cuda_stream__");
}

cudaEvent_t resolve_event(nb::handle event) {
    if (!event.is_valid() || event.is_none()) return nullptr;
    Event* ours = nullptr;
    if (nb::try_cast<Event*>(event, ours) && ours) return ours->event.get();
    if (PyLong_Check(event.ptr())) return reinterpret_cast<cudaEvent_t>(nb::cast<intptr_t>(event));
    if (nb::hasattr(event, "cuda_event")) return reinterpret_cast<cudaEvent_t>(int_attribute(event, "cuda_event"));
    if (nb::hasattr(event, "ptr")) return reinterpret_cast<cudaEvent_t>(int_attribute(event, "ptr"));
    // DeepEP-style wrappers hold the event in .event.
    if (nb::hasattr(event, "event")) return resolve_event(event.attr("event"));
    throw InvalidArgument("switchyard: an event must be None, a switchyard.Event, an int (cudaEvent_t), a "
                          "torch.cuda.Event or a CuPy event");
}

namespace {

// An event recorded on a stream now (Event.record): owned by the returned OpEvent's copies.
OpEvent record_event(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)
        throw CudaError(std::string("cudaEventCreateWithFlags: ") + cudaGetErrorString(cudaGetLastError()));
    std::shared_ptr<void> owner(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
    if (cudaEventRecord(event, stream) != cudaSuccess)
        throw CudaError(std::string("cudaEventRecord: ") + cudaGetErrorString(cudaGetLastError()));
    return OpEvent(event, std::move(owner));
}

int current_device() {
    int device = 0;
    cudaGetDevice(&device);
    return device;
}

}  // namespace

void bind_bridge(nb::module_& m) {
    using namespace nb::literals;
    nb::enum_<Framework>(m, "Framework", "Whose tensors an op returns (that of its first tensor argument).")
        .value("NONE", Framework::kNone)
        .value("TORCH", Framework::kTorch)
        .value("CUPY", Framework::kCuPy)
        .value("JAX", Framework::kJax)
        .value("NUMPY", Framework::kNumPy);
    m.def("detect_framework", [](nb::handle tensor) { return detect_framework(tensor); }, "tensor"_a.none());
    nb::class_<DLPackTensor>(m, "DLPackTensor",
                             "A tensor the library returned, for frameworks without a direct conversion: pass it to "
                             "any from_dlpack (torch.from_dlpack, cupy.from_dlpack, numpy.from_dlpack for host "
                             "memory). Each __dlpack__ call returns a new capsule sharing the memory.")
        .def(
            "__dlpack__",
            [](const DLPackTensor& self, nb::handle /*stream*/, nb::handle /*max_version*/, nb::handle /*dl_device*/,
               nb::handle copy) {
                if (copy.is_valid() && !copy.is_none() && nb::cast<bool>(copy))
                    throw nb::buffer_error("switchyard.DLPackTensor: copy=True is not supported");
                return make_capsule(self.tensor);
            },
            nb::kw_only(), "stream"_a.none() = nb::none(), "max_version"_a.none() = nb::none(), "dl_device"_a.none() = nb::none(),
            "copy"_a.none() = nb::none(),
            "A DLPack capsule of this tensor. The stream argument is not needed: outputs are ordered by the op's "
            "stream semantics (the caller's stream waits for a synchronous op; wait on the Event otherwise).")
        .def("__dlpack_device__",
             [](const DLPackTensor& self) {
                 const Device device = self.tensor.view().device;
                 return nb::make_tuple(static_cast<int>(device.type), device.id);
             })
        .def_prop_ro("shape",
                     [](const DLPackTensor& self) {
                         const TensorView& view = self.tensor.view();
                         nb::list shape;
                         for (int dim = 0; dim < view.ndim; ++dim) shape.append(view.shape[dim]);
                         return nb::tuple(shape);
                     })
        .def_prop_ro("strides",
                     [](const DLPackTensor& self) {
                         const TensorView& view = self.tensor.view();
                         nb::list strides;
                         for (int dim = 0; dim < view.ndim; ++dim) strides.append(view.strides[dim]);
                         return nb::tuple(strides);
                     })
        .def_prop_ro("dtype", [](const DLPackTensor& self) { return dtype_name(self.tensor.view().dtype); })
        .def_prop_ro("data_ptr", [](const DLPackTensor& self) { return reinterpret_cast<intptr_t>(self.tensor.view().ptr()); })
        .def("__repr__", [](const DLPackTensor& self) {
            return "switchyard.DLPackTensor(" + self.tensor.view().describe() + ")";
        });

    nb::class_<Event>(m, "Event",
                      "The completion of an op (switchyard::OpEvent). Asynchronous ops keep their inputs alive in "
                      "it until the op is done.")
        .def(
            "wait",
            [](const Event& self, nb::handle stream) {
                self.event.wait(resolve_stream(stream, self.framework, self.device));
            },
            "stream"_a.none() = nb::none(),
            "Make `stream` (default: the framework's current stream) wait for the op. Enqueued; the host does not "
            "block; graph-capturable.")
        .def(
            "current_stream_wait",
            [](const Event& self) { self.event.wait(resolve_stream(nb::none(), self.framework, self.device)); },
            "The framework's current stream waits for the op (DeepEP's name for wait()).")
        .def(
            "synchronize",
            [](const Event& self) {
                nb::gil_scoped_release release;
                self.event.synchronize();
            },
            "Block the host until the op is done (errors the kernels recorded are raised by Buffer.check_errors()).")
        .def("done", [](const Event& self) { return self.event.done(); }, "Whether the op has finished.")
        .def_prop_ro("valid", [](const Event& self) { return self.event.valid(); })
        .def_prop_ro("cuda_event", [](const Event& self) { return reinterpret_cast<intptr_t>(self.event.get()); },
                     "The cudaEvent_t as an int.")
        .def_static(
            "record",
            [](nb::handle stream, Framework framework) {
                const int device = current_device();
                Event event;
                event.event = record_event(resolve_stream(stream, framework, device));
                event.framework = framework;
                event.device = device;
                return event;
            },
            "stream"_a.none() = nb::none(), "framework"_a = Framework::kNone,
            "An event recorded now on `stream` (None: the current stream of `framework` on the current device).")
        .def("__repr__", [](const Event& self) {
            return std::string("switchyard.Event(") + (self.event.valid() ? (self.event.done() ? "done" : "pending") : "none") +
                   ", keeps " + std::to_string(self.keep_alive.size()) + " inputs alive)";
        });
}

}  // namespace switchyard::python
