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
    for (size_t i = 0; i < streams.size(); ++i) {
        SY_CUDA_CHECK(cudaEventRecord(marks_[i].get(), streams[i]));
    }
    // Waiting on another device's event is legal; it is how the streams meet.
    for (size_t i = 0; i < streams.size(); ++i) {
        for (size_t j = 0; j < streams.size(); ++j) {
            if (i != j) SY_CUDA_CHECK(cudaStreamWaitEvent(streams[i], marks_[j].get(), 0));
        }
    }
}

void synchronize_devices(const std::vector<int>& devices) {
    for (int device : devices) {
        harness::DeviceGuard guard(device);
        SY_CUDA_CHECK(cudaDeviceSynchronize());
    }
}

}  // namespace switchyard::bench
