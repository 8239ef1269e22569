// Buffer: one rank's communication buffer and the operations that run on it.
//
// Creating a Buffer is collective over the communicator: every rank allocates its symmetric
// memory (control workspace + data regions), the configurations are compared, and the buffers of
// the ranks in this rank's NVLink domain are mapped here. Operations run on the buffer's
// communication stream, ordered after the caller's stream; the caller's stream then waits for
// them (synchronous mode). With BufferConfig::launch_on_caller_stream they run on the caller's
// stream itself (no cross-stream event waits). Every call leaves the caller's current CUDA device
// as it found it. Without a usable GPU, creation throws UnsupportedError ("no GPU: ..."); what a
// configuration will take, and an op's output shapes, are known before creation
// (switchyard/planning.hpp).
//
// Errors (errors.hpp). Failures on the GPU are recorded by the kernels and raised on the host, as
// their own type, by check_errors(), synchronize() and an op that waits for its results on the
// host (host-synced counts): TimeoutError (a peer did not arrive: names rank, peer and phase, and
// says when the peer's process is gone), InvalidArgument (expert ids out of range, naming token,
// slot and id), PeerFailedError (another rank failed the op before any data moved and announced
// it, naming that rank). The failure poisons the buffer: every later op refuses to start with
// PoisonedError (which quotes the failure and whose cause() rethrows it) until every rank calls
// reset(). Invalid routing is announced through the exchange the peers already wait on (the HT
// counts exchange; the LL arrivals), so every rank raises within milliseconds, not after the
// timeout.
//
// Destruction is collective too: it waits for this rank's ops (and the network's deliveries),
// then meets the other ranks on the communicator before freeing the memory they map, so no peer
// writes into freed memory. It never throws and never hangs: when the communicator has already
// failed, or a peer's process is gone (the local-process communicator sees its connection close),
// the meeting fails at once; a peer that is alive but never comes is waited for
// BufferConfig::timeout_seconds * 2 + 10 s at most. Then the memory is freed either way.
//
// When a peer dies (its process exited or was killed), the survivors' ops end with a TimeoutError
// naming it ("its process is gone" where the communicator can tell: Communicator::peer_status);
// with BufferConfig::ll_mask_unresponsive_ranks (and ht_mask_unresponsive_ranks for HT ops on one
// node) the ops mask it and carry on instead. The
// communicator is then unusable, so reset() cannot recover; rebuild over the survivors in the same
// processes, on every surviving rank:
//
//   std::unique_ptr<Buffer> buffer = ...;                     // the buffer whose op failed
//   std::vector<int32_t> mask = buffer->ll_query_mask();      // LL: masks to carry over (optional;
//                                                             // HT: ht_query_mask, ht_set_mask)
//   std::vector<int> gone = communicator->gone_ranks();       // or the ranks the errors named; the
//                                                             // same list on every survivor
//   buffer = nullptr;                                         // destroys it (see above)
//   auto survivors = communicator->shrink(gone, timeout);     // ranks renumbered in the old order
//   buffer = std::make_unique<Buffer>(survivors, device, config);   // E % new size == 0
//   for (int r = 0; r < int(mask.size()); ++r)                // a survivor masked before stays so
//       if (mask[r] && shrunk_rank(r, gone) >= 0) buffer->ll_set_mask(shrunk_rank(r, gone), true);
//
// then load the kernels of the new rank count (ht_load_kernels / ll_load_kernels) before the first
// op, as for any new buffer. The experts of the dead rank are gone with it: the engine re-shards
// them over the survivors (E must be a multiple of the new rank count).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "switchyard/communicator.hpp"
#include "switchyard/config.hpp"
#include "switchyard/network.hpp"
#include "switchyard/op_timeline.hpp"
#include "switchyard/ops.hpp"
#include "switchyard/tensor.hpp"
#include "switchyard/topology.hpp"

namespace switchyard {

// Outputs of the dispatch layout kernel (device memory on the buffer's GPU, caller-allocated).
struct DispatchLayoutViews {
    TensorView num_tokens_per_rank;    // int32 [R]
    TensorView num_tokens_per_expert;  // int32 [E]
    TensorView token_in_rank;          // bool/uint8 [T, R], optional
    TensorView token_rank_slot;        // int32 [T, R]: slot among this rank's rows to that rank, -1 if none
    TensorView token_expert_pos;  // int32 [T, K]: position among this rank's rows to that expert, optional
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
    // The stream the communication kernels run on (unused for ops with launch_on_caller_stream).
    cudaStream_t comm_stream() const;
    // SMs one rank may use on its GPU: the device's SMs divided among the ranks that share it (with
    // the emulated network, less 4 per rank for its copies, which the driver may run on SMs).
    int sm_budget() const;

