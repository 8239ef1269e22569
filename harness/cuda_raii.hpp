// Owning wrappers for the CUDA objects tests and the benchmark create, and the GPU count.
//
// Rules for ranks that share a GPU (DESIGN.md §4) these wrappers follow or leave to the caller:
//   - Stream comes from the library's stream pool (core/stream_pool.hpp): created once, warmed up
//     by a first operation before any op, returned to the pool instead of destroyed (rule 3).
//   - DeviceBuffer, DeviceArray and PinnedBuffer free their memory in their destructors, and
//     cudaFree / cudaFreeHost synchronize the device (rule 2): let them go out of scope only
//     between host barriers of the ranks, when no co-located peer's kernel can be waiting.
//   - DeviceArray's copies run on the legacy stream and are waited for (rule 5); its download is
//     a pageable copy, so call it only when no op is queued on the device behind it (rule 6).
// Every CUDA call is checked with SY_CUDA_CHECK (util/cuda_check.hpp): a failure throws CudaError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "util/cuda_check.hpp"

namespace switchyard::harness {

// CUDA devices this process can use; 0 without a driver or a device (the reason goes to `why`).
int usable_gpu_count(std::string* why = nullptr);

// The device's name ("NVIDIA H200").
std::string gpu_name(int device);

// Makes `device` current for the scope and restores the previous device on exit.
class DeviceGuard {
  public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int previous_ = 0;
};

// Device memory of `bytes` bytes on `device`.
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(int device, size_t bytes);
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : device_(other.device_),
          ptr_(std::exchange(other.ptr_, nullptr)),
          bytes_(std::exchange(other.bytes_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    char* bytes_ptr() const { return static_cast<char*>(ptr_); }
    size_t size() const { return bytes_; }
    int device() const { return device_; }
    // Frees now (see the rules above); the buffer is then empty.
    void release();

  private:
    int device_ = 0;
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A typed device array on the current device, with synchronous copies (see the rules above).
template <typename T>
class DeviceArray {
  public:
    DeviceArray() = default;
    explicit DeviceArray(size_t count) : count_(count) {
        int device = 0;
        SY_CUDA_CHECK(cudaGetDevice(&device));
        buffer_ = DeviceBuffer(device, count * sizeof(T));
    }
    explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) { upload(values); }

    T* data() const { return static_cast<T*>(buffer_.get()); }
    size_t size() const { return count_; }

    // Ranks' streams are non-blocking, so they do not wait for the legacy stream: each copy or fill
    // waits until its data has landed (a pageable upload may return before its DMA is done). Never
    // a device-wide sync: co-located ranks may be spinning.
    void upload(const std::vector<T>& values) {
        if (values.empty()) return;
        SY_CUDA_CHECK(cudaMemcpy(data(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    }
    std::vector<T> download() const {
        std::vector<T> values(count_);
        if (count_)
            SY_CUDA_CHECK(cudaMemcpy(values.data(), data(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
        return values;
    }
    void fill_bytes(int byte) {
        if (!count_) return;
        SY_CUDA_CHECK(cudaMemset(data(), byte, count_ * sizeof(T)));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    }

  private:
    DeviceBuffer buffer_;
    size_t count_ = 0;
};

// Page-locked host memory for `count` values of T: copies out of an op's results go through it
// (rule 6), and asynchronous uploads from it do not depend on the host buffer staying unchanged.
template <typename T>
class PinnedBuffer {
  public:
    PinnedBuffer() = default;
    explicit PinnedBuffer(size_t count) : count_(count) {
        if (count) SY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
    }
    ~PinnedBuffer() { release(); }
    PinnedBuffer(PinnedBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    T* data() const { return data_; }
    size_t size() const { return count_; }
    T& operator[](size_t i) const { return data_[i]; }
    // Frees now (cudaFreeHost synchronizes the device: see the rules above).
    void release() {
        if (data_) cudaFreeHost(data_);  // a destructor must not throw; nothing to do on failure
        data_ = nullptr;
        count_ = 0;
    }

  private:
    T* data_ = nullptr;
    size_t count_ = 0;
};

// A non-blocking stream of `device` from the library's pool: warmed up when the pool created it,
// handed back to the pool (after its work is done) instead of destroyed.
class Stream {
  public:
    explicit Stream(int device);
    ~Stream();
    Stream(Stream&& other) noexcept
        : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    Stream& operator=(Stream&&) = delete;

    cudaStream_t get() const { return stream_; }
    int device() const { return device_; }

  private:
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
};

// A CUDA event on `device` (timing enabled unless `flags` say otherwise).
class Event {
  public:
    explicit Event(int device, unsigned flags = cudaEventDefault);
    ~Event();
    Event(Event&& other) noexcept : device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    Event& operator=(Event&&) = delete;

    cudaEvent_t get() const { return event_; }
    int device() const { return device_; }

  private:
    int device_ = 0;
    cudaEvent_t event_ = nullptr;
};

}  // namespace switchyard::harness
