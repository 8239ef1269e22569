// Owning wrappers for the CUDA objects the benchmark allocates (device memory, streams, events).
//
// The benchmarks throw on the first failed call; these wrappers make sure the memory of a
// half-finished measurement is released before the next one starts (1 GiB buffers add up).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace switchyard::bench {

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

class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(int device, size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get() const { return ptr_; }
    char* bytes_ptr() const { return static_cast<char*>(ptr_); }
    size_t size() const { return bytes_; }
    int device() const { return device_; }

  private:
    void release();
    int device_ = 0;
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A non-blocking stream on one device (non-blocking so the legacy default stream never
// serializes it against other work), warmed up by a first memset when created. Create the streams
// a run needs once, before any op, and keep them: with several ranks on one GPU, streams created
// and destroyed between measurements end up sharing hardware queues (design notes §2, rule 3).
class Stream {
  public:
    explicit Stream(int device);
    ~Stream();
    Stream(Stream&& other) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    Stream& operator=(Stream&&) = delete;

    cudaStream_t get() const { return stream_; }
    int device() const { return device_; }

  private:
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
};

// A timing event on one device.
class Event {
  public:
    explicit Event(int device);
    ~Event();
    Event(Event&& other) noexcept;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    Event& operator=(Event&&) = delete;

    cudaEvent_t get() const { return event_; }
    int device() const { return device_; }

  private:
    int device_ = 0;
    cudaEvent_t event_ = nullptr;
};

}  // namespace switchyard::bench
