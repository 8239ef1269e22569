// TensorView helpers and DLPack interop.
#include <cstring>
#include <sstream>

#include "switchyard/errors.hpp"
#include "switchyard/tensor.hpp"

namespace switchyard {

const char* dtype_name(DType dtype) {
    switch (dtype) {
        case DType::kBFloat16:
            return "bf16";
        case DType::kFloat16:
            return "fp16";
        case DType::kFloat32:
            return "fp32";
        case DType::kFloat8E4M3:
            return "fp8_e4m3";
        case DType::kInt32:
            return "int32";
        case DType::kInt64:
            return "int64";
        case DType::kUInt8:
            return "uint8";
        case DType::kBool:
            return "bool";
    }
    return "unknown";
}

DLPackType to_dlpack_type(DType dtype) {
    switch (dtype) {
        case DType::kBFloat16:
            return {4, 16, 1};
        case DType::kFloat16:
            return {2, 16, 1};
        case DType::kFloat32:
            return {2, 32, 1};
        case DType::kFloat8E4M3:
            return {10, 8, 1};
        case DType::kInt32:
            return {0, 32, 1};
        case DType::kInt64:
            return {0, 64, 1};
        case DType::kUInt8:
            return {1, 8, 1};
        case DType::kBool:
            return {6, 8, 1};
    }
    throw InvalidArgument("unknown dtype");
}

DType from_dlpack_type(DLPackType type) {
    if (type.lanes != 1)
        throw InvalidArgument("DLPack tensors with lanes != 1 are not supported (got " +
                              std::to_string(type.lanes) + ")");
    for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFloat32, DType::kFloat8E4M3, DType::kInt32,
                        DType::kInt64, DType::kUInt8, DType::kBool}) {
        const DLPackType candidate = to_dlpack_type(dtype);
        if (candidate.code == type.code && candidate.bits == type.bits) return dtype;
    }
    throw InvalidArgument("unsupported DLPack dtype (code " + std::to_string(type.code) + ", bits " +
                          std::to_string(type.bits) + ")");
}

static TensorView make_view(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device) {
    if (shape.size() == 0 || shape.size() > TensorView::kMaxDims)
        throw InvalidArgument("a TensorView has 1 to " + std::to_string(TensorView::kMaxDims) +
                              " dims, got " + std::to_string(shape.size()));
    TensorView view;
    view.data = data;
    view.dtype = dtype;
    view.device = device;
    view.ndim = static_cast<int32_t>(shape.size());
    int dim = 0;
    for (int64_t extent : shape) view.shape[dim++] = extent;
    return view;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
    TensorView view = make_view(data, dtype, shape, device);
    int64_t stride = 1;
    for (int dim = view.ndim - 1; dim >= 0; --dim) {
        view.strides[dim] = stride;
        stride *= view.shape[dim];
    }
    return view;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> strides, Device device) {
    TensorView view = make_view(data, dtype, shape, device);
    if (strides.size() != shape.size()) throw InvalidArgument("strides and shape differ in length");
    int dim = 0;
    for (int64_t stride : strides) view.strides[dim++] = stride;
    return view;
}

int64_t TensorView::numel() const {
    if (ndim == 0) return 0;
    int64_t count = 1;
    for (int dim = 0; dim < ndim; ++dim) count *= shape[dim];
    return count;
}

bool TensorView::is_contiguous() const {
    int64_t expected = 1;
    for (int dim = ndim - 1; dim >= 0; --dim) {
        if (shape[dim] != 1 && strides[dim] != expected) return false;
        expected *= shape[dim];
    }
    return true;
}

std::string TensorView::describe() const {
    if (!defined()) return "(none)";
    std::ostringstream out;
    out << dtype_name(dtype) << "[";
    for (int dim = 0; dim < ndim; ++dim) out << (dim ? ", " : "") << shape[dim];
    out << "] strides [";
    for (int dim = 0; dim < ndim; ++dim) out << (dim ? ", " : "") << strides[dim];
    out << "] on "
        << (device.type == DeviceType::kCUDA ? "cuda:" + std::to_string(device.id) : std::string("cpu"));
    return out.str();
}

namespace {
// The DLPack ABI (dlpack.h v0.8 / v1.x DLTensor), declared here so no external header is needed.
struct DLDeviceAbi {
    int32_t device_type;
    int32_t device_id;
};
struct DLDataTypeAbi {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};
struct DLTensorAbi {
    void* data;
    DLDeviceAbi device;
    int32_t ndim;
    DLDataTypeAbi dtype;
    int64_t* shape;
    int64_t* strides;
    uint64_t byte_offset;
};
}  // namespace

TensorView from_dlpack(const void* dl_tensor) {
    if (!dl_tensor) throw InvalidArgument("from_dlpack: null DLTensor");
    DLTensorAbi tensor;
    std::memcpy(&tensor, dl_tensor, sizeof(tensor));
    if (tensor.ndim < 1 || tensor.ndim > TensorView::kMaxDims)
        throw InvalidArgument("from_dlpack: tensors of 1 to " + std::to_string(TensorView::kMaxDims) +
                              " dims are supported, got " + std::to_string(tensor.ndim));
    TensorView view;
    view.data = tensor.data;
    view.byte_offset = tensor.byte_offset;
    view.device = Device{static_cast<DeviceType>(tensor.device.device_type), tensor.device.device_id};
    view.ndim = tensor.ndim;
    view.dtype = from_dlpack_type({tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes});
    int64_t stride = 1;
    for (int dim = tensor.ndim - 1; dim >= 0; --dim) {
        view.shape[dim] = tensor.shape[dim];
        // DLPack allows strides == NULL for compact row-major tensors.
        view.strides[dim] = tensor.strides ? tensor.strides[dim] : stride;
        stride *= tensor.shape[dim];
    }
    return view;
}

}  // namespace switchyard
