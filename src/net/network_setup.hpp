// How a Buffer sets up its network, in the three steps buffer creation needs (all collective):
//   plan_network      which backend (resolve_network_kind), the node layout; for GIN, every rank's
//                     capability is decided and agreed before any rank waits on another
//   allocate_windows  the ranks' symmetric buffers: cudaMalloc + CUDA IPC as on one node, or for
//                     GIN NCCL's allocation registered as a window, its node's peers mapped by NCCL
//   create_network    this rank's end of the network over those buffers (null on one node)
#pragma once

#include <chrono>
#include <memory>

#include "comm/symmetric_memory.hpp"
#include "comm/topology.hpp"
#include "net/network.hpp"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/communicator.hpp"
#include "switchyard/config.hpp"

namespace switchyard::net {

class GinResources;  // gin_network.hpp

struct NetworkPlan {
    NetworkKind kind = NetworkKind::kNone;
    comm::NodeLayout layout;
    std::shared_ptr<GinResources> gin;  // kGin: the device communicator, the window (after allocation)
};

NetworkPlan plan_network(Communicator& communicator, const Topology& topology, const BufferConfig& config,
                         int device, std::chrono::milliseconds timeout);

std::unique_ptr<comm::SymmetricMemory> allocate_windows(NetworkPlan& plan, Communicator& communicator,
                                                        const Topology& topology, int device, size_t bytes,
                                                        std::chrono::milliseconds timeout);

struct NetworkDiagnostics {
    device::ErrorRecord* host_record = nullptr;  // the buffer's error record (host view)
    uint32_t* poison = nullptr;                  // the buffer's poison word (device memory)
};

std::unique_ptr<Network> create_network(NetworkPlan& plan, Communicator& communicator, const Topology& topology,
                                        const comm::SymmetricMemory& windows, int device, const BufferConfig& config,
                                        const NetworkDiagnostics& diagnostics, std::chrono::milliseconds timeout);

}  // namespace switchyard::net
