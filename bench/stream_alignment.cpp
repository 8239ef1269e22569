#include "stream_alignment.hpp"

#include "util/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

StreamAligner::StreamAligner(const std::vector<int>& devices) {
    marks_.reserve(devices.size());
    for (int device : devices) marks_.emplace_back(device);
}

void StreamAligner::align(const std::vector<cudaStream_t>& streams) {
    if (streams.size() != marks_.size()) {
        throw InvalidArgument("StreamAligner::align: got " + std::to_string(streams.size()) +
                              " streams for " + std::to_string(marks_.size()) + " devices");
    }
    for (size_t i = 0; i < streams.size(); ++i) mark(i, streams[i]);
    for (size_t i = 0; i < streams.size(); ++i) wait_for_others(i, streams[i]);
}

void StreamAligner::mark(size_t index, cudaStream_t stream) {
    SY_CUDA_CHECK(cudaEventRecord(marks_.at(index).get(), stream));
}

void StreamAligner::wait_for_others(size_t index, cudaStream_t stream) {
    // Waiting on another device's event is legal; it is how the streams meet.
    for (size_t j = 0; j < marks_.size(); ++j)
        if (j != index) SY_CUDA_CHECK(cudaStreamWaitEvent(stream, marks_[j].get(), 0));
}

void synchronize_devices(const std::vector<int>& devices) {
    for (int device : devices) {
        harness::DeviceGuard guard(device);
        SY_CUDA_CHECK(cudaDeviceSynchronize());
    }
}

}  // namespace switchyard::bench
