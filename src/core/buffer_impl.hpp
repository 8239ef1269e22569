// Buffer's private state, shared by the files that implement its operations (buffer.cpp for
// creation, barrier and layout; one file per operation family beside it).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "comm/symmetric_memory.hpp"
#include "util/cuda_check.hpp"
#include "core/error_state.hpp"
#include "core/event_pool.hpp"
#include "core/op_trace.hpp"
#include "core/output_memory.hpp"
#include "launch/launch_context.hpp"
#include "net/network.hpp"
#include "switchyard/buffer.hpp"

namespace switchyard {

// Makes `device` current for a Buffer call and restores the caller's current device when the call
// returns or throws: a Buffer never leaves the caller's thread on another device.
class DeviceScope {
  public:
    explicit DeviceScope(int device) {
        util::cuda_check(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) util::cuda_check(cudaSetDevice(device), "cudaSetDevice");
    }
    ~DeviceScope() {
        int current = previous_;
        if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
    }
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

  private:
    int previous_ = 0;
};

inline std::chrono::milliseconds to_milliseconds(double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

struct Buffer::Impl {
    std::shared_ptr<Communicator> communicator;
    int device = 0;
    BufferConfig config;
    Topology topology;
    device::BufferLayout layout{};
    std::unique_ptr<comm::SymmetricMemory> memory;
    std::unique_ptr<core::ErrorState> errors;
    std::unique_ptr<core::OutputMemory> outputs;  // this rank's own pool (see output_memory.hpp)
    device::RoutingScratch routing_scratch{};     // the layout kernel's tagged per-chunk totals and epoch
    cudaStream_t comm_stream = nullptr;
    cudaEvent_t caller_ready = nullptr;  // recorded on the caller's stream
    std::shared_ptr<core::EventPool> events = std::make_shared<core::EventPool>();  // the ops' OpEvents
    OpEvent latest_done;  // the latest op's completion (on the stream it ran on)
    int sm_budget = 1;
    bool gpu_alone = false;               // no other rank shares this GPU (LaunchContext)
    bool kernels_preloaded_only = false;  // a rank of this process shares the GPU (LaunchContext)
    int device_sms = 1;
    // Mapped host memory the dispatch kernel writes its receive counts into (host-synced mode).
    int32_t* host_counts = nullptr;
    int32_t* host_counts_device = nullptr;
    std::unique_ptr<core::OpTracer> tracer;  // the ops' timelines (SWITCHYARD_TRACE=1)
    // The scale-out network when the ranks span several nodes (src/net/), else null.
    std::unique_ptr<net::Network> network;

    std::chrono::milliseconds timeout() const { return to_milliseconds(config.timeout_seconds); }
    // Host rendezvous after a failed op: a peer may still be inside its own GPU wait (up to one
    // timeout) before it reaches the host, so give it that long plus slack.
    std::chrono::milliseconds recovery_timeout() const { return timeout() * 2 + std::chrono::seconds(10); }

    // The stream an op called on `caller` runs on (allocations and launches).
    cudaStream_t op_stream(cudaStream_t caller) const {
        return config.launch_on_caller_stream ? caller : comm_stream;
    }

    // Waits for every op this buffer has issued: the comm stream, and with ops on the callers'
    // streams the latest op (its completion event: the stream itself may be gone by now).
    void drain() const {
        util::cuda_check(cudaStreamSynchronize(comm_stream), "cudaStreamSynchronize (comm stream)");
        if (config.launch_on_caller_stream) latest_done.synchronize();
    }
    // drain(), then what the finished ops asked of the network (bounded; skipped after an error,
    // when a failed op may have left requests the network can never complete).
    void drain_with_network() const {
        drain();
        if (!network || errors->has_error() || network->drain(timeout())) return;
        const std::string failure = network->failure();
        if (!failure.empty())
            throw Error("switchyard: rank " + std::to_string(communicator->rank()) + ": the " +
                        net::network_kind_name(network->kind()) + " network stopped: " + failure);
        throw TimeoutError("switchyard: rank " + std::to_string(communicator->rank()) + ": the " +
                               net::network_kind_name(network->kind()) +
                               " network did not deliver the finished ops' requests within " +
                               std::to_string(config.timeout_seconds) + " s",
                           communicator->rank(), -1, "network");
    }

    launch::LaunchContext context(cudaStream_t caller) const {
        launch::LaunchContext context;
        context.device = device;
        context.stream = op_stream(caller);
        context.rank = communicator->rank();
        context.num_ranks = communicator->size();
        context.local_base = memory->local();
        context.peer_bases = memory->device_peer_table();
        context.peer_table_digest = memory->peer_table_digest();
        context.layout = layout;
        context.diagnostics.record = errors->device_record();
        context.diagnostics.poison = layout.workspace.poison(memory->local());
        context.diagnostics.timeout_ns = static_cast<uint64_t>(config.timeout_seconds * 1e9);
        context.diagnostics.rank = communicator->rank();
        context.sm_budget = sm_budget;
        context.gpu_alone = gpu_alone;
        context.kernels_preloaded_only = kernels_preloaded_only;
        context.outputs = outputs.get();
        context.routing_scratch = routing_scratch;
        context.network = network.get();
        context.ht_mask_unresponsive = config.ht_mask_unresponsive_ranks;
        return context;
    }

    // Runs `body` on the comm stream after the caller's stream (or after `order.after`), then
    // makes the caller's stream wait for it unless `order.async`; with launch_on_caller_stream, on
    // the caller's stream itself. Returns the op's completion. On a poisoned buffer it throws
    // PoisonedError before anything is launched. The caller's current device is restored.
    template <typename Body>
    OpEvent run_ordered(cudaStream_t caller, const OpOrder& order, Body&& body) {
        errors->throw_if_poisoned(config.timeout_seconds);
        const DeviceScope scope(device);
        const cudaStream_t stream = op_stream(caller);
        if (order.after) {
            SY_CUDA_CHECK(cudaStreamWaitEvent(stream, order.after, 0));
        } else if (stream != caller) {
            SY_CUDA_CHECK(cudaEventRecord(caller_ready, caller));
            SY_CUDA_CHECK(cudaStreamWaitEvent(stream, caller_ready, 0));
        }
        if (network) network->expect_traffic();
        body();
        latest_done = events->record(stream);
        if (stream != caller && !order.async)
            SY_CUDA_CHECK(cudaStreamWaitEvent(caller, latest_done.get(), 0));
        return latest_done;
    }
};

}  // namespace switchyard
