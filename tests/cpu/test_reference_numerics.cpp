// Scalar conversions (bf16, e4m3) and FP8 quantization of the CPU reference.
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard::reference;

namespace {

uint32_t bits_of(float v) {
    return std::bit_cast<uint32_t>(v);
}

// bf16 bits of a value that is exactly representable in bf16 (test inputs only).
uint16_t exact_bf16(float v) {
    if ((bits_of(v) & 0xffffu) != 0)
        ::switchyard::testing::fail(__FILE__, __LINE__, "test value not exact in bf16");
    return static_cast<uint16_t>(bits_of(v) >> 16);
}

// Independent e4m3 encoder for the checks: the nearest of the 254 finite codes by exhaustive
// search, ties to the code with an even mantissa, then clamped to ±448 (satfinite).
uint8_t brute_force_e4m3(float v) {
    if (std::isnan(v)) return 0x7f;
    const uint8_t sign = std::signbit(v) ? 0x80 : 0;
    const double a = std::fabs(static_cast<double>(v));
    if (a >= 448.0) return sign | 0x7e;
    int best = 0;
    double best_error = INFINITY;
    for (int code = 0; code <= 0x7e; ++code) {
        const double error = std::fabs(static_cast<double>(e4m3_to_float(static_cast<uint8_t>(code))) - a);
        if (error < best_error || (error == best_error && (code & 1) == 0)) {
            best = code;
            best_error = error;
        }
    }
    return sign | static_cast<uint8_t>(best);
}

}  // namespace

// ----- bf16 -----------------------------------------------------------------------------------

SY_TEST(bf16, known_values_round_to_nearest_even) {
    SY_CHECK_EQ(float_to_bf16(1.0f), 0x3f80);
    SY_CHECK_EQ(float_to_bf16(-2.0f), 0xc000);
    SY_CHECK_EQ(float_to_bf16(-0.0f), 0x8000);
    SY_CHECK_EQ(float_to_bf16(0.0f), 0x0000);
    // 1 + 2^-8 lies halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): ties go to even.
    SY_CHECK_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    // 1 + 3*2^-8 lies halfway between 0x3f81 and 0x3f82 (even).
    SY_CHECK_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    // Just above the halfway point rounds up.
    SY_CHECK_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    // 257 lies halfway between 256 and 258: 256 (mantissa even).
    SY_CHECK_EQ(float_to_bf16(257.0f), 0x4380);
    SY_CHECK_EQ(float_to_bf16(INFINITY), 0x7f80);
    SY_CHECK_EQ(float_to_bf16(-INFINITY), 0xff80);
    // The largest float is above bf16's largest finite value plus half an ulp: infinity.
    SY_CHECK_EQ(float_to_bf16(3.4028235e38f), 0x7f80);
    SY_CHECK_EQ(bf16_to_float(0x3f80), 1.0f);
    SY_CHECK_EQ(bf16_to_float(0xc0a0), -5.0f);
}

SY_TEST(bf16, nan_stays_nan) {
    SY_CHECK_EQ(float_to_bf16(std::bit_cast<float>(0x7fc00000u)), 0x7fc0);
    SY_CHECK_EQ(float_to_bf16(std::bit_cast<float>(0xffc00000u)), 0xffc0);
    // A signalling NaN whose payload sits only in the low bits must not become infinity.
    const uint16_t quieted = float_to_bf16(std::bit_cast<float>(0x7f800001u));
    SY_CHECK(std::isnan(bf16_to_float(quieted)));
    SY_CHECK_EQ(quieted, 0x7fc0);
}

SY_TEST(bf16, every_code_round_trips) {
    for (uint32_t code = 0; code <= 0xffff; ++code) {
        const float v = bf16_to_float(static_cast<uint16_t>(code));
        SY_CHECK_EQ(bits_of(v), code << 16);
        if (std::isnan(v))
            SY_CHECK(std::isnan(bf16_to_float(float_to_bf16(v))));
        else
            SY_CHECK_EQ(float_to_bf16(v), code);
    }
}

// ----- e4m3 -----------------------------------------------------------------------------------

