// Row slices as the LL kernels move them: a slice is kSteps consecutive 512-byte steps of a row,
// 16 bytes per lane per step, so one warp keeps a whole slice of loads in flight at once.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <int kSteps>
struct LlSlice {
    uint4 chunk[kSteps];
};

// Loads slice `slice` of a kRowBytes-long row at `from` (lanes past the row's end hold zeros).
template <int kSteps, int64_t kRowBytes>
SY_DEVICE LlSlice<kSteps> ll_load_slice(const uint8_t* from, int slice, uint32_t lane) {
    LlSlice<kSteps> out;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const int64_t offset = (int64_t(slice) * kSteps + j) * 512 + lane * 16;
        out.chunk[j] = make_uint4(0, 0, 0, 0);
        if (offset < kRowBytes) out.chunk[j] = *reinterpret_cast<const uint4*>(from + offset);
    }
    return out;
}

// Stores what ll_load_slice loaded to the same slice of the row at `to`.
template <int kSteps, int64_t kRowBytes>
SY_DEVICE void ll_store_slice(uint8_t* to, int slice, uint32_t lane, const LlSlice<kSteps>& data) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
        const int64_t offset = (int64_t(slice) * kSteps + j) * 512 + lane * 16;
        if (offset < kRowBytes) *reinterpret_cast<uint4*>(to + offset) = data.chunk[j];
    }
}

#endif

}  // namespace switchyard::device
