// DeviceTensor allocation (stream-ordered).
#include "switchyard/device_tensor.hpp"

#include <map>
#include <mutex>

#include "core/cuda_check.hpp"

namespace switchyard {
namespace {

// One stream-ordered memory pool per device for the library's outputs and handles. Unlike the
// default pool (release threshold 0: memory goes back to the driver at every synchronization),
// it keeps freed memory, so a 58 MB combine output is not re-mapped on every call. Falls back
// to the default pool where a pool cannot be created.
cudaMemPool_t library_pool(int device) {
    static std::mutex mutex;
    static std::map<int, cudaMemPool_t> pools;
    std::lock_guard<std::mutex> lock(mutex);
    auto found = pools.find(device);
    if (found != pools.end()) return found->second;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool = nullptr;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
        (void)cudaGetLastError();
        pool = nullptr;
    } else {
        uint64_t keep_everything = ~uint64_t(0);
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything);
    }
    pools[device] = pool;
    return pool;
}

}  // namespace

DeviceTensor DeviceTensor::allocate(DType dtype, std::initializer_list<int64_t> shape, int device,
                                    cudaStream_t stream) {
    DeviceTensor tensor;
    tensor.view_ = TensorView::contiguous(nullptr, dtype, shape, Device::cuda(device));
    const size_t bytes = static_cast<size_t>(tensor.view_.numel()) * dtype_size(dtype);
    void* memory = nullptr;
    // Stream-ordered: never synchronizes the device, so ranks sharing a GPU cannot deadlock on it.
    if (bytes > 0) {
        // Under stream capture the allocation becomes a graph node owned by the graph: keep the
        // default path there (the one the graph tests exercise).
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
        cudaMemPool_t pool = capture == cudaStreamCaptureStatusNone ? library_pool(device) : nullptr;
        if (pool)
            SY_CUDA_CHECK(cudaMallocFromPoolAsync(&memory, bytes, pool, stream));
        else
            SY_CUDA_CHECK(cudaMallocAsync(&memory, bytes, stream));
    }
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

DeviceTensor DeviceTensor::borrow(const TensorView& view) {
    DeviceTensor tensor;
    tensor.view_ = view;
    return tensor;
}

}  // namespace switchyard