SY_TEST(e4m3, decode_known_codes) {
    SY_CHECK_EQ(e4m3_to_float(0x00), 0.0f);
    SY_CHECK(std::signbit(e4m3_to_float(0x80)));
    SY_CHECK_EQ(e4m3_to_float(0x01), 0x1p-9f);      // smallest subnormal
    SY_CHECK_EQ(e4m3_to_float(0x07), 7 * 0x1p-9f);  // largest subnormal
    SY_CHECK_EQ(e4m3_to_float(0x08), 0x1p-6f);      // smallest normal
    SY_CHECK_EQ(e4m3_to_float(0x38), 1.0f);         // exponent 7 = bias
    SY_CHECK_EQ(e4m3_to_float(0x3f), 1.875f);
    SY_CHECK_EQ(e4m3_to_float(0x44), 3.0f);
    SY_CHECK_EQ(e4m3_to_float(0x78), 256.0f);
    SY_CHECK_EQ(e4m3_to_float(0x7e), 448.0f);  // largest finite
    SY_CHECK_EQ(e4m3_to_float(0xfe), -448.0f);
    SY_CHECK(std::isnan(e4m3_to_float(0x7f)));
    SY_CHECK(std::isnan(e4m3_to_float(0xff)));
}

SY_TEST(e4m3, every_code_round_trips) {
    for (int code = 0; code < 256; ++code) {
        const float v = e4m3_to_float(static_cast<uint8_t>(code));
        if ((code & 0x7f) == 0x7f) {
            SY_CHECK(std::isnan(v));
            SY_CHECK_EQ(float_to_e4m3_satfinite(v), 0x7f);
        } else {
            SY_CHECK_EQ(static_cast<int>(float_to_e4m3_satfinite(v)), code);
        }
    }
}

SY_TEST(e4m3, midpoints_round_to_even) {
    // Between consecutive finite codes c and c+1 (same sign), the midpoint goes to the code whose
    // mantissa LSB (bit 0) is 0; one float ulp either side goes to the nearer code.
    for (int sign = 0; sign <= 0x80; sign += 0x80) {
        for (int c = 0; c < 0x7e; ++c) {
            const uint8_t lo = static_cast<uint8_t>(sign | c), hi = static_cast<uint8_t>(sign | (c + 1));
            const float mid = (e4m3_to_float(lo) + e4m3_to_float(hi)) / 2;  // exact in fp32
            const uint8_t even = (c & 1) == 0 ? lo : hi;
            SY_CHECK_EQ(static_cast<int>(float_to_e4m3_satfinite(mid)), static_cast<int>(even));
            const float toward_lo = std::nextafter(mid, e4m3_to_float(lo));
            const float toward_hi = std::nextafter(mid, e4m3_to_float(hi));
            SY_CHECK_EQ(static_cast<int>(float_to_e4m3_satfinite(toward_lo)), static_cast<int>(lo));
            SY_CHECK_EQ(static_cast<int>(float_to_e4m3_satfinite(toward_hi)), static_cast<int>(hi));
        }
    }
    // Hand-picked: halfway between 0 and 2^-9 is 0 (even); 7.5 * 2^-9 goes to 2^-6 (0x08).
    SY_CHECK_EQ(float_to_e4m3_satfinite(0x1p-10f), 0x00);
    SY_CHECK_EQ(float_to_e4m3_satfinite(-0x1p-10f), 0x80);
    SY_CHECK_EQ(float_to_e4m3_satfinite(7.5f * 0x1p-9f), 0x08);
    SY_CHECK_EQ(float_to_e4m3_satfinite(1.0625f), 0x38);  // between 1 and 1.125: to 1 (even)
    SY_CHECK_EQ(float_to_e4m3_satfinite(1.1875f), 0x3a);  // between 1.125 and 1.25: to 1.25 (even)
    SY_CHECK_EQ(float_to_e4m3_satfinite(1e-45f), 0x00);   // fp32 subnormal
}

