// Per-token, per-128-channel FP8 quantization (DESIGN.md §2) and its inverse.
//
// Every step is one IEEE fp32 operation written out explicitly, because the GPU kernels must
// reproduce these bits exactly: no fused or reassociated arithmetic, no fast math.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "detail.hpp"

namespace switchyard::reference {
namespace {

constexpr int kBlock = 128;
constexpr float kE4m3Max = 448.0f;
constexpr float kAmaxFloor = 1e-4f;  // keeps the scale away from zero for all-zero blocks

// The UE8M0 exponent byte of 2^ceil(log2(v)) for v = amax / 448 > 0, computed from the bits of v
// so no log2/ceil rounding can creep in. The result is the biased exponent 127 + ceil(log2 v).
// With the 1e-4 floor on amax, v >= 2.2e-7 is always normal; subnormal v is still handled exactly,
// and a v below 2^-127 (not representable as a byte) clamps to byte 0, i.e. 2^-127. A non-finite
// v (an infinite input value) yields 255, the UE8M0 NaN.
uint8_t ue8m0_exponent_byte(float v) {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const int exponent_field = static_cast<int>(bits >> 23) & 0xff;
    const uint32_t mantissa = bits & 0x7fffffu;
    if (exponent_field == 0xff) return 0xff;
    int ceil_log2 = 0;
    if (exponent_field == 0) {
        // v = mantissa * 2^-149: ceil(log2 v) = ceil(log2 mantissa) - 149.
        const int floor_log2 = 31 - std::countl_zero(mantissa);
        ceil_log2 = floor_log2 + (std::has_single_bit(mantissa) ? 0 : 1) - 149;
    } else {
        // v = 1.m * 2^(E-127): a power of two keeps its exponent, anything else takes the next one.
        ceil_log2 = exponent_field - 127 + (mantissa == 0 ? 0 : 1);
    }
    return static_cast<uint8_t>(std::clamp(ceil_log2 + 127, 0, 255));
}

// 2^(byte - 127) as fp32 (byte 0 gives the subnormal 2^-127); byte 255 is NaN.
float ue8m0_scale(uint8_t byte) {
    if (byte == 0xff) return std::nanf("");
    return std::ldexp(1.0f, static_cast<int>(byte) - 127);
}

}  // namespace

void quantize_token(const uint16_t* x_bf16, int hidden, ScaleFormat format, uint8_t* q_out,
                    uint32_t* scales_out) {
    if (format != ScaleFormat::kFloat32 && format != ScaleFormat::kUE8M0)
        detail::fail("quantize_token needs ScaleFormat::kFloat32 or kUE8M0, got kNone");
    std::fill(scales_out, scales_out + num_scale_words(hidden, format), 0u);
    for (int block = 0; block < num_scale_blocks(hidden); ++block) {
        const int begin = block * kBlock;
        const int end = std::min(hidden, begin + kBlock);  // the last block may be partial
        // fmaxf ignores NaN inputs, as the GPU's max does.
        float amax = kAmaxFloor;
        for (int c = begin; c < end; ++c) amax = std::fmax(amax, std::fabs(bf16_to_float(x_bf16[c])));

        if (format == ScaleFormat::kFloat32) {
            const float scale = amax / kE4m3Max;
            const float inverse = kE4m3Max / amax;  // one division, reused for the whole block
            for (int c = begin; c < end; ++c)
                q_out[c] = float_to_e4m3_satfinite(bf16_to_float(x_bf16[c]) * inverse);
            scales_out[block] = std::bit_cast<uint32_t>(scale);
        } else {
            const uint8_t byte = ue8m0_exponent_byte(amax / kE4m3Max);
            const float scale = ue8m0_scale(byte);
            // Dividing by a power of two is exact (short of underflow), so x / s is the true ratio.
            for (int c = begin; c < end; ++c)
                q_out[c] = float_to_e4m3_satfinite(bf16_to_float(x_bf16[c]) / scale);
            scales_out[block / 4] |= static_cast<uint32_t>(byte) << (8 * (block % 4));
        }
    }
}

float dequantize_value(uint8_t q, const uint32_t* scales, int channel, ScaleFormat format) {
    const int block = channel / kBlock;
    float scale = 0.0f;
    if (format == ScaleFormat::kFloat32) {
        scale = std::bit_cast<float>(scales[block]);
    } else if (format == ScaleFormat::kUE8M0) {
        scale = ue8m0_scale(static_cast<uint8_t>(scales[block / 4] >> (8 * (block % 4))));
    } else {
        detail::fail("dequantize_value needs ScaleFormat::kFloat32 or kUE8M0, got kNone");
    }
    return e4m3_to_float(q) * scale;
}

}  // namespace switchyard::reference
