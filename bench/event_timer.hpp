// Times one span of GPU work on a stream with a pair of CUDA events.
//
// The events are reused across iterations: start(), stop(), then elapsed_us() (which waits for
// the stop event) before the next start().
#pragma once

#include <cuda_runtime_api.h>

#include "harness/cuda_raii.hpp"

namespace switchyard::bench {

class EventTimer {
  public:
    explicit EventTimer(int device) : start_(device), stop_(device) {}

    void start(cudaStream_t stream);
    void stop(cudaStream_t stream);
    // Microseconds between the two records; blocks until the stop event has completed.
    double elapsed_us() const;
    // The start event, for other streams that must not begin before the timed span does.
    cudaEvent_t start_event() const { return start_.get(); }

  private:
    harness::Event start_;
    harness::Event stop_;
};

}  // namespace switchyard::bench
