// Buffer: one rank's communication buffer and the operations that run on it.
//
// Creating a Buffer is collective over the communicator: every rank allocates its symmetric
// memory (control workspace + data regions), the configurations are compared, and the buffers of
// the ranks in this rank's NVLink domain are mapped here. Operations run on the buffer's
// communication stream, ordered after the caller's stream; the caller's stream then waits for
// them (synchronous mode).
//
// Failures on the GPU (a peer that never arrives, an expert id out of range) are recorded by the
// kernels and raised on the host by check_errors(), synchronize() and the next operation. After a
// timeout the buffer is poisoned until every rank calls reset() (or the buffer is destroyed).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "switchyard/communicator.hpp"
#include "switchyard/config.hpp"
#include "switchyard/tensor.hpp"
#include "switchyard/topology.hpp"

namespace switchyard {

// Outputs of the dispatch layout kernel (device memory on the buffer's GPU, caller-allocated).
struct DispatchLayoutViews {
    TensorView num_tokens_per_rank;    // int32 [R]
    TensorView num_tokens_per_expert;  // int32 [E]
    TensorView token_in_rank;          // bool/uint8 [T, R], optional
    TensorView token_rank_slot;        // int32 [T, R]: slot among this rank's rows to that rank, -1 if none
    TensorView token_expert_pos;       // int32 [T, K]: position among this rank's rows to that expert, optional
};

class Buffer {
public:
    Buffer(std::shared_ptr<Communicator> communicator, int device, const BufferConfig& config);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    int rank() const;
    int num_ranks() const;
    int device() const;
    const BufferConfig& config() const;
    const Topology& topology() const;
    Communicator& communicator() const;

    // Bytes of this rank's symmetric allocation (workspace + data regions).
    size_t buffer_bytes() const;
    // The stream the communication kernels run on.
    cudaStream_t comm_stream() const;
    // SMs one rank may use on its GPU: the device's SMs divided among the ranks that share it.
    int sm_budget() const;

    // Cross-rank barrier on the GPU: returns at once; `stream` continues after every rank arrived.
    void barrier(cudaStream_t stream);

    // Dispatch layout of `topk_idx` ([T, K] int32/int64 on this GPU) for `num_experts` experts.
    void get_dispatch_layout(const TensorView& topk_idx, int num_experts, const DispatchLayoutViews& out,
                             cudaStream_t stream);

    // Throws the error a kernel recorded (TimeoutError naming rank, peer and phase; or
    // InvalidArgument for routing found invalid on the GPU). Does not wait for the GPU.
    void check_errors() const;
    // Waits for the communication stream, then check_errors().
    void synchronize();
    // Collective: clears a recorded error and the control workspace so the buffer can be used again.
    void reset();

    // Raw access for tests and diagnostics: this rank's buffer, a peer's as mapped here (null if
    // not mapped), and where the data regions begin.
    uint8_t* local_memory() const;
    uint8_t* peer_memory(int rank) const;
    size_t data_offset() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace switchyard
