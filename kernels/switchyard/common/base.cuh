// Base definitions shared by device code (NVRTC) and host code (C++20).
//
// Device headers include nothing from the host standard library: under NVRTC the fixed-width
// integer types come from here. Host code that includes a layout header gets the same names from
// <cstdint>, so one struct definition serves both sides.
#pragma once

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <cstdint>
#endif

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SY_HOST_DEVICE __host__ __device__ __forceinline__
#define SY_DEVICE __device__ __forceinline__
#else
#define SY_HOST_DEVICE inline
#define SY_DEVICE inline
#endif

namespace switchyard::device {

SY_HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
SY_HOST_DEVICE constexpr int64_t align_up(int64_t a, int64_t b) {
    return ceil_div(a, b) * b;
}
SY_HOST_DEVICE constexpr int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
SY_HOST_DEVICE constexpr int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

// Segment lookup over ascending starts[0..count) with starts[0] <= value: the last index whose
// start is at most `value` (binary search: a linear walk over 128+ segments cost microseconds
// per lookup in the LL kernels).
SY_HOST_DEVICE int32_t last_start_at_or_below(const int32_t* starts, int32_t count, int64_t value) {
    int32_t first = 0, past = count;
    while (past - first > 1) {
        const int32_t middle = (first + past) / 2;
        if (starts[middle] <= value)
            first = middle;
        else
            past = middle;
    }
    return first;
}

}  // namespace switchyard::device
