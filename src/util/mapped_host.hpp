// Zeroed pinned host memory that kernels write through a device alias and the host reads without
// a copy (error records, receive counts, trace slots). Free with cudaFreeHost(host).
#pragma once

#include <cstddef>
#include <cstring>

#include "util/cuda_check.hpp"

namespace switchyard::util {

template <typename T>
struct MappedHost {
    T* host = nullptr;
    T* device = nullptr;  // the same memory as the device addresses it
};

template <typename T>
MappedHost<T> allocate_mapped_host(size_t count) {
    void* memory = nullptr;
    SY_CUDA_CHECK(cudaHostAlloc(&memory, count * sizeof(T), cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(memory, 0, count * sizeof(T));
    void* alias = nullptr;
    SY_CUDA_CHECK(cudaHostGetDevicePointer(&alias, memory, 0));
    return {static_cast<T*>(memory), static_cast<T*>(alias)};
}

}  // namespace switchyard::util
