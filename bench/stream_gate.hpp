// Holds a stream's work back until the host has enqueued all of it.
//
// An event pair around an op on an idle stream also measures the host: the GPU reaches the start
// event, then waits while the host validates, allocates and launches. In an engine the CPU runs
// ahead of the GPU and that time is hidden, so the benches close a gate first (a host function
// that blocks the stream), enqueue the barrier, the events and the op, then open it: the GPU runs
// them back to back and the events measure the GPU's time alone. Host time is reported apart.
#pragma once

#include <atomic>

#include <cuda_runtime_api.h>

namespace switchyard::bench {

class StreamGate {
  public:
    StreamGate() = default;
    StreamGate(const StreamGate&) = delete;
    StreamGate& operator=(const StreamGate&) = delete;
    // Opens a gate still closed, so no stream stays blocked behind a failed iteration.
    ~StreamGate();

    // Work enqueued on `stream` after this waits for open(). One close per open.
    void close(cudaStream_t stream);
    void open();

  private:
    static void wait_until_open(void* gate);
    std::atomic<bool> open_{true};
};

}  // namespace switchyard::bench
