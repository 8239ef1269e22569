// See stream_pool.hpp.
#include "core/stream_pool.hpp"

#include <map>
#include <mutex>
#include <vector>

#include "core/cuda_check.hpp"

namespace switchyard::core {
namespace {

std::mutex& pool_mutex() {
    static std::mutex mutex;
    return mutex;
}

// Never destroyed: streams live as long as the process (and its CUDA contexts).
std::map<int, std::vector<cudaStream_t>>& free_streams() {
    static auto* pool = new std::map<int, std::vector<cudaStream_t>>();
    return *pool;
}

}  // namespace

cudaStream_t acquire_stream(int device) {
    {
        std::lock_guard<std::mutex> lock(pool_mutex());
        auto& free = free_streams()[device];
        if (!free.empty()) {
            cudaStream_t stream = free.back();
            free.pop_back();
            return stream;
        }
    }
    int previous = 0;
    SY_CUDA_CHECK(cudaGetDevice(&previous));
    SY_CUDA_CHECK(cudaSetDevice(device));
    cudaStream_t stream = nullptr;
    const cudaError_t status = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    SY_CUDA_CHECK(cudaSetDevice(previous));
    SY_CUDA_CHECK(status);
    return stream;
}

void release_stream(int device, cudaStream_t stream) {
    if (!stream) return;
    std::lock_guard<std::mutex> lock(pool_mutex());
    free_streams()[device].push_back(stream);
}

cudaStream_t shared_helper_stream(int device) {
    static std::mutex mutex;
    static auto* streams = new std::map<int, cudaStream_t>();  // never destroyed, like the pool
    std::lock_guard<std::mutex> lock(mutex);
    cudaStream_t& stream = (*streams)[device];
    if (!stream) stream = acquire_stream(device);
    return stream;
}

}  // namespace switchyard::core
