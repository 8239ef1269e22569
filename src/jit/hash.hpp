// A 128-bit non-cryptographic hash for cache keys and cache-file integrity checks.
//
// Two 64-bit FNV-1a lanes with different seeds, each finished with a 64-bit avalanche mix. It only
// has to tell apart inputs we produced ourselves (sources, flags, cubins), not resist an attacker.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace switchyard::jit {

class Hasher128 {
  public:
    // Feeds raw bytes.
    void update(std::string_view bytes);
    // Feeds a length-prefixed field, so ("ab","c") and ("a","bc") hash differently.
    void field(std::string_view bytes);
    // 32 lowercase hex digits. Does not change the state.
    std::string hex() const;

  private:
    uint64_t lane_a_ = 0xcbf29ce484222325ull;  // the usual FNV-1a offset basis
    uint64_t lane_b_ = 0x84222325cbf29ce4ull;  // a second, unrelated seed
    uint64_t length_ = 0;
};

// Convenience: the hex hash of one byte string.
std::string hash128_hex(std::string_view bytes);

}  // namespace switchyard::jit
