// See output_memory.hpp.
#include "core/output_memory.hpp"

#include "core/cuda_check.hpp"
#include "core/stream_pool.hpp"

namespace switchyard::core {
namespace {

// While this thread captures a stream (global or thread-local mode), work on other streams is
// refused as unsafe. The side-stream allocation (and its free) are deliberate and safe, so this
// thread switches to relaxed mode for them, and back.
class RelaxedCaptureMode {
  public:
    RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
    ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
    RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
    RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

  private:
    cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

struct OutputMemory::State {
    int device = 0;
    cudaMemPool_t pool = nullptr;
    cudaStream_t side_stream =
        nullptr;  // allocations made while the caller's stream captures (shared per device)

    ~State() {
        int current = 0;
        cudaGetDevice(&current);
        cudaSetDevice(device);
        if (side_stream) cudaStreamSynchronize(side_stream);  // shared: not released
        if (pool) cudaMemPoolDestroy(pool);
        cudaSetDevice(current);
    }
};

OutputMemory::OutputMemory(int device) : state_(std::make_shared<State>()) {
    state_->device = device;
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    SY_CUDA_CHECK(cudaMemPoolCreate(&state_->pool, &props));
    // Keep freed memory: a 58 MB combine output must not be re-mapped on every call.
    uint64_t keep_everything = ~uint64_t(0);
    SY_CUDA_CHECK(cudaMemPoolSetAttribute(state_->pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    state_->side_stream = shared_helper_stream(device);
}

DeviceTensor OutputMemory::allocate(DType dtype, std::initializer_list<int64_t> shape,
                                    cudaStream_t stream) const {
    TensorView view = TensorView::contiguous(nullptr, dtype, shape, Device::cuda(state_->device));
    const size_t bytes = static_cast<size_t>(view.numel()) * dtype_size(dtype);
    if (bytes == 0) return DeviceTensor::adopt(view, nullptr);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    // Stream-ordered: never synchronizes the device, so ranks sharing a GPU cannot deadlock on it.
    cudaStream_t order = capturing ? state_->side_stream : stream;
    void* memory = nullptr;
    if (capturing) {
        // Outside the capture: the memory is valid once the side stream has run the allocation.
        RelaxedCaptureMode relaxed;
        SY_CUDA_CHECK(cudaMallocFromPoolAsync(&memory, bytes, state_->pool, order));
        SY_CUDA_CHECK(cudaStreamSynchronize(order));
    } else {
        SY_CUDA_CHECK(cudaMallocFromPoolAsync(&memory, bytes, state_->pool, order));
    }
    view.data = memory;
    std::shared_ptr<State> state = state_;
    std::shared_ptr<void> storage(memory, [state, order](void* pointer) {
        int current = 0;
        cudaGetDevice(&current);
        cudaSetDevice(state->device);
        RelaxedCaptureMode relaxed;  // a tensor may be dropped while its thread captures
        cudaFreeAsync(pointer, order);
        cudaSetDevice(current);
    });
    return DeviceTensor::adopt(view, std::move(storage));
}

void OutputMemory::reserve(size_t bytes) const {
    if (bytes == 0) return;
    void* memory = nullptr;
    cudaStream_t stream = state_->side_stream;
    // Best effort: a device without that much free memory keeps growing the pool on demand.
    if (cudaMallocFromPoolAsync(&memory, bytes, state_->pool, stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    SY_CUDA_CHECK(cudaFreeAsync(memory, stream));
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));  // the release threshold keeps the memory
}

}  // namespace switchyard::core
