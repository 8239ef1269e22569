// See output_memory.hpp.
#include "core/output_memory.hpp"

#include "util/cuda_check.hpp"
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

namespace {

// `bytes` from the pool for work ordered on `stream` (a side stream while it captures), owned by
// the returned pointer, which frees it in that order.
std::shared_ptr<void> allocate_storage(const std::shared_ptr<OutputMemory::State>& state, size_t bytes,
                                       cudaStream_t stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    SY_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    // Stream-ordered: never synchronizes the device, so ranks sharing a GPU cannot deadlock on it.
    cudaStream_t order = capturing ? state->side_stream : stream;
    void* memory = nullptr;
    if (capturing) {
        // Outside the capture: the memory is valid once the side stream has run the allocation.
        RelaxedCaptureMode relaxed;
        SY_CUDA_CHECK(cudaMallocFromPoolAsync(&memory, bytes, state->pool, order));
        SY_CUDA_CHECK(cudaStreamSynchronize(order));
    } else {
        SY_CUDA_CHECK(cudaMallocFromPoolAsync(&memory, bytes, state->pool, order));
    }
    return std::shared_ptr<void>(memory, [state, order](void* pointer) {
        int current = 0;
        cudaGetDevice(&current);
        cudaSetDevice(state->device);
        RelaxedCaptureMode relaxed;  // a tensor may be dropped while its thread captures
        cudaFreeAsync(pointer, order);
        cudaSetDevice(current);
    });
}

constexpr size_t kGroupAlignment = 256;

}  // namespace

DeviceTensor OutputMemory::allocate(DType dtype, std::initializer_list<int64_t> shape,
                                    cudaStream_t stream) const {
    return allocate_group({{dtype, shape}}, stream)[0];
}

std::vector<DeviceTensor> OutputMemory::allocate_group(std::initializer_list<Spec> specs,
                                                       cudaStream_t stream) const {
    std::vector<TensorView> views;
    std::vector<size_t> offsets;
    size_t total = 0;
    for (const Spec& spec : specs) {
        views.push_back(
            TensorView::contiguous(nullptr, spec.dtype, spec.shape, Device::cuda(state_->device)));
        offsets.push_back(total);
        const size_t bytes = static_cast<size_t>(views.back().numel()) * dtype_size(spec.dtype);
        total += (bytes + kGroupAlignment - 1) / kGroupAlignment * kGroupAlignment;
    }
    std::shared_ptr<void> storage = total > 0 ? allocate_storage(state_, total, stream) : nullptr;
    std::vector<DeviceTensor> tensors;
    tensors.reserve(views.size());
    for (size_t i = 0; i < views.size(); ++i) {
        const bool empty = views[i].numel() == 0;
        views[i].data = empty ? nullptr : static_cast<uint8_t*>(storage.get()) + offsets[i];
        tensors.push_back(DeviceTensor::adopt(views[i], empty ? nullptr : storage));
    }
    return tensors;
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
