// bf16 / fp32 / e4m3 conversions and per-128-channel FP8 quantization (DESIGN.md §2), written
// with PTX so NVRTC needs no toolkit header. Results match the CPU reference bit for bit:
// IEEE division and multiplication (__fdiv_rn/__fmul_rn, never fast math), cvt round-to-nearest.
#pragma once

#include "switchyard/common/base.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace switchyard::device {

SY_DEVICE float bf16_bits_to_float(uint32_t bits16) {
    return __uint_as_float(bits16 << 16);
}

SY_DEVICE uint32_t float_to_bf16_bits(float value) {
    uint16_t bits;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
    return bits;
}

// Two floats to two e4m3 bytes (round to nearest even, saturate to +-448, NaN -> 0x7f):
// `low` lands in bits 0..7, `high` in bits 8..15.
SY_DEVICE uint32_t floats_to_e4m3x2(float low, float high) {
    uint16_t packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(high), "f"(low));
    return packed;
}

SY_DEVICE float e4m3_bits_to_float(uint32_t byte) {
    uint32_t half2;
    asm("{\n .reg .b16 b;\n cvt.u16.u32 b, %1;\n cvt.rn.f16x2.e4m3x2 %0, b;\n}\n" : "=r"(half2) : "r"(byte));
    float value;
    asm("{\n .reg .f16 h;\n mov.b32 {h, _}, %1;\n cvt.f32.f16 %0, h;\n}\n" : "=f"(value) : "r"(half2));
    return value;
}

// The scale of one 128-channel block for a given |x| maximum, and the factor that quantizes.
struct Fp8BlockScale {
    uint32_t stored;  // fp32 bits of the scale, or the UE8M0 exponent byte
    float multiply;   // fp32 path: q = x * multiply
    float divide;     // UE8M0 path: q = x / divide (a power of two)
};

SY_DEVICE Fp8BlockScale fp8_block_scale(float amax, bool ue8m0) {
    amax = fmaxf(amax, 1e-4f);
    Fp8BlockScale scale;
    if (!ue8m0) {
        scale.stored = __float_as_uint(__fdiv_rn(amax, 448.0f));
        scale.multiply = __fdiv_rn(448.0f, amax);
        scale.divide = 1.0f;
    } else {
        // s = 2^ceil(log2(amax / 448)), from the bits of the (normal, since amax >= 1e-4) quotient.
        const uint32_t bits = __float_as_uint(__fdiv_rn(amax, 448.0f));
        const int32_t exponent = int32_t((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0u ? 1 : 0);
        scale.stored = uint32_t(exponent + 127);
        scale.divide = __uint_as_float(uint32_t(exponent + 127) << 23);
        scale.multiply = 1.0f;
    }
    return scale;
}

SY_DEVICE float fp8_scaled(float x, const Fp8BlockScale& scale, bool ue8m0) {
    return ue8m0 ? __fdiv_rn(x, scale.divide) : __fmul_rn(x, scale.multiply);
}

}  // namespace switchyard::device

#endif
