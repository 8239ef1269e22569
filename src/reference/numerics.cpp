// Scalar conversions between fp32, bf16 and fp8 e4m3fn, done with plain integer and exact fp32
// arithmetic so the result does not depend on the host's floating-point environment.
#include <bit>
#include <cmath>
#include <cstdint>

#include "switchyard/reference.hpp"

namespace switchyard::reference {

float bf16_to_float(uint16_t bits) {
    return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t float_to_bf16(float value) {
    const uint32_t bits = std::bit_cast<uint32_t>(value);
    if (std::isnan(value)) {
        // Keep sign and the top payload bits; set the quiet bit so a signalling NaN whose payload
        // lives only in the low 16 bits cannot turn into an infinity.
        return static_cast<uint16_t>((bits >> 16) | 0x0040u);
    }
    // Round to nearest even on the 16 dropped bits. A carry out of the mantissa correctly bumps
    // the exponent (and the largest finite values correctly overflow to infinity).
    const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN.
// Normal (exponent field E >= 1): 2^(E-7) * (1 + m/8). Subnormal (E = 0): m * 2^-9.
float e4m3_to_float(uint8_t bits) {
    const bool negative = (bits & 0x80u) != 0;
    const int exponent_field = (bits >> 3) & 0xf;
    const int mantissa = bits & 0x7;
    if (exponent_field == 0xf && mantissa == 0x7) return std::nanf("");
    float magnitude = exponent_field == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                          : std::ldexp(static_cast<float>(8 + mantissa), exponent_field - 10);
    return negative ? -magnitude : magnitude;
}

uint8_t float_to_e4m3_satfinite(float value) {
    if (std::isnan(value)) return 0x7f;  // what cvt.rn.satfinite.e4m3x2.f32 returns, any sign
    const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
    const float magnitude = std::fabs(value);
    // Anything above the largest finite value (448) rounds to 448 or to a value above it, which
    // satfinite clamps to 448; infinities too.
    if (magnitude >= 448.0f) return sign | 0x7e;

    // The spacing of e4m3 values around `magnitude`: 2^-9 in the subnormal range (below the
    // smallest normal 2^-6), else 2^(floor(log2 magnitude) - 3). Both are powers of two, so
    // magnitude / step is exact and std::nearbyint does the round-to-nearest-even (the default
    // rounding mode, which nothing in this library changes).
    int exponent = 0;  // magnitude = f * 2^exponent with f in [0.5, 1)
    std::frexp(magnitude, &exponent);
    const int step_log2 = magnitude < 0x1p-6f ? -9 : (exponent - 1) - 3;
    const float steps = std::nearbyint(std::ldexp(magnitude, -step_log2));
    const float rounded = std::ldexp(steps, step_log2);  // exact, and <= 448 (see above)

    // Encode `rounded` (a value of the e4m3 grid, possibly the first of the next binade).
    if (rounded < 0x1p-6f) return sign | static_cast<uint8_t>(std::ldexp(rounded, 9));  // m * 2^-9
    std::frexp(rounded, &exponent);
    const int unbiased = exponent - 1;  // rounded in [2^u, 2^(u+1))
    const int mantissa = static_cast<int>(std::ldexp(rounded, 3 - unbiased)) - 8;  // 0..7
    return sign | static_cast<uint8_t>(((unbiased + 7) << 3) | mantissa);
}

}  // namespace switchyard::reference
