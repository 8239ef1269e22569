// The high-throughput kernels' view of the numerics in fp8.cuh: per-lane conversions and the
// per-128-channel FP8 block scale (DESIGN.md §2), bit-exact with the CPU reference.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/fp8.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace switchyard::device {

SY_DEVICE float bf16_bits_to_float(uint32_t bits16) {
    return fp8::bf16_low(bits16);
}

SY_DEVICE uint32_t float_to_bf16_bits(float value) {
    return fp8::bf16x2(value, 0.0f) & 0xffffu;
}

// Two floats to two e4m3 bytes: `low` lands in bits 0..7, `high` in bits 8..15.
SY_DEVICE uint32_t floats_to_e4m3x2(float low, float high) {
    return fp8::e4m3x2(low, high);
}

// The scale of one 128-channel block for a given |x| maximum, and the factor that quantizes.
struct Fp8BlockScale {
    uint32_t stored;  // fp32 bits of the scale, or the UE8M0 exponent byte
    float multiply;   // fp32 path: q = x * multiply
    float divide;     // UE8M0 path: q = x / divide (a power of two)
};

SY_DEVICE Fp8BlockScale fp8_block_scale(float amax, bool ue8m0) {
    amax = fp8::max_f32(amax, fp8::kAmaxFloor);
    Fp8BlockScale scale;
    if (!ue8m0) {
        scale.stored = fp8::float_to_bits(fp8::div_rn(amax, fp8::kE4m3Max));
        scale.multiply = fp8::div_rn(fp8::kE4m3Max, amax);
        scale.divide = 1.0f;
    } else {
        // s = 2^ceil(log2(amax / 448)), exactly, from the bits of the quotient.
        scale.stored = fp8::ue8m0_byte(fp8::div_rn(amax, fp8::kE4m3Max));
        scale.divide = fp8::ue8m0_scale(scale.stored);
        scale.multiply = 1.0f;
    }
    return scale;
}

SY_DEVICE float fp8_scaled(float x, const Fp8BlockScale& scale, bool ue8m0) {
    return ue8m0 ? fp8::div_rn(x, scale.divide) : fp8::mul_rn(x, scale.multiply);
}

}  // namespace switchyard::device

#endif
