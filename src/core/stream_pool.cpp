// See stream_pool.hpp.
#include "core/stream_pool.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "util/cuda_check.hpp"

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

// Runs a 4-byte memset (an engine operation, like a kernel) and an event on `stream`, and waits.
// The target is one small allocation per device, made at the device's first stream.
cudaError_t warm_up_stream(int device, cudaStream_t stream) {
    static std::mutex mutex;
    static auto* targets = new std::map<int, void*>();  // never freed, like the streams
    void* target = nullptr;
    {
        std::lock_guard<std::mutex> lock(mutex);
        void*& slot = (*targets)[device];
        if (!slot) {
            const cudaError_t status = cudaMalloc(&slot, 16);
            if (status != cudaSuccess) return status;
        }
        target = slot;
    }
    cudaEvent_t event = nullptr;
    cudaError_t status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (status != cudaSuccess) return status;
    status = cudaMemsetAsync(target, 0, 4, stream);
    if (status == cudaSuccess) status = cudaEventRecord(event, stream);
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
    const cudaError_t destroyed = cudaEventDestroy(event);
    return status != cudaSuccess ? status : destroyed;
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
    cudaError_t status = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    // The first work queued on a new stream binds it to a hardware queue; do that now, while the
    // caller is between host barriers, not at its first op while a co-located peer's kernel
    // spins waiting for it (without this, a first barrier kernel started only when another rank's
    // kernel timed out).
    if (status == cudaSuccess) status = warm_up_stream(device, stream);
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
