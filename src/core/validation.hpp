// Argument validation of every op, HT and LL: every check that can be made on the host before a
// kernel runs, with one set of helpers.
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
    int32_t max_tokens_per_rank = 0;  // T_max of the op's mode (HT, or LL: ll_max_tokens_per_rank)
    int32_t max_hidden = 0;
    int32_t max_topk = 0;
    int32_t max_experts = 0;
    bool ll_zero_copy_combine = false;  // BufferConfig::ll_zero_copy_combine
    Device device{};                    // where every tensor must live
};

ValidationContext make_validation_context(const BufferConfig& config, int num_ranks, Device device,
                                          int32_t max_tokens_per_rank);

// Checks the configuration itself (sizes positive, within supported limits).
void validate_config(const BufferConfig& config);

// Checks the number of experts against the rank count and the buffer.
void validate_num_experts(int32_t num_experts, const ValidationContext& context);

// Validates a dispatch call. Expert ids live on the GPU (require_device_resident): the routing
// kernel checks their range before any data moves.
void validate_dispatch(const DispatchArgs& args, const ValidationContext& context);

// Every op's topk_idx (and whatever else a kernel reads without a host check): labelled as the
// buffer's CUDA device and, asked of the CUDA runtime, device (or managed) memory of that device.
// Host memory, pinned or pageable, and another GPU's memory are an InvalidArgument saying which.
// The only check here that calls CUDA (cudaPointerGetAttributes), so the ops make it, not the
// validate_* functions above.
void require_device_resident(const TensorView& view, const char* name, int device);

// Validates a combine call given the dispatch it answers (its layout, rows and token count).
struct CombineShape {
    RecvLayout layout = RecvLayout::kRankMajor;
    int64_t num_rows = 0;    // rows of the dispatch output on this rank
    int64_t num_tokens = 0;  // T of this rank's dispatch input
    int32_t hidden = 0;
    int32_t topk = 0;
};
void validate_combine(const CombineArgs& args, const CombineShape& shape, const ValidationContext& context);

// --- Low latency (context: make_validation_context with the buffer's ll_max_tokens_per_rank) ---

// The LL ops need a buffer created with BufferConfig::enable_low_latency; `op` names the call.
void validate_low_latency(const BufferConfig& config, const char* op);

// Validates an LL dispatch call (also what Buffer::ll_load_kernels is given). Expert ids are
// checked by the kernel (an invalid one is reported once every rank has its data).
void validate_ll_dispatch(const LowLatencyDispatchArgs& args, const ValidationContext& context);

// The output layout options of an LL dispatch (part of validate_ll_dispatch): the masked or the
// contiguous layout, an expert_alignment in [1, 1024], and expert_alignment and zero_padding only
// with the contiguous one.
void validate_ll_layout(const LowLatencyDispatchArgs& args);

// Validates an LL combine call given the handle of the dispatch it answers (null: none given).
void validate_ll_combine(const LowLatencyCombineArgs& args, const LowLatencyHandle* handle,
                         const ValidationContext& context);

// The y an LL combine's kernel reads, from a validated y: a masked y flattened to [L * R*T_ll, H]
// as its [L, R*T_ll, H] view; any other y unchanged.
TensorView ll_combine_y_view(const TensorView& y, const LowLatencyHandle& handle);

// Buffer::ll_combine_input: a buffer with the zero-copy area and a masked dispatch of this buffer.
void validate_ll_combine_input(const LowLatencyHandle& handle, bool has_zero_copy_area,
                               const ValidationContext& context);

// Buffer::ll_set_mask / ht_set_mask (`op`): a rank of the buffer; with `own_rank` >= 0, not that
// rank (an HT rank cannot leave its own ops).
void validate_mask_rank(const char* op, int rank, int num_ranks, int own_rank = -1);
// Buffer::ht_query_mask / ht_set_mask / ht_clear_mask (`op`): the buffer masks HT ranks.
void validate_ht_masking(const BufferConfig& config, const char* op);

}  // namespace switchyard::core
