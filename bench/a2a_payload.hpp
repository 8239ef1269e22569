// The all-to-all traffic of one MoE dispatch and the matching combine, as a byte matrix.
//
// This is what the NCCL baseline moves: for a random uniform routing, rank s sends one row to rank
// q per token that has at least one expert owned by q (rank-major, a token crosses once per rank,
// not once per expert). The self-copy (s == q) is included, as NCCL's all-to-all does it too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace switchyard::bench {

enum class PayloadType { kFP8, kBF16 };

// "fp8" / "bf16".
const char* payload_name(PayloadType type);

// Bytes of one dispatched row: fp8 = hidden + ceil(hidden/128) fp32 scales; bf16 = 2 * hidden.
int64_t dispatch_row_bytes(PayloadType type, int hidden);
// Bytes of one combined row: bf16.
inline int64_t combine_row_bytes(int hidden) {
    return 2 * static_cast<int64_t>(hidden);
}

enum class A2aPhase { kDispatch, kCombine };

struct A2aShape {
    int ranks = 2;
    int tokens_per_rank = 4096;
    int hidden = 7168;
    int topk = 8;
    int experts = 256;
    PayloadType dispatch_type = PayloadType::kFP8;
    uint64_t seed = 1;
};

class A2aPayload {
  public:
    // Draws each rank's routing (fixed seed) and counts the rows. Throws InvalidArgument if
    // experts % ranks != 0 or topk > experts.
    explicit A2aPayload(const A2aShape& shape);

    const A2aShape& shape() const { return shape_; }
    int ranks() const { return shape_.ranks; }
    // Dispatch rows rank `src` sends to rank `dst`.
    int64_t rows(int src, int dst) const { return rows_[static_cast<size_t>(src) * shape_.ranks + dst]; }
    // Bytes `src` sends to `dst` in a phase (combine sends the dispatch's rows back as bf16).
    int64_t bytes(A2aPhase phase, int src, int dst) const;
    // Totals of one rank in a phase; self-copy included unless `remote_only`.
    int64_t bytes_sent(A2aPhase phase, int rank, bool remote_only) const;
    int64_t bytes_received(A2aPhase phase, int rank, bool remote_only) const;
    // Largest send or receive total of any rank over both phases: the buffer size to allocate.
    int64_t max_buffer_bytes() const;

  private:
    A2aShape shape_;
    std::vector<int64_t> rows_;  // [ranks * ranks], rows_[src * ranks + dst]
};

}  // namespace switchyard::bench
