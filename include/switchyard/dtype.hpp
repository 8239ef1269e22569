// Element types that cross the API, with their sizes and DLPack codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace switchyard {

enum class DType : uint8_t {
    kBFloat16,
    kFloat16,
    kFloat32,
    kFloat8E4M3,  // e4m3fn: the FP8 payload type of dispatch
    kInt32,
    kInt64,
    kUInt8,
    kBool,
};

constexpr size_t dtype_size(DType dtype) {
    switch (dtype) {
        case DType::kBFloat16:
        case DType::kFloat16:
            return 2;
        case DType::kFloat32:
        case DType::kInt32:
            return 4;
        case DType::kInt64:
            return 8;
        case DType::kFloat8E4M3:
        case DType::kUInt8:
        case DType::kBool:
            return 1;
    }
    return 0;
}

const char* dtype_name(DType dtype);

// DLPack type triple (code, bits, lanes) for a dtype, and back. Codes follow the DLPack ABI
// (kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6, kDLFloat8_e4m3fn = 10).
struct DLPackType {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
};
DLPackType to_dlpack_type(DType dtype);
// Throws InvalidArgument for a DLPack type Switchyard does not use.
DType from_dlpack_type(DLPackType type);

}  // namespace switchyard
