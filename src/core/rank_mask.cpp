// The rank masks (LL: BufferConfig::ll_mask_unresponsive_ranks, HT: ht_mask_unresponsive_ranks):
// reading and changing them from the host. Each mask is [R] uint32 words in this rank's workspace
// (1 = masked) that the kernels read at the start of every op and set when a peer does not come.
#include <vector>

#include "core/buffer_impl.hpp"
#include "core/validation.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/ll/ll_layout.cuh"
#include "util/cuda_check.hpp"

namespace switchyard {
namespace {

uint32_t* ll_mask_words(const Buffer::Impl& impl) {
    return device::LlSignalLayout::make(impl.communicator->size())
        .mask(impl.layout.workspace.ll_signals(impl.memory->local()));
}

uint32_t* ht_mask_words(const Buffer::Impl& impl) {
    return impl.layout.workspace.ht_mask(impl.memory->local());
}

// The mask after the ops issued so far, as 0/1 per rank.
std::vector<int32_t> read_mask(Buffer::Impl& impl, const uint32_t* words) {
    std::vector<int32_t> mask(impl.communicator->size(), 0);
    const DeviceScope scope(impl.device);
    // Wait for queued ops first: a copy into pageable memory that waits behind a kernel holds the
    // driver's staging buffers, which a co-located rank's own copy may need (DESIGN.md §4, rule 6).
    impl.drain();
    SY_CUDA_CHECK(cudaMemcpyAsync(mask.data(), words, sizeof(int32_t) * mask.size(), cudaMemcpyDeviceToHost,
                                  impl.comm_stream));
    SY_CUDA_CHECK(cudaStreamSynchronize(impl.comm_stream));
    for (int32_t& value : mask) value = value != 0 ? 1 : 0;
    return mask;
}

// Zeroes mask words [first, first + count), then sets the first to 1 if `mask_first`, after the
// ops issued so far: ordered on the comm stream, or (ops on the callers' streams) after a drain
// and complete before the next op.
void write_mask(Buffer::Impl& impl, uint32_t* mask, int first, int count, bool mask_first) {
    const DeviceScope scope(impl.device);
    uint32_t* words = mask + first;
    const bool on_callers = impl.config.launch_on_caller_stream;
    if (on_callers) impl.drain();
    SY_CUDA_CHECK(cudaMemsetAsync(words, 0, sizeof(uint32_t) * count, impl.comm_stream));
    if (mask_first)
        SY_CUDA_CHECK(cudaMemsetAsync(words, 1, 1, impl.comm_stream));  // little endian: the word reads 1
    if (on_callers) SY_CUDA_CHECK(cudaStreamSynchronize(impl.comm_stream));
}

}  // namespace

std::vector<int32_t> Buffer::ll_query_mask() {
    core::validate_low_latency(impl_->config, "ll_query_mask");
    return read_mask(*impl_, ll_mask_words(*impl_));
}

void Buffer::ll_set_mask(int rank, bool masked) {
    core::validate_low_latency(impl_->config, "ll_set_mask");
    core::validate_mask_rank("ll_set_mask", rank, num_ranks());
    write_mask(*impl_, ll_mask_words(*impl_), rank, 1, masked);
}

void Buffer::ll_clear_mask() {
    core::validate_low_latency(impl_->config, "ll_clear_mask");
    write_mask(*impl_, ll_mask_words(*impl_), 0, num_ranks(), false);
}

std::vector<int32_t> Buffer::ht_query_mask() {
    core::validate_ht_masking(impl_->config, "ht_query_mask");
    return read_mask(*impl_, ht_mask_words(*impl_));
}

void Buffer::ht_set_mask(int rank, bool masked) {
    core::validate_ht_masking(impl_->config, "ht_set_mask");
    core::validate_mask_rank("ht_set_mask", rank, num_ranks(), this->rank());
    write_mask(*impl_, ht_mask_words(*impl_), rank, 1, masked);
}

void Buffer::ht_clear_mask() {
    core::validate_ht_masking(impl_->config, "ht_clear_mask");
    write_mask(*impl_, ht_mask_words(*impl_), 0, num_ranks(), false);
}

}  // namespace switchyard
