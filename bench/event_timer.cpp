#include "event_timer.hpp"

#include "cuda_check.hpp"

namespace switchyard::bench {

void EventTimer::start(cudaStream_t stream) {
    SWITCHYARD_BENCH_CUDA(cudaEventRecord(start_.get(), stream));
}

void EventTimer::stop(cudaStream_t stream) {
    SWITCHYARD_BENCH_CUDA(cudaEventRecord(stop_.get(), stream));
}

double EventTimer::elapsed_us() const {
    SWITCHYARD_BENCH_CUDA(cudaEventSynchronize(stop_.get()));
    float ms = 0.0f;
    SWITCHYARD_BENCH_CUDA(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
    return static_cast<double>(ms) * 1000.0;
}

}  // namespace switchyard::bench
