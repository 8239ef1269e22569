#include "cuda_resources.hpp"

#include <utility>

#include "cuda_check.hpp"

namespace switchyard::bench {

DeviceGuard::DeviceGuard(int device) {
    SWITCHYARD_BENCH_CUDA(cudaGetDevice(&previous_));
    SWITCHYARD_BENCH_CUDA(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
    cudaSetDevice(previous_);
}

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
    if (bytes == 0) return;
    DeviceGuard guard(device);
    SWITCHYARD_BENCH_CUDA(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
    release();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        release();
        device_ = other.device_;
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void DeviceBuffer::release() {
    if (!ptr_) return;
    // cudaFree needs no current-device switch, but a destructor must not throw: ignore errors
    // (the process is usually already reporting the error that got us here).
    cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
}

Stream::Stream(int device) : device_(device) {
    DeviceGuard guard(device);
    SWITCHYARD_BENCH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // A new stream's first work can queue behind a kernel already running on the device (design
    // notes §2, rule 8): with co-located ranks that kernel may be a peer's op waiting for this
    // rank. Do that first work here, before any op.
    const DeviceBuffer word(device, 4);
    SWITCHYARD_BENCH_CUDA(cudaMemsetAsync(word.get(), 0, 4, stream_));
    SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(stream_));
}

Stream::~Stream() {
    if (stream_) cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept
    : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}

Event::Event(int device) : device_(device) {
    DeviceGuard guard(device);
    SWITCHYARD_BENCH_CUDA(cudaEventCreate(&event_));
}

Event::~Event() {
    if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}

}  // namespace switchyard::bench
