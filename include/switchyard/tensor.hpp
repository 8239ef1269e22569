// TensorView: a non-owning view of device or host memory, with DLPack's fields.
//
// Kernels and the core never see a framework tensor; bindings convert DLPack tensors to views at
// the edge. Strides are in elements, as in DLPack. A view never frees its memory.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "switchyard/dtype.hpp"

namespace switchyard {

enum class DeviceType : int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3 };  // DLPack device codes

struct Device {
    DeviceType type = DeviceType::kCPU;
    int32_t id = 0;
    static Device cpu() { return {DeviceType::kCPU, 0}; }
    static Device cuda(int id) { return {DeviceType::kCUDA, id}; }
    bool operator==(const Device&) const = default;
};

struct TensorView {
    static constexpr int kMaxDims = 4;

    void* data = nullptr;
    Device device{};
    int32_t ndim = 0;
    DType dtype = DType::kUInt8;
    std::array<int64_t, kMaxDims> shape{};
    std::array<int64_t, kMaxDims> strides{};  // in elements
    uint64_t byte_offset = 0;                 // as in DLPack; folded into data by ptr()

    // A contiguous (row-major) view.
    static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                 Device device = Device::cpu());
    // A view with explicit strides (in elements).
    static TensorView strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                              std::initializer_list<int64_t> strides, Device device = Device::cpu());

    // A default-constructed view means "not given" (optional arguments).
    bool defined() const { return ndim > 0; }
    int64_t size(int dim) const { return shape[dim]; }
    int64_t stride(int dim) const { return strides[dim]; }
    int64_t numel() const;
    size_t element_size() const { return dtype_size(dtype); }
    bool is_contiguous() const;
    // Data pointer with byte_offset applied.
    void* ptr() const { return static_cast<char*>(data) + byte_offset; }
    template <typename T>
    T* ptr_as() const {
        return reinterpret_cast<T*>(ptr());
    }
    std::string describe() const;  // "bf16[128, 7168] strides [7168, 1] on cuda:0"
};

// DLPack interop. `dl_tensor` points to a DLTensor (the DLPack ABI struct); the view aliases its
// memory. Throws InvalidArgument for unsupported dtypes, lanes != 1 or more than kMaxDims dims.
TensorView from_dlpack(const void* dl_tensor);

}  // namespace switchyard
