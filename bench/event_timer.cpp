#include "event_timer.hpp"

#include "util/cuda_check.hpp"

namespace switchyard::bench {

void EventTimer::start(cudaStream_t stream) {
    SY_CUDA_CHECK(cudaEventRecord(start_.get(), stream));
}

void EventTimer::stop(cudaStream_t stream) {
    SY_CUDA_CHECK(cudaEventRecord(stop_.get(), stream));
}

double EventTimer::elapsed_us() const {
    SY_CUDA_CHECK(cudaEventSynchronize(stop_.get()));
    float ms = 0.0f;
    SY_CUDA_CHECK(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
    return static_cast<double>(ms) * 1000.0;
}

}  // namespace switchyard::bench
