// This rank's end of the scale-out network, owned by Buffer::Impl when the ranks span several
// nodes: the emulated network (emulated_network.hpp) or NCCL GIN (gin_network.hpp). Launchers
// take the device context for their kernel's backend from it (LaunchContext::network).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "comm/topology.hpp"
#include "switchyard/config.hpp"
#include "switchyard/network.hpp"
#include "switchyard/topology.hpp"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::net {

// The backend a buffer ends up with.
enum class NetworkKind { kNone, kEmulated, kGin };
const char* network_kind_name(NetworkKind kind);

// Which backend `config` asks for on `topology` (pure; CPU-tested). kNone on one node whatever
// was asked (one NVLink domain needs no network). Throws UnsupportedError when the request cannot
// be met: the emulated network needs every rank on one host, GIN needs nodes that are hosts and a
// communicator over an ncclComm_t (`communicator_is_nccl`; `communicator` names it in messages).
NetworkKind resolve_network_kind(const BufferConfig& config, const Topology& topology,
                                 bool communicator_is_nccl, const std::string& communicator);

// Checks the network fields of `config` (InvalidArgument naming the field).
void validate_network_config(const BufferConfig& config, int num_ranks);

// For a timeout over the network: what this rank's network has carried to `peer` so far ("this
// rank's network has carried to rank 1: 3 puts (1.2 MB), 2 signal adds; 1029 requests taken in
// all"), so that the messages of two ranks waiting for each other say which side never sent its
// signal. Empty when the backend does not count (GIN) or `peer` is out of range.
std::string traffic_note(const NetworkStats& stats, int peer);

class Network {
  public:
    virtual ~Network();
    Network(const Network&) = delete;
    Network& operator=(const Network&) = delete;
    virtual NetworkKind kind() const = 0;
    const comm::NodeLayout& layout() const { return layout_; }

    // The context a kernel of the matching backend takes (the other one throws Error).
    virtual device::EmulatedNetContext emulated_context() const;
    virtual device::GinNetContext gin_context() const;

    // Waits (at most `timeout`) until what the finished ops asked of the network has been
    // delivered; false if it has not by then. Not an error by itself: the caller decides.
    virtual bool drain(std::chrono::milliseconds timeout) = 0;

    // Buffer::reset(), collective, in three steps around the ranks' two host barriers:
    // stop delivering (nothing of this rank's lands at any peer after it returns); clear this
    // rank's signals, counters and queues (all ranks have stopped); deliver again.
    virtual void stop_for_reset(std::chrono::milliseconds timeout) = 0;
    virtual void clear_for_reset() = 0;
    virtual void resume_after_reset() = 0;

    // Buffer destruction: stops for good (no more writes into any peer) before the ranks' final
    // barrier frees the memory.
    virtual void shutdown() = 0;

    // An op that may use the network is about to launch: a backend that polls for requests (the
    // emulated network's engine, which polls slowly after a quiet while) gets ready for them.
    // Cheap; called on every op's launch path.
    virtual void expect_traffic() {}

    virtual NetworkStats stats() const = 0;
    // Why the network stopped delivering on this rank (empty while it works).
    virtual std::string failure() const { return {}; }
    // For a timeout over the network: what this rank's network has issued but the GPU has not yet
    // run ("its copy stream still holds work issued 11.9 s ago"), empty when nothing is pending or
    // the backend cannot tell. Tells a receiver stuck behind undelivered work from a sender that
    // never asked.
    virtual std::string pending_note() const { return {}; }

    // Buffer::check_network's state (network_check.cpp): device words for the kernel's results
    // (and their pinned host mirror), and the values its signals and counters reached so far
    // (monotone; zero again after a reset).
    struct CheckState {
        int64_t* results_device = nullptr;
        int64_t* results_host = nullptr;
        uint64_t signal_base[device::kNetMaxContexts] = {};
        uint64_t counter_base[device::kNetMaxContexts] = {};
        uint64_t ping_base = 0;
    };
    CheckState& check_state() { return check_; }

  protected:
    // Allocates the check's result words (at creation, between the ranks' barriers).
    Network(const comm::NodeLayout& layout, int device);
    comm::NodeLayout layout_;
    CheckState check_;
};

}  // namespace switchyard::net
