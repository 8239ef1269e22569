// The binding's edge: Python objects in, switchyard types out, and back.
//
// Tensors come in as any object with __dlpack__ (torch, CuPy, JAX, NumPy) or a DLPack capsule and
// become switchyard::TensorView without a copy; the capsule is kept so the memory stays alive for
// as long as the op needs it. The C++ validation judges dtype, device and strides, so its error
// messages are the ones a Python caller sees. Outputs leave as DLPack capsules that own a copy of
// the DeviceTensor, turned into a tensor of the caller's framework (torch in -> torch out).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>  // in every file: nb::cast<std::string> must be the same everywhere

#include <cstdint>
#include <vector>

#include "switchyard/device_tensor.hpp"
#include "switchyard/op_event.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard::python {

namespace nb = nanobind;

// The framework whose tensors an op returns (that of its first tensor argument).
enum class Framework : int { kNone = 0, kTorch = 1, kCuPy = 2, kJax = 3, kNumPy = 4 };

Framework detect_framework(nb::handle tensor);
const char* framework_name(Framework framework);

// One imported tensor: the view and the object that keeps its memory alive (a DLPack capsule).
struct Imported {
    TensorView view;
    nb::object owner;
};

// Collects the owners of a call's inputs. An asynchronous op hands them to its Event, which keeps
// them until the op is done (DESIGN.md §2, "Streams"); a synchronous op drops them on return,
// which is safe because the caller's stream already waits for the op.
class Inputs {
  public:
    // None -> an undefined view (an optional argument left out).
    TensorView add(nb::handle object, const char* name);
    std::vector<nb::object> release() { return std::move(owners_); }

  private:
    std::vector<nb::object> owners_;
};

Imported import_tensor(nb::handle object, const char* name);

// A DeviceTensor as the caller's framework's tensor (None when undefined). kNone and kNumPy
// return a DLPackTensor (an object with __dlpack__ / __dlpack_device__).
nb::object export_tensor(const DeviceTensor& tensor, Framework framework);

// The object returned for kNone: holds the DeviceTensor; every __dlpack__ call makes a capsule.
struct DLPackTensor {
    DeviceTensor tensor;
};
nb::object make_capsule(const DeviceTensor& tensor);

// A stream given as None (the framework's current stream on `device`), an int (cudaStream_t), an
// object with .cuda_stream (torch), .ptr (CuPy) or __cuda_stream__ (the CUDA stream protocol).
cudaStream_t resolve_stream(nb::handle stream, Framework framework, int device);
// An event given as None, an Event of this module, an int (cudaEvent_t), or an object with
// .cuda_event (torch.cuda.Event) or .ptr (CuPy).
cudaEvent_t resolve_event(nb::handle event);

// The completion of an op (switchyard::OpEvent), with the inputs it keeps alive.
struct Event {
    OpEvent event;
    Framework framework = Framework::kNone;
    int device = 0;
    std::vector<nb::object> keep_alive;
};

void bind_bridge(nb::module_& m);

}  // namespace switchyard::python
