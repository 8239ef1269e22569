// Symmetric memory: one device allocation per rank, mapped into every peer of its NVLink domain.
//
// Same process: the peer's pointer is used directly (peer access enabled between devices).
// Other processes on the host: CUDA IPC handles, exchanged through the communicator. Ranks on
// other hosts are not mapped (their entry is null): they are reached through the scale-out path.
//
// Kernels see only their own node: in the device peer table, ranks on other nodes are null even
// where this process maps them (emulated nodes on one host), so no kernel holds a pointer into
// another node's memory. The host mapping (peer()) keeps them for the emulated network's engine.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "switchyard/communicator.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::comm {

class SymmetricMemory {
  public:
    // Collective over `communicator`. Allocates `bytes` on `device` (zeroed) and maps the peers.
    SymmetricMemory(Communicator& communicator, const Topology& topology, int device, size_t bytes,
                    std::chrono::milliseconds timeout);
    // Adopts memory allocated and mapped elsewhere (NCCL GIN's window: src/net/gin_network.cpp):
    // `peers` [R] holds each rank's buffer as mapped here (null where not mapped). Frees only its
    // own device table.
    SymmetricMemory(const Topology& topology, int device, uint8_t* local, size_t bytes, std::vector<uint8_t*> peers);
    ~SymmetricMemory();
    SymmetricMemory(const SymmetricMemory&) = delete;
    SymmetricMemory& operator=(const SymmetricMemory&) = delete;

    uint8_t* local() const { return local_; }
    size_t bytes() const { return bytes_; }
    // Rank r's buffer as mapped in this process (local() for this rank), null if not mapped. For
    // ranks on other nodes this is for the host (the emulated network's engine) only.
    uint8_t* peer(int rank) const { return peers_[rank]; }
    // The table in device memory, for kernels: uint8_t* [R], null for ranks on other nodes.
    uint8_t* const* device_peer_table() const { return device_peer_table_; }
    // XOR of the table's entries, for kernels to check the table against (barrier kernel).
    uint64_t peer_table_digest() const { return peer_table_digest_; }

  private:
    // Writes the kernels' table (this node's ranks only) to device memory and checks it.
    void publish_device_table(const Topology& topology);

    bool owns_local_ = true;
    int device_ = 0;
    size_t bytes_ = 0;
    uint8_t* local_ = nullptr;
    std::vector<uint8_t*> peers_;
    std::vector<bool> opened_by_ipc_;
    uint8_t** device_peer_table_ = nullptr;
    uint64_t peer_table_digest_ = 0;
};

}  // namespace switchyard::comm
