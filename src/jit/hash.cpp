#include "jit/hash.hpp"

namespace switchyard::jit {
namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// Avalanche step so that every input bit affects every output bit (FNV alone mixes weakly into
// the high bits).
uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

void append_hex(std::string& out, uint64_t value) {
    static const char kDigits[] = "0123456789abcdef";
    for (int shift = 60; shift >= 0; shift -= 4) out.push_back(kDigits[(value >> shift) & 0xf]);
}

}  // namespace

void Hasher128::update(std::string_view bytes) {
    for (unsigned char byte : bytes) {
        lane_a_ = (lane_a_ ^ byte) * kFnvPrime;
        // The second lane sees the byte rotated so the lanes do not stay correlated.
        lane_b_ = (lane_b_ ^ static_cast<unsigned char>((byte << 3) | (byte >> 5))) * kFnvPrime;
    }
    length_ += bytes.size();
}

void Hasher128::field(std::string_view bytes) {
    const uint64_t size = bytes.size();
    char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((size >> (8 * i)) & 0xff);
    update(std::string_view(prefix, sizeof(prefix)));
    update(bytes);
}

std::string Hasher128::hex() const {
    const uint64_t a = mix64(lane_a_ ^ length_);
    const uint64_t b = mix64(lane_b_ + a);
    std::string out;
    out.reserve(32);
    append_hex(out, a);
    append_hex(out, b);
    return out;
}

std::string hash128_hex(std::string_view bytes) {
    Hasher128 hasher;
    hasher.update(bytes);
    return hasher.hex();
}

}  // namespace switchyard::jit