SY_TEST(e4m3, saturation_and_nan) {
    SY_CHECK_EQ(float_to_e4m3_satfinite(448.0f), 0x7e);
    SY_CHECK_EQ(float_to_e4m3_satfinite(449.0f), 0x7e);
    SY_CHECK_EQ(float_to_e4m3_satfinite(464.0f), 0x7e);  // halfway to 480: even, 448
    SY_CHECK_EQ(float_to_e4m3_satfinite(470.0f), 0x7e);  // rounds to 480, clamped to 448
    SY_CHECK_EQ(float_to_e4m3_satfinite(1e30f), 0x7e);
    SY_CHECK_EQ(float_to_e4m3_satfinite(INFINITY), 0x7e);
    SY_CHECK_EQ(float_to_e4m3_satfinite(-INFINITY), 0xfe);
    SY_CHECK_EQ(float_to_e4m3_satfinite(-500.0f), 0xfe);
    SY_CHECK_EQ(float_to_e4m3_satfinite(-0.0f), 0x80);
    SY_CHECK_EQ(float_to_e4m3_satfinite(std::nanf("")), 0x7f);
    SY_CHECK_EQ(float_to_e4m3_satfinite(-std::nanf("")), 0x7f);
}

SY_TEST(e4m3, random_values_match_brute_force) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> linear(-520.0f, 520.0f);
    std::uniform_real_distribution<float> log_magnitude(-14.0f, 9.5f);
    for (int i = 0; i < 100000; ++i) {
        float v = linear(rng);
        if (i % 2) v = std::copysign(std::exp2(log_magnitude(rng)), v);
        SY_CHECK_MSG(float_to_e4m3_satfinite(v) == brute_force_e4m3(v), "value " << v);
    }
}

// ----- FP8 quantization -----------------------------------------------------------------------

SY_TEST(quantize, float32_scale_hand_worked) {
    // amax = 448: scale 1, multiplier 448/448 = 1, so q is the e4m3 code of x itself.
    std::vector<uint16_t> x(128, 0);
    x[0] = exact_bf16(448.0f);
    x[1] = exact_bf16(-1.0f);
    x[2] = exact_bf16(3.0f);
    std::vector<uint8_t> q(128, 0xaa);
    uint32_t scale = 0;
    quantize_token(x.data(), 128, ScaleFormat::kFloat32, q.data(), &scale);
    SY_CHECK_EQ(scale, 0x3f800000u);
    SY_CHECK_EQ(q[0], 0x7e);
    SY_CHECK_EQ(q[1], 0xb8);
    SY_CHECK_EQ(q[2], 0x44);
    SY_CHECK_EQ(q[3], 0x00);
    SY_CHECK_EQ(dequantize_value(q[1], &scale, 1, ScaleFormat::kFloat32), -1.0f);

    // amax = 1 (second of two blocks, the second partial: H = 130): multiplier 448, 0.5 -> 224 = 0x76.
    std::vector<uint16_t> y(130, 0);
    y[128] = exact_bf16(1.0f);
    y[129] = exact_bf16(0.5f);
    std::vector<uint8_t> qy(130);
    uint32_t scales[2] = {};
    quantize_token(y.data(), 130, ScaleFormat::kFloat32, qy.data(), scales);
    SY_CHECK_EQ(scales[1], bits_of(1.0f / 448.0f));
    SY_CHECK_EQ(qy[128], 0x7e);
    SY_CHECK_EQ(qy[129], 0x76);
    // The all-zero first block uses the amax floor 1e-4.
    SY_CHECK_EQ(scales[0], bits_of(1e-4f / 448.0f));
    SY_CHECK_EQ(qy[0], 0x00);
}

SY_TEST(quantize, ue8m0_hand_worked) {
    // H = 520: five blocks (the last has 8 channels), packed into two words.
    std::vector<uint16_t> x(520, 0);
    x[0] = exact_bf16(1.0f);     // 1/448 in (2^-9, 2^-8]  -> 2^-8, byte 119; 1/2^-8 = 256 -> 0x78
    x[128] = exact_bf16(56.0f);  // 56/448 = 2^-3 exactly -> byte 124; 56/2^-3 = 448 -> 0x7e
    // block 2 all zero: 1e-4/448 = 2.23e-7 in (2^-23, 2^-22] -> byte 105
    x[384] = exact_bf16(-3.0f);  // 3/448 in (2^-8, 2^-7] -> byte 120; -3/2^-7 = -384 -> 0xfc
    x[512] = exact_bf16(0.5f);   // 0.5/448 in (2^-10, 2^-9] -> byte 118; 0.5/2^-9 = 256 -> 0x78
    std::vector<uint8_t> q(520);
    uint32_t words[2] = {0xdeadbeef, 0xdeadbeef};
    SY_CHECK_EQ(num_scale_words(520, ScaleFormat::kUE8M0), 2);
    quantize_token(x.data(), 520, ScaleFormat::kUE8M0, q.data(), words);
    SY_CHECK_EQ(words[0], 0x78697c77u);  // bytes 119, 124, 105, 120, little-endian
    SY_CHECK_EQ(words[1], 0x00000076u);  // byte 118, unused bytes zero
    SY_CHECK_EQ(q[0], 0x78);
    SY_CHECK_EQ(q[128], 0x7e);
    SY_CHECK_EQ(q[256], 0x00);
    SY_CHECK_EQ(q[384], 0xfc);
    SY_CHECK_EQ(q[512], 0x78);
    SY_CHECK_EQ(dequantize_value(q[384], words, 384, ScaleFormat::kUE8M0), -3.0f);
    SY_CHECK_EQ(dequantize_value(q[512], words, 512, ScaleFormat::kUE8M0), 0.5f);
    SY_CHECK_EQ(dequantize_value(0x38, words, 130, ScaleFormat::kUE8M0), 0.125f);  // 1.0 * 2^-3
}

