// Evicts the L2 cache before a timed iteration, so every iteration reads its inputs from HBM as
// the real workload would (H200's L2 is 60 MiB; the payloads of small cases would otherwise stay
// resident and the numbers would be too good).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

#include "harness/cuda_raii.hpp"

namespace switchyard::bench {

class L2Flusher {
  public:
    static constexpr size_t kDefaultBytes = size_t{256} << 20;  // several times any L2 we target

    explicit L2Flusher(int device, size_t bytes = kDefaultBytes) : scratch_(device, bytes) {}

    // Enqueues a write of the whole scratch buffer on `stream` (a stream of the same device).
    // The byte value changes each time so no layer can skip the write as redundant.
    void flush(cudaStream_t stream);

  private:
    harness::DeviceBuffer scratch_;
    int value_ = 0;
};

}  // namespace switchyard::bench