    // Cross-rank barrier on the GPU: returns at once; `stream` continues after every rank arrived.
    // Across nodes each rank meets its rail peers over the network, then its node over NVLink. A rank
    // that never arrives is a TimeoutError naming it (phase "barrier"); graph-capturable.
    void barrier(cudaStream_t stream);

    // Dispatch layout of `topk_idx` ([T, K] int32/int64 in this GPU's memory: host memory is an
    // InvalidArgument; ids out of range are found by the kernel) for `num_experts` experts.
    void get_dispatch_layout(const TensorView& topk_idx, int num_experts, const DispatchLayoutViews& out,
                             cudaStream_t stream);

    // --- High throughput (training, prefill): src/core/ht_ops.cpp -------------------------------
    // Dispatch x to the ranks owning its top-k experts (DESIGN.md §2).
    DispatchResult dispatch(const DispatchArgs& args, cudaStream_t stream);
    // New data (x, x_scales, topk_weights of `args`; topk_idx ignored) with the routing of
    // `handle`: byte-identical layouts. Also the backward of combine.
    DispatchResult cached_dispatch(const DispatchArgs& args,
                                   const std::shared_ptr<const DispatchHandle>& handle, cudaStream_t stream);
    // Combine rows laid out as `handle`'s dispatch produced them back to their home ranks. Also
    // the backward of dispatch (combine the gradients with the same handle).
    CombineResult combine(const CombineArgs& args, const std::shared_ptr<const DispatchHandle>& handle,
                          cudaStream_t stream);
    // Loads (JIT-compiling on a cache miss) every HT kernel that dispatch with `args`, a cached
    // dispatch of its handle and the combines of that handle (every reduction its layout allows, at
    // any SM count) can use. Kernels are specialized on the args' hidden size, top-k, payload and
    // scale format and layout: call it once per combination the engine uses. A rank's own call, no
    // communication, nothing launched. With several ranks on one GPU it is required before the
    // first HT op of a shape, because loading a kernel waits for the device's queued work, which
    // may be a co-located peer's kernel waiting for this rank (a stall until the timeout
    // otherwise); elsewhere it moves the compile and load out of the first op. The free function
    // ht_load_kernels(device, HtDispatchShape) (planning.hpp) does the same from shapes alone,
    // without a buffer: once per process and device for all the ranks in it.
    void ht_load_kernels(const DispatchArgs& args);

