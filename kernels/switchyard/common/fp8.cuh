// FP8/bf16 numerics of the kernels, bit-exact with the CPU reference (reference.hpp, DESIGN.md §2):
// bf16 <-> fp32, e4m3 quantization with fp32 or UE8M0 scales, round-to-nearest fp32 arithmetic.
// Every operation is one PTX instruction with an explicit rounding mode, so the compiler can
// neither contract nor approximate it (no fast math, no FMA contraction of a multiply).
#pragma once

#include "switchyard/common/base.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace switchyard::device::fp8 {

constexpr float kE4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-4f;
constexpr int kBlockChannels = 128;

SY_DEVICE float bits_to_float(uint32_t bits) {
    float value;
    asm("mov.b32 %0, %1;" : "=f"(value) : "r"(bits));
    return value;
}

SY_DEVICE uint32_t float_to_bits(float value) {
    uint32_t bits;
    asm("mov.b32 %0, %1;" : "=r"(bits) : "f"(value));
    return bits;
}

// The low (even channel) and high (odd channel) bf16 of a packed pair, as fp32 (exact).
SY_DEVICE float bf16_low(uint32_t pair) {
    return bits_to_float(pair << 16);
}
SY_DEVICE float bf16_high(uint32_t pair) {
    return bits_to_float(pair & 0xffff0000u);
}

SY_DEVICE float mul_rn(float a, float b) {
    float d;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

SY_DEVICE float div_rn(float a, float b) {
    float d;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

SY_DEVICE float fma_rn(float a, float b, float c) {
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

SY_DEVICE float abs_f32(float a) {
    float d;
    asm("abs.f32 %0, %1;" : "=f"(d) : "f"(a));
    return d;
}

// max that ignores a NaN operand (as fmaxf and std::fmax).
SY_DEVICE float max_f32(float a, float b) {
    float d;
    asm("max.f32 %0, %1, %2;" : "=f"(d) : "f"(a), "f"(b));
    return d;
}

// Two fp32 -> two e4m3 (round to nearest even, finite values saturate to +-448, NaN -> 0x7f):
// `low` lands in the low byte (the lower address).
SY_DEVICE uint32_t e4m3x2(float low, float high) {
    uint16_t packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(packed) : "f"(high), "f"(low));
    return packed;
}

// Two fp32 -> two bf16 (round to nearest even): `low` in the low half.
SY_DEVICE uint32_t bf16x2(float low, float high) {
    uint32_t packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(high), "f"(low));
    return packed;
}

// Biased exponent byte of 2^ceil(log2(v)) for v > 0, from the bits of v (exact; clamps to
// [0, 255], non-finite v -> 255), as the reference computes it.
SY_DEVICE uint32_t ue8m0_byte(float v) {
    const uint32_t bits = float_to_bits(v);
    const int exponent_field = int(bits >> 23) & 0xff;
    const uint32_t mantissa = bits & 0x7fffffu;
    if (exponent_field == 0xff) return 0xffu;
    int ceil_log2;
    if (exponent_field == 0) {
        if (mantissa == 0) return 0u;  // v == 0 cannot happen (amax >= 1e-4); clamp like the reference
        const int floor_log2 = 31 - __clz(mantissa);
        ceil_log2 = floor_log2 + (__popc(mantissa) == 1 ? 0 : 1) - 149;
    } else {
        ceil_log2 = exponent_field - 127 + (mantissa == 0 ? 0 : 1);
    }
    const int byte = ceil_log2 + 127;
    return uint32_t(byte < 0 ? 0 : (byte > 255 ? 255 : byte));
}

// 2^(byte - 127) as fp32 (byte 0: the subnormal 2^-127; byte 255: NaN).
SY_DEVICE float ue8m0_scale(uint32_t byte) {
    if (byte == 0xffu) return bits_to_float(0x7fc00000u);
    if (byte == 0u) return bits_to_float(0x00400000u);
    return bits_to_float(byte << 23);
}

// Eight bf16 channels (a uint4) quantized with the block scale: fp32 scales multiply by
// 448 / amax, UE8M0 divides by the power-of-two scale. Returns the eight e4m3 bytes.
template <bool kUe8m0>
SY_DEVICE uint2 quantize8(const uint4& raw, float factor) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t bytes[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float low = bf16_low(words[i]), high = bf16_high(words[i]);
        bytes[i] = kUe8m0 ? e4m3x2(div_rn(low, factor), div_rn(high, factor))
                          : e4m3x2(mul_rn(low, factor), mul_rn(high, factor));
    }
    uint2 packed;
    packed.x = bytes[0] | (bytes[1] << 16);
    packed.y = bytes[2] | (bytes[3] << 16);
    return packed;
}

// max(|x|) over eight bf16 channels, starting from `amax`.
SY_DEVICE float amax8(const uint4& raw, float amax) {
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        amax = max_f32(amax, abs_f32(bf16_low(words[i])));
        amax = max_f32(amax, abs_f32(bf16_high(words[i])));
    }
    return amax;
}

}  // namespace switchyard::device::fp8

#endif
