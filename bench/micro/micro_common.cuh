// What the standalone microbenchmarks share: the error check and the device-side start gate.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                                        \
    do {                                                                                                   \
        cudaError_t error_ = (call);                                                                       \
        if (error_ != cudaSuccess) {                                                                       \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(error_)); \
            std::exit(1);                                                                                  \
        }                                                                                                  \
    } while (0)

// Holds a stream until the host sets *open (mapped host memory): every GPU's timed work, enqueued
// behind it, then starts together.
__global__ void gate_kernel(volatile int* open) {
    while (*open == 0) {
    }
}