    // --- Low latency (decoding): src/core/ll_ops.cpp ------------------------------------------
    LowLatencyDispatchResult ll_dispatch(const LowLatencyDispatchArgs& args, cudaStream_t stream);
    LowLatencyCombineResult ll_combine(const LowLatencyCombineArgs& args,
                                       const std::shared_ptr<const LowLatencyHandle>& handle,
                                       cudaStream_t stream);
    // Loads (JIT-compiling on a cache miss) every LL kernel that ll_dispatch with `args`, and the
    // ll_combine of its handle (flat and hierarchical), can use: both halves together and each
    // half alone. Kernels are specialized on the args' shape, scale format and layout (masked or
    // contiguous): call it once per combination the engine uses. A rank's own call, no
    // communication, nothing launched. Call it before the first LL op of a shape: the first decode
    // step then pays no compile or load, and with several ranks on one GPU it is required, because
    // loading a kernel waits for the device's queued work, which may be a co-located peer's kernel
    // waiting for this rank: when another rank of this process shares the GPU, an LL op whose kernel
    // is not loaded raises InvalidArgument before it launches anything. ll_load_kernels(device,
    // LlDispatchShape) (planning.hpp) does the same from shapes alone, without a buffer.
    void ll_load_kernels(const LowLatencyDispatchArgs& args);
    // The buffer's LL send area as a bf16 [L, R*T_ll, H] view for zero-copy combine input (the
    // expert GEMM writes here; then ll_combine with zero_copy = true). Needs
    // BufferConfig::ll_zero_copy_combine and a dispatch in the masked layout.
    TensorView ll_combine_input(const LowLatencyHandle& handle) const;
    // Fault tolerance (BufferConfig::ll_mask_unresponsive_ranks): ranks masked after a timeout.
    std::vector<int32_t> ll_query_mask();
    void ll_set_mask(int rank, bool masked);
    void ll_clear_mask();
    // HT fault tolerance (BufferConfig::ht_mask_unresponsive_ranks, ranks of one node). An HT op
    // decides at its first exchange with each peer (the dispatch's counts, the combine's entry)
    // whether the peer takes part: one that has not come within the timeout is masked, and the op
    // and later ops go on without it: rows of this rank's tokens for its experts are dropped (its
    // combine contributions count as absent, combined_topk_weights gives 0 for them), its tokens
    // are absent from every output, nothing more is sent to it or awaited from it. Outputs equal
    // the reference with that rank absent (reference::DispatchOptions / CombineOptions
    // ::absent_ranks). A peer that came and then stops within the op is a TimeoutError as without
    // masking. The mask is this rank's ([R], 1 = masked, all ops read it when they start, so CUDA
    // graph replays follow it): set it alike on every rank, never for this rank itself; a masked
    // rank must not run HT ops on this buffer again (its peers no longer wait for it, nor expect
    // its rows) until reset() on every rank, which also clears the mask. With masking every combine
    // begins with an entry handshake (a few microseconds), also right after its dispatch.
    std::vector<int32_t> ht_query_mask();
    void ht_set_mask(int rank, bool masked);
    void ht_clear_mask();

    // Throws the error a kernel recorded, as its own type (TimeoutError naming rank, peer and phase;
    // InvalidArgument for routing found invalid on the GPU; PeerFailedError naming the rank that
    // announced its failure). Does not wait for the GPU.
    void check_errors() const;
    // Waits for the communication stream (and, with launch_on_caller_stream, for the latest op on
    // its caller's stream) and, on a buffer spanning nodes, for the emulated network to deliver
    // what those ops asked of it; then check_errors().
    void synchronize();
    // Collective: clears a recorded error and the control workspace so the buffer can be used again
    // (every rank calls it, also those whose op did not fail). A rank without an error first lets
    // its network deliver what its finished ops asked of it (bounded by the timeout), so a healthy
    // peer still in that op is not cut off. Needs every rank of the communicator: after a peer died,
    // rebuild instead (see the top of this file).
    void reset();

    // The scale-out network's byte accounting on this rank (include/switchyard/network.hpp):
    // backend "none" when the ranks are on one node. Call synchronize() first for settled counts.
    NetworkStats network_stats() const;
    // Collective: runs `check` (include/switchyard/network.hpp) between rail peers and returns this
    // rank's result once its kernel has finished. Throws the error a wait recorded (TimeoutError
    // naming the network phase and the peer node) and UnsupportedError on one node. Uses the
    // buffer's data regions: call it between ops, not while a rank-major output is still in use.
    NetworkCheckResult check_network(const NetworkCheck& check, cudaStream_t stream);

    // Op timelines, a profiling aid (include/switchyard/op_timeline.hpp). While tracing is on, each
    // op's kernels record when they reached the marks of its timeline; SWITCHYARD_TRACE=1 turns it on
    // for every buffer of the process and prints each timeline to stderr, set_op_tracing for this
    // buffer alone, printing nothing. Traced ops run slightly slower (their kernels add block
    // barriers). Not collective; an op in flight is traced as it was launched. Turning it on the
    // first time allocates host memory: with ranks sharing a GPU, do it while no rank is in an op
    // (an allocation may wait for a peer's kernel that waits for this rank).
    void set_op_tracing(bool on);
    // The latest traced op of `kind` whose kernels have finished (wait for its stream first), each
    // mark's time after its first; empty when none finished since the previous call for that kind.
    OpTimeline op_timeline(OpTimelineKind kind);

    // Raw access for tests and diagnostics: this rank's buffer, a peer's as mapped here (null if
    // not mapped), and where the data regions begin.
    uint8_t* local_memory() const;
    uint8_t* peer_memory(int rank) const;
    size_t data_offset() const;

    // Private state, defined in src/core/buffer_impl.hpp (opaque to users).
    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace switchyard
