// DeviceTensor allocation (stream-ordered).
#include "switchyard/device_tensor.hpp"

#include "core/cuda_check.hpp"

namespace switchyard {

DeviceTensor DeviceTensor::allocate(DType dtype, std::initializer_list<int64_t> shape, int device,
                                    cudaStream_t stream) {
    DeviceTensor tensor;
    tensor.view_ = TensorView::contiguous(nullptr, dtype, shape, Device::cuda(device));
    const size_t bytes = static_cast<size_t>(tensor.view_.numel()) * dtype_size(dtype);
    void* memory = nullptr;
    // Stream-ordered: never synchronizes the device, so ranks sharing a GPU cannot deadlock on it.
    if (bytes > 0) SY_CUDA_CHECK(cudaMallocAsync(&memory, bytes, stream));
    tensor.view_.data = memory;
    if (memory)
        tensor.storage_ = std::shared_ptr<void>(memory, [stream, device](void* pointer) {
            int current = 0;
            cudaGetDevice(&current);
            cudaSetDevice(device);
            cudaFreeAsync(pointer, stream);
            cudaSetDevice(current);
        });
    return tensor;
}

DeviceTensor DeviceTensor::adopt(const TensorView& view, std::shared_ptr<void> storage) {
    DeviceTensor tensor;
    tensor.view_ = view;
    tensor.storage_ = std::move(storage);
    return tensor;
}

DeviceTensor DeviceTensor::borrow(const TensorView& view) {
    DeviceTensor tensor;
    tensor.view_ = view;
    return tensor;
}

}  // namespace switchyard
