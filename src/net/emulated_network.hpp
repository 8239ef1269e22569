// The emulated network (tests and benchmarks on one host): a CPU-scheduled engine per rank, like
// GIN's proxy backend.
//
// Kernels write 64-byte request descriptors into this rank's rings (one per context, mapped host
// memory; transport/net_emulated.cuh). One engine thread per rank, started with the buffer and
// stopped with it, takes them in position order, lets the Scheduler (emulated_scheduler.hpp)
// decide order, coalescing, pacing and latency, and executes the work on one CUDA stream of its
// own: each call (payload, then signals, counters and flush reports) as one launch of the engine's
// copy kernel (transport/net_copy.cuh: 32 KiB pieces, at most 16 blocks, into the destination
// rank's window as this process maps it; its last block writes the call's words once every piece
// has landed). The engine hands a call over up to 100 us before its words are due on the wire
// clock, and the launch holds them until then on the GPU's clock (net/device_clock.hpp), so the
// launch's own delay overlaps the wire instead of adding to it. The stream keeps everything in the
// order the scheduler issued it, so a signal lands after the payload before it; it works under
// CUDA-graph replay. The copy kernel needs SMs: the
// ranks sharing a GPU with the network leave it tuning::kEmulatedNetworkSmsPerRank each (their
// kernels wait for its deliveries). With a CUDA tool attached (compute-sanitizer, a profiler),
// which may hold a launch until the device is idle, the payload goes by the driver's copies
// (cudaMemcpyBatchAsync) and the words by stream memory operations (cuStreamBatchMemOp; 8-byte
// copies from pinned memory where the driver lacks them) instead.
//
// The pointers the engine uses for other nodes' windows and states never reach a kernel: kernels
// see only their own rings, state and window offsets.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/symmetric_memory.hpp"
#include "net/descriptor_ring.hpp"
#include "net/device_clock.hpp"
#include "net/emulated_scheduler.hpp"
#include "net/network.hpp"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/communicator.hpp"

namespace switchyard::net {

class EmulatedNetwork final : public Network {
  public:
    struct Setup {
        Communicator* communicator = nullptr;
        const Topology* topology = nullptr;
        comm::NodeLayout layout;
        const comm::SymmetricMemory* windows = nullptr;  // the buffers (every rank on this host mapped)
        int device = 0;
        BufferConfig config;
        device::ErrorRecord* host_record = nullptr;  // where a refused request is reported
        uint32_t* poison = nullptr;                  // the buffer's poison word (device memory)
        std::chrono::milliseconds timeout{100000};
    };

    // Collective: allocates this rank's rings and network state, maps the other ranks' states,
    // starts the engine thread.
    explicit EmulatedNetwork(const Setup& setup);
    ~EmulatedNetwork() override;

    NetworkKind kind() const override { return NetworkKind::kEmulated; }
    device::EmulatedNetContext emulated_context() const override { return context_; }
    bool drain(std::chrono::milliseconds timeout) override;
    void stop_for_reset(std::chrono::milliseconds timeout) override;
    void clear_for_reset() override;
    void resume_after_reset() override;
    void shutdown() override;
    NetworkStats stats() const override;
    std::string failure() const override;
    std::string pending_note() const override;
    void expect_traffic() override;

    // Descriptors per context ring.
    static constexpr uint32_t kRingSlots = 8192;

  private:
    class CudaExecutor;

    void run();
    // One pass: take new descriptors, issue what is due. Returns when the engine next has work
    // (kNever: none pending), and whether it took descriptors.
    int64_t pass(int64_t now_ns, bool& took);
    void report_refused(int32_t context, const device::NetDescriptor& request, const std::string& problem);
    // Copies the scheduler's accounting and the engine's statistics for stats().
    void refresh_stats();
    void pause();
    void unpause();

    Setup setup_;
    int32_t rank_ = 0;
    int32_t num_contexts_ = device::kNetMaxContexts;
    std::unique_ptr<comm::SymmetricMemory> state_;  // EmulatedNetState of every rank on this host
    device::NetDescriptor* rings_host_ = nullptr;   // [contexts][kRingSlots], mapped pinned memory
    device::NetDescriptor* rings_device_ = nullptr;
    uint64_t* consumed_host_ = nullptr;  // [contexts]: positions taken, mapped pinned memory
    uint64_t* consumed_device_ = nullptr;
    device::EmulatedNetContext context_{};
    std::unique_ptr<DescriptorRing> ring_;

    cudaStream_t stream_ = nullptr;
    std::unique_ptr<CudaExecutor> executor_;
    std::unique_ptr<Scheduler> scheduler_;

    std::thread thread_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> pause_requested_{false};
    std::atomic<bool> paused_{false};
    std::atomic<uint64_t> pass_count_{0};
    std::atomic<uint64_t> quiet_pass_{0};    // the latest pass that found nothing to do and the stream idle
    std::atomic<int64_t> last_issue_ns_{0};  // steady clock of the latest pass that issued copies or words
    std::atomic<bool> failed_{false};
    // expect_traffic(): when an op last announced itself, and the engine's idle wait it may cut short.
    std::atomic<int64_t> expected_ns_{0};
    std::atomic<bool> sleeping_{false};
    std::mutex wake_mutex_;
    std::condition_variable wake_;

    // The engine thread's own statistics (NetworkEngineStats), kept by that thread.
    struct EngineCounters {
        uint64_t passes = 0, requests = 0, full_takes = 0;
        uint64_t busy_ns = 0, waiting_ns = 0, idle_ns = 0;
        uint64_t ring_lag_samples = 0, ring_lag_sum = 0, ring_lag_max = 0;  // above DeviceClock's offset
    };
    EngineCounters engine_;
    DeviceClock device_clock_;  // the GPU's clock, from the requests' stamps (engine thread)

    mutable std::mutex stats_mutex_;
    SchedulerStats stats_snapshot_;
    NetworkEngineStats engine_snapshot_;
    std::string failure_;  // under stats_mutex_
    bool reported_refusal_ = false;
    bool shut_down_ = false;
};

}  // namespace switchyard::net
