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

}  // namespace switchyard::device
