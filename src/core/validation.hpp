// Argument validation: every check that can be made on the host before a kernel runs.
//
// Messages name the argument, what was seen and what is accepted, so a user can act on them.
#pragma once

#include <cstdint>

#include "switchyard/config.hpp"
#include "switchyard/ops.hpp"

namespace switchyard::core {

// What a call is checked against: the buffer's capacities and the communicator's size.
struct ValidationContext {
    int32_t num_ranks = 1;
    int32_t max_tokens_per_rank = 0;
    int32_t max_hidden = 0;
    int32_t max_topk = 0;
    int32_t max_experts = 0;
    Device device{};  // where every tensor must live
};

ValidationContext make_validation_context(const BufferConfig& config, int num_ranks, Device device,
                                          int32_t max_tokens_per_rank);

// Checks the configuration itself (sizes positive, within supported limits).
void validate_config(const BufferConfig& config);

// Checks the number of experts against the rank count and the buffer.
void validate_num_experts(int32_t num_experts, const ValidationContext& context);

// Validates a dispatch call. Expert ids are range-checked here only when topk_idx is in host
// memory; for device memory the layout kernel checks them before any data moves.
void validate_dispatch(const DispatchArgs& args, const ValidationContext& context);

// Checks the output layout options of an LL dispatch: the masked or the contiguous layout, an
// expert_alignment in [1, 1024], and expert_alignment and zero_padding only with the contiguous one.
void validate_ll_layout(const LowLatencyDispatchArgs& args);

// Range check of host-resident expert ids: throws InvalidArgument naming token, slot and value.
void validate_expert_ids(const TensorView& topk_idx, int32_t num_experts);

// Validates a combine call given the dispatch it answers (its layout, rows and token count).
struct CombineShape {
    RecvLayout layout = RecvLayout::kRankMajor;
    int64_t num_rows = 0;    // rows of the dispatch output on this rank
    int64_t num_tokens = 0;  // T of this rank's dispatch input
    int32_t hidden = 0;
    int32_t topk = 0;
};
void validate_combine(const CombineArgs& args, const CombineShape& shape, const ValidationContext& context);

}  // namespace switchyard::core
