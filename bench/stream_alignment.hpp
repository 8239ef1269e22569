// Lines up the start of a timed iteration across devices.
//
// One host thread drives every GPU, so work is enqueued on GPU 0 before GPU 1. To make the ranks
// start together anyway, each stream records a mark after its preparatory work (the L2 flush, which
// also gives the host time to enqueue everything) and then waits for the marks of all other
// streams: no stream begins the timed work before every stream is ready. Where each rank has a host
// thread of its own, each records its mark, the threads meet, and each then waits for the others'.
#pragma once

#include <vector>

#include <cuda_runtime_api.h>

#include "harness/cuda_raii.hpp"

namespace switchyard::bench {

class StreamAligner {
  public:
    explicit StreamAligner(const std::vector<int>& devices);

    // streams[i] must belong to devices[i] of the constructor.
    void align(const std::vector<cudaStream_t>& streams);

    // The two halves, for one thread per stream: every stream's mark must be recorded (mark) before
    // any stream waits for the others (wait_for_others), since a wait takes the latest record.
    void mark(size_t index, cudaStream_t stream);
    void wait_for_others(size_t index, cudaStream_t stream);

  private:
    std::vector<harness::Event> marks_;
};

// cudaDeviceSynchronize on each device: nothing from a previous iteration is still running.
void synchronize_devices(const std::vector<int>& devices);

}  // namespace switchyard::bench
