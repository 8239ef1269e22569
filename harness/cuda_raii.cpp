// See cuda_raii.hpp.
#include "harness/cuda_raii.hpp"

#include "core/stream_pool.hpp"

namespace switchyard::harness {

int usable_gpu_count(std::string* why) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        // Without a driver the runtime reports an error here: the normal case on a CPU machine.
        if (why) *why = std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
        (void)cudaGetLastError();  // later checks start clean
        return 0;
    }
    if (count == 0 && why) *why = "cudaGetDeviceCount found no device";
    return count;
}

std::string gpu_name(int device) {
    cudaDeviceProp properties{};
    SY_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    return properties.name;
}

DeviceGuard::DeviceGuard(int device) {
    SY_CUDA_CHECK(cudaGetDevice(&previous_));
    SY_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
    cudaSetDevice(previous_);
}

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
    if (bytes == 0) return;
    DeviceGuard guard(device);
    SY_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

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
    // cudaFree needs no current-device switch; a destructor must not throw, so errors are dropped
    // (the process is usually already reporting the error that got it here).
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
}

Stream::Stream(int device) : device_(device), stream_(core::acquire_stream(device)) {}

Stream::~Stream() {
    if (!stream_) return;
    // The pool's next owner queues behind whatever is left: leave nothing.
    cudaStreamSynchronize(stream_);
    core::release_stream(device_, stream_);
}

Event::Event(int device, unsigned flags) : device_(device) {
    DeviceGuard guard(device);
    SY_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
}

Event::~Event() {
    if (event_) cudaEventDestroy(event_);
}

}  // namespace switchyard::harness
