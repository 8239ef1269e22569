// Helpers shared by the files of the CPU reference (not part of the public API).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::reference::detail {

// Builds an InvalidArgument message from streamable pieces: fail("rank ", q, ": bad").
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
    std::ostringstream out;
    out << "switchyard reference: ";
    (out << ... << parts);
    throw InvalidArgument(out.str());
}

// absent[q] for every rank; `absent_ranks` may be empty (nobody absent) or have R entries.
std::vector<bool> absent_mask(const std::vector<bool>& absent_ranks, int num_ranks, const char* what);

// Checks the dispatch options against the problem (alignment, quantize format, absent mask).
void validate_dispatch_options(const Problem& problem, const DispatchOptions& options);

// Checks one rank's payload and scales sizes (not its routing). `quantize` = the dispatch will
// quantize it, so it must be bf16.
void validate_payload(const Problem& problem, int rank, const DispatchInput& input, bool quantize);

// The masked layout has R * T_max rows per expert, so a token may name each expert only once.
void validate_no_duplicate_experts(const Problem& problem, int rank, int num_tokens,
                                   const std::vector<int64_t>& topk_idx);

// Checks a Routing as a whole (it may come from the caller, not from dispatch()).
void validate_routing_struct(const Routing& routing);

// Where the rows of one receiving rank come from, for every layout. Computed from the routing
// only, so a dispatch, its cached twin and the combine agree on every row index.
struct ReceivePlan {
    int64_t num_rows = 0;
    std::vector<RowSource> sources;              // [num_rows], -1 fields for padding/invalid rows
    std::vector<int32_t> num_tokens_per_expert;  // [L]
    std::vector<int32_t> num_rows_per_source;    // [R]
    std::vector<int64_t> expert_offsets;         // [L + 1] for expert-major layouts, else empty
};

// Plans rank q's receive layout. Ranks marked in `absent` neither send nor receive.
ReceivePlan plan_receive(const Routing& routing, const std::vector<bool>& absent, int q);

}  // namespace switchyard::reference::detail
