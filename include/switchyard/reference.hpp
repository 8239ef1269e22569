// The CPU reference implementation of Switchyard's semantics (DESIGN.md §2).
//
// It takes every rank's inputs and returns every rank's outputs, in host memory. It is the oracle
// the GPU tests compare against (bit for bit), and it is usable by callers who want to check
// their own integration. Nothing here touches a GPU.
//
// Numeric conventions (the GPU kernels follow the same ones exactly):
//  * bf16 and fp8 values are carried as raw bits (uint16_t / uint8_t).
//  * Reductions accumulate in fp32: acc = 0; acc += bias0; acc += bias1; then contributions in
//    the documented order, weighted ones as acc = fmaf(w, y, acc); one bf16 rounding at the end
//    (round to nearest even).
//  * FP8 quantization follows DESIGN.md §2 with IEEE fp32 division, no fast math.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "switchyard/formats.hpp"

namespace switchyard::reference {

// ---------------------------------------------------------------------------------------------
// Numerics
// ---------------------------------------------------------------------------------------------
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);  // round to nearest even; NaN stays NaN
float e4m3_to_float(uint8_t bits);
// Round to nearest even, saturate finite values to ±448, NaN -> 0x7f (as cvt.rn.satfinite.e4m3).
uint8_t float_to_e4m3_satfinite(float value);

// The ops' enums (formats.hpp), reachable here too: one type each, no conversion between the API
// and the reference.
using switchyard::CountMode;
using switchyard::RecvLayout;
using switchyard::ScaleFormat;

inline int num_scale_blocks(int hidden) {
    return (hidden + 127) / 128;
}
inline int num_scale_words(int hidden, ScaleFormat format) {
    return format == ScaleFormat::kUE8M0 ? (hidden + 511) / 512
                                         : (format == ScaleFormat::kFloat32 ? num_scale_blocks(hidden) : 0);
}

// Quantize one token of `hidden` bf16 values. `scales` receives num_scale_words(hidden, format)
// 32-bit words (fp32 bit patterns or packed exponent bytes, byte b of word w = block 4w+b).
void quantize_token(const uint16_t* x_bf16, int hidden, ScaleFormat format, uint8_t* q_out,
                    uint32_t* scales_out);
// x = e4m3 value * scale of its block, in fp32.
float dequantize_value(uint8_t q, const uint32_t* scales, int channel, ScaleFormat format);

// ---------------------------------------------------------------------------------------------
// Problem and inputs
// ---------------------------------------------------------------------------------------------
struct Problem {
    int num_ranks = 1;            // R
    int num_experts = 1;          // E, E % R == 0; rank q owns experts [q*L, (q+1)*L)
    int hidden = 128;             // H
    int topk = 1;                 // K
    int max_tokens_per_rank = 0;  // T_max (must be set: validation rejects 0)
    int local_experts() const { return num_experts / num_ranks; }
};

// Throws switchyard::InvalidArgument if the problem itself is inconsistent (E % R, sizes <= 0).
void validate_problem(const Problem& problem);
// Throws switchyard::InvalidArgument for a rank outside [0, R), if T > T_max, and naming rank,
// token and slot of the first entry outside [-1, E).
void validate_routing(const Problem& problem, int rank, int num_tokens, const std::vector<int64_t>& topk_idx);

enum class Payload : uint8_t { kBF16, kFP8 };

// One rank's dispatch input. Rows are dense ([T, H]).
struct DispatchInput {
    int num_tokens = 0;
    Payload payload = Payload::kBF16;
    std::vector<uint16_t> x_bf16;                   // [T * H] when payload == kBF16
    std::vector<uint8_t> x_fp8;                     // [T * H] when payload == kFP8
    ScaleFormat scale_format = ScaleFormat::kNone;  // kFloat32 or kUE8M0 when payload == kFP8
    std::vector<uint32_t> scales;                   // [T * num_scale_words] when payload == kFP8
    std::vector<int64_t> topk_idx;                  // [T * K], -1 = empty slot
    std::vector<float> topk_weights;                // [T * K] or empty (no weights)
};

struct DispatchOptions {
    RecvLayout layout = RecvLayout::kRankMajor;
    int expert_alignment = 1;   // contiguous layout: each segment starts at a multiple of this
    bool zero_padding = false;  // contiguous layout: padding rows (payload, scales, weight) zeroed
    // Quantize a bf16 input to FP8 inside the dispatch (payload then fp8 with this format).
    bool quantize = false;
    ScaleFormat quantize_format = ScaleFormat::kFloat32;
    // Ranks treated as absent (LL fault tolerance): they send nothing, receive nothing.
    // Their inputs are not read; the routing records them with 0 tokens and their outputs have no
    // rows (masked: all rows invalid).
    std::vector<bool> absent_ranks;  // empty = none absent
};

// Where a received row came from. For padding or invalid rows all fields are -1.
struct RowSource {
    int32_t rank = -1;
    int32_t token = -1;
    int32_t k = -1;  // expert-major layouts: the top-k slot; rank-major: -1
};