// Error bound. Let s be the block's scale and v = x / s the value handed to the e4m3 rounding.
// In e4m3's normal range the rounding error is at most half an ulp, 2^(e-4) with 2^e <= |v|, so
// at most 2^-4 |v|; in the subnormal range (|v| < 2^-6, step 2^-9) it is at most 2^-10; values
// never exceed 448 by more than an fp32 rounding, so saturation adds nothing beyond that.
// Scaling back by s: |dequant(q) - x| <= 2^-4 |x| + 2^-10 s. The fp32 scale path also rounds
// 448/amax, x * (448/amax), amax/448 and q * s (each <= 2^-24 relative), covered by a slack of
// 2^-19 |x|; for UE8M0 the scale is a power of two and those steps are exact.
SY_TEST(quantize, random_blocks_within_error_bound) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    for (ScaleFormat format : {ScaleFormat::kFloat32, ScaleFormat::kUE8M0}) {
        for (int hidden : {1, 127, 128, 200, 512, 777}) {
            for (int trial = 0; trial < 20; ++trial) {
                // Each trial picks a magnitude range; some blocks mix tiny and large values.
                const float base = exponent(rng);
                std::vector<uint16_t> x(hidden);
                for (auto& v : x)
                    v = float_to_bf16(mantissa(rng) * std::exp2(base + (trial % 3) * mantissa(rng) * 8));
                std::vector<uint8_t> q(hidden);
                std::vector<uint32_t> scales(num_scale_words(hidden, format));
                quantize_token(x.data(), hidden, format, q.data(), scales.data());
                for (int c = 0; c < hidden; ++c) {
                    const double xv = bf16_to_float(x[c]);
                    const double back = dequantize_value(q[c], scales.data(), c, format);
                    const double s = dequantize_value(0x38, scales.data(), c, format);  // 1.0 * scale
                    const double bound = (0x1p-4 + 0x1p-19) * std::fabs(xv) + 0x1p-10 * s * (1 + 0x1p-20);
                    SY_CHECK_MSG(std::fabs(back - xv) <= bound,
                                 "hidden " << hidden << " channel " << c << " x " << xv << " back " << back);
                }
            }
        }
    }
}

SY_TEST(quantize, ue8m0_scale_is_smallest_power_of_two_covering_amax) {
    // For many amax values, the scale 2^(byte-127) satisfies s/2 < amax/448 <= s.
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> exponent(-20.0f, 40.0f);
    for (int i = 0; i < 5000; ++i) {
        const uint16_t v = float_to_bf16(std::exp2(exponent(rng)));
        std::vector<uint16_t> x(128, 0);
        x[5] = v;
        uint32_t word = 0;
        std::vector<uint8_t> q(128);
        quantize_token(x.data(), 128, ScaleFormat::kUE8M0, q.data(), &word);
        const double amax = std::max(static_cast<double>(bf16_to_float(v)), static_cast<double>(1e-4f));
        const double ratio = static_cast<double>(static_cast<float>(amax) / 448.0f);
        const double s = std::ldexp(1.0, static_cast<int>(word & 0xff) - 127);
        SY_CHECK_MSG(s / 2 < ratio && ratio <= s, "amax " << amax << " byte " << (word & 0xff));
        SY_CHECK_EQ(word >> 8, 0u);
    }
}

SY_TEST_MAIN()
