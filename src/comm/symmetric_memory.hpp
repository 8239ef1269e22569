// Symmetric memory: one device allocation per rank, mapped into every peer of its NVLink domain.
//
// Same process: the peer's pointer is used directly (peer access enabled between devices).
// Other processes on the host: CUDA IPC handles, exchanged through the communicator. Ranks on
// other nodes are not mapped (their entry is null): they are reached through the scale-out path.
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
    ~SymmetricMemory();
    SymmetricMemory(const SymmetricMemory&) = delete;
    SymmetricMemory& operator=(const SymmetricMemory&) = delete;

    uint8_t* local() const { return local_; }
    size_t bytes() const { return bytes_; }
    // Rank r's buffer as mapped in this process (local() for this rank), null if not mapped.
    uint8_t* peer(int rank) const { return peers_[rank]; }
    // The same table in device memory, for kernels: uint8_t* [R].
    uint8_t* const* device_peer_table() const { return device_peer_table_; }
    // XOR of the table's entries, for kernels to check the table against (barrier kernel).
    uint64_t peer_table_digest() const { return peer_table_digest_; }

  private:
    int device_ = 0;
    size_t bytes_ = 0;
    uint8_t* local_ = nullptr;
    std::vector<uint8_t*> peers_;
    std::vector<bool> opened_by_ipc_;
    uint8_t** device_peer_table_ = nullptr;
    uint64_t peer_table_digest_ = 0;
};

}  // namespace switchyard::comm