// One rank's dispatch output.
struct DispatchOutput {
    RecvLayout layout = RecvLayout::kRankMajor;
    int64_t num_rows = 0;  // rows of the output tensors (masked: L * R * T_max)
    Payload payload = Payload::kBF16;
    ScaleFormat scale_format = ScaleFormat::kNone;
    std::vector<uint16_t> x_bf16;  // [num_rows * H]
    std::vector<uint8_t> x_fp8;    // [num_rows * H]
    std::vector<uint32_t> scales;  // [num_rows * num_scale_words]
    // Rank-major: [num_rows * K], local expert id where owned by this rank, else -1.
    // Expert-major: empty (the segment gives the expert, `sources[row].k` the slot).
    std::vector<int32_t> topk_idx;
    // Rank-major: [num_rows * K], the weight where owned, else 0. Expert-major: [num_rows], one
    // weight per row (0 for padding). Empty when the input had no weights.
    std::vector<float> topk_weights;
    std::vector<RowSource> sources;              // [num_rows]
    std::vector<int32_t> num_tokens_per_expert;  // [L], unaligned counts
    std::vector<int32_t> num_rows_per_source;    // [R], rank-major rows from each source
    // Contiguous layout: [L + 1] segment starts (aligned), last = total rows incl. padding;
    // segment e has round_up(count[e], alignment) rows (an empty expert has none).
    // Masked layout: [L + 1] with e * R * T_max. Rank-major: empty.
    std::vector<int64_t> expert_offsets;
};

// Routing of one dispatch for all ranks: what a handle holds. Cached dispatch reuses it.
struct Routing {
    Problem problem;
    DispatchOptions options;
    std::vector<int> num_tokens;                   // [R]
    std::vector<std::vector<int64_t>> topk_idx;    // [R][T_s * K]
    std::vector<std::vector<float>> topk_weights;  // [R][T_s * K] or empty per rank
};

// Every rank's dispatch output and the routing (switchyard::DispatchResult is one rank's result of
// the op on the GPU; DispatchOutput here is its counterpart).
struct GlobalDispatch {
    std::vector<DispatchOutput> outputs;  // [R]
    Routing routing;
};

// Dispatch every rank's input. Validates the problem and the routing first.
GlobalDispatch dispatch(const Problem& problem, const std::vector<DispatchInput>& inputs,
                        const DispatchOptions& options);

// Cached dispatch: new data (payload, scales, optional weights) with the routing of `routing`.
// `inputs[s].topk_idx` is ignored. Produces byte-identical layouts. Weights come from `inputs`
// only: none given = no weights in the outputs.
std::vector<DispatchOutput> cached_dispatch(const Routing& routing, const std::vector<DispatchInput>& inputs);

// ---------------------------------------------------------------------------------------------
// Combine
// ---------------------------------------------------------------------------------------------
// One rank q's combine input: rows in exactly the layout its dispatch output had.
struct CombineInput {
    std::vector<uint16_t> y;  // [num_rows * H] bf16
    // Optional weights sent back with the rows (for combined_topk_weights):
    // rank-major [num_rows * K], expert-major [num_rows]. Empty = none.
    std::vector<float> row_weights;
};

// One home rank s's extra combine input.
struct CombineHomeInput {
    // Expert-major weighted combine: [T_s * K]; empty = use the dispatch's weights.
    std::vector<float> topk_weights;
    std::vector<uint16_t> bias0;  // [T_s * H] or empty
    std::vector<uint16_t> bias1;  // [T_s * H] or empty
};

struct CombineOptions {
    // Expert-major layouts only: out = sum_k w_k * y_k. Rank-major combine is always unweighted.
    bool weighted = false;
    // Expert-major layouts only: each receiving rank first reduces its rows of a token in fp32
    // (k ascending, weighted if `weighted` with the dispatch's weights), rounds that partial to
    // bf16 and sends one row; the home rank then sums the partials over ranks ascending.
    bool hierarchical = false;
    // Contributions of these ranks count as absent (their CombineInput is not read); an absent
    // home rank's output is all zero. Ranks absent at dispatch are absent here too.
    std::vector<bool> absent_ranks;
    // Ranks on several nodes (equal, contiguous blocks of R / num_nodes ranks): the node-level
    // reduction of DESIGN.md §2 "Several nodes". Each node's contributions are summed in fp32 in
    // the order the single-node combine uses (restricted to that node's ranks) and rounded to bf16
    // once; the home sums those node partials over nodes ascending after the biases and rounds
    // once. A node without a contribution to a token adds nothing. 1 = the single-node rules.
    int num_nodes = 1;
};

struct CombineOutput {
    std::vector<uint16_t> out;                 // [T_s * H] bf16
    std::vector<float> combined_topk_weights;  // [T_s * K] if row weights were given, else empty
};

// Combine back to every home rank.
//  Rank-major: out[t] = bf16(bias0 + bias1 + sum over receiving ranks q ascending of y_q[row(s,t)]).
//  Expert-major, flat: out[t] = bf16(bias0 + bias1 + sum over k ascending of (w_k *) y(s,t,k)).
//  Expert-major, hierarchical: out[t] = bf16(bias0 + bias1 + sum over q ascending of
//      float(bf16(sum over k ascending owned by q of (w_k *) y(s,t,k)))).
//  Several nodes (CombineOptions::num_nodes > 1): out[t] = bf16(bias0 + bias1 + sum over nodes m
//      ascending of float(bf16(the rule above over the ranks of node m, without the biases)).
//  Tokens routed nowhere yield the bias terms (or zero).
//  combined_topk_weights[t][k] = the weight sent back by the owner of expert k's row (0 for -1).
std::vector<CombineOutput> combine(const Routing& routing, const std::vector<CombineInput>& inputs,
                                   const std::vector<CombineHomeInput>& home_inputs,
                                   const CombineOptions& options);

}  // namespace switchyard::reference
