// The DLPack ABI structs (DLPack 0.8 legacy capsules and 1.x versioned capsules), declared here so
// the binding needs no external header. Field order and types are the ABI.
#pragma once

#include <cstdint>

namespace switchyard::python::dlpack {

struct Device {
    int32_t device_type;  // 1 = CPU, 2 = CUDA, 3 = CUDA host
    int32_t device_id;
};

struct DataType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};

struct Tensor {
    void* data;
    Device device;
    int32_t ndim;
    DataType dtype;
    int64_t* shape;
    int64_t* strides;  // in elements; null = compact row-major
    uint64_t byte_offset;
};

// Capsule name "dltensor".
struct ManagedTensor {
    Tensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(ManagedTensor* self);
};

struct PackVersion {
    uint32_t major;
    uint32_t minor;
};

// Capsule name "dltensor_versioned" (DLPack >= 1.0).
struct ManagedTensorVersioned {
    PackVersion version;
    void* manager_ctx;
    void (*deleter)(ManagedTensorVersioned* self);
    uint64_t flags;
    Tensor dl_tensor;
};

}  // namespace switchyard::python::dlpack
