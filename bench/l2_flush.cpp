#include "l2_flush.hpp"

#include "util/cuda_check.hpp"

namespace switchyard::bench {

void L2Flusher::flush(cudaStream_t stream) {
    value_ = (value_ + 1) & 0xff;
    harness::DeviceGuard guard(scratch_.device());  // memsets run on the current device's context
    SY_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), value_, scratch_.size(), stream));
}

}  // namespace switchyard::bench
