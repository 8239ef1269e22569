// Symmetric memory (see symmetric_memory.hpp).
#include "comm/symmetric_memory.hpp"

#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "util/cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::comm {
namespace {

struct MappingWire {
    cudaIpcMemHandle_t handle;
    uint64_t address;  // valid for peers in the same process
    uint64_t bytes;
};

// cudaDeviceEnablePeerAccess is per (current device, peer) and fails if repeated: remember pairs.
void enable_peer_access(int device, int peer_device) {
    static std::mutex mutex;
    static std::set<std::pair<int, int>> enabled;
    if (device == peer_device) return;
    std::lock_guard<std::mutex> lock(mutex);
    if (!enabled.insert({device, peer_device}).second) return;
    int can_access = 0;
    SY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device, peer_device));
    if (!can_access)
        throw UnsupportedError("switchyard: device " + std::to_string(device) + " cannot access device " +
                               std::to_string(peer_device) + " as a peer (no NVLink/P2P between them)");
    const cudaError_t status = cudaDeviceEnablePeerAccess(peer_device, 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
        (void)cudaGetLastError();  // clear the sticky-free error state
        return;
    }
    util::cuda_check(status, "cudaDeviceEnablePeerAccess");
}

}  // namespace

SymmetricMemory::SymmetricMemory(Communicator& communicator, const Topology& topology, int device,
                                 size_t bytes, std::chrono::milliseconds timeout)
    : device_(device), bytes_(bytes) {
    SY_CUDA_CHECK(cudaSetDevice(device));
    void* memory = nullptr;
    SY_CUDA_CHECK(cudaMalloc(&memory, bytes));
    local_ = static_cast<uint8_t*>(memory);
    SY_CUDA_CHECK(cudaMemset(local_, 0, bytes));
    SY_CUDA_CHECK(cudaDeviceSynchronize());

    MappingWire wire{};
    SY_CUDA_CHECK(cudaIpcGetMemHandle(&wire.handle, local_));
    wire.address = reinterpret_cast<uint64_t>(local_);
    wire.bytes = bytes;
    const auto gathered = communicator.all_gather_value(wire, timeout);

    const int num_ranks = communicator.size();
    peers_.assign(num_ranks, nullptr);
    opened_by_ipc_.assign(num_ranks, false);
    for (int peer = 0; peer < num_ranks; ++peer) {
        if (gathered[peer].bytes != bytes)
            throw InvalidArgument("switchyard: rank " + std::to_string(peer) + " allocated " +
                                  std::to_string(gathered[peer].bytes) + " bytes of symmetric memory, rank " +
                                  std::to_string(communicator.rank()) + " " + std::to_string(bytes) +
                                  "; all ranks must use the same buffer configuration");
        if (peer == communicator.rank()) {
            peers_[peer] = local_;
        } else if (!topology.same_host(peer)) {
            // Another host: reached through the scale-out path. Emulated nodes on one host stay
            // mapped here, for the emulated network's engine (not in the kernels' table).
            peers_[peer] = nullptr;
        } else if (topology.same_process(peer)) {
            enable_peer_access(device, topology.placements[peer].device);
            peers_[peer] = reinterpret_cast<uint8_t*>(gathered[peer].address);
        } else {
            void* mapped = nullptr;
            SY_CUDA_CHECK(
                cudaIpcOpenMemHandle(&mapped, gathered[peer].handle, cudaIpcMemLazyEnablePeerAccess));
            peers_[peer] = static_cast<uint8_t*>(mapped);
            opened_by_ipc_[peer] = true;
        }
    }
    publish_device_table(topology);
}

SymmetricMemory::SymmetricMemory(const Topology& topology, int device, uint8_t* local, size_t bytes,
                                 std::vector<uint8_t*> peers)
    : owns_local_(false), device_(device), bytes_(bytes), local_(local), peers_(std::move(peers)) {
    SY_CUDA_CHECK(cudaSetDevice(device));
    opened_by_ipc_.assign(peers_.size(), false);
    peers_[topology.rank] = local_;
    publish_device_table(topology);
}

void SymmetricMemory::publish_device_table(const Topology& topology) {
    const int num_ranks = static_cast<int>(peers_.size());
    // Kernels reach other nodes only through the scale-out transport, never through a pointer.
    std::vector<uint8_t*> table(peers_);
    for (int peer = 0; peer < num_ranks; ++peer)
        if (!topology.same_node(peer)) table[peer] = nullptr;
    SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_peer_table_), sizeof(uint8_t*) * num_ranks));
    SY_CUDA_CHECK(
        cudaMemcpy(device_peer_table_, table.data(), sizeof(uint8_t*) * num_ranks, cudaMemcpyHostToDevice));
    // A pageable host-to-device cudaMemcpy may return before its DMA has landed, and it is ordered
    // only on the legacy stream, which our non-blocking streams do not wait for: without this, the
    // first kernel could read a half-written table (stale pointers into a freed buffer).
    SY_CUDA_CHECK(cudaDeviceSynchronize());
    // Read the table back: a stale entry (a pointer into a freed buffer whose address another
    // buffer now holds) would make this rank write its signals into the wrong rank's memory, the
    // suspected cause of a rare barrier-stress failure with co-located ranks.
    std::vector<uint8_t*> check(num_ranks, nullptr);
    SY_CUDA_CHECK(
        cudaMemcpy(check.data(), device_peer_table_, sizeof(uint8_t*) * num_ranks, cudaMemcpyDeviceToHost));
    for (int peer = 0; peer < num_ranks; ++peer) {
        if (check[peer] != table[peer])
            throw Error("switchyard: rank " + std::to_string(topology.rank) +
                        ": the device peer table holds a stale address for rank " + std::to_string(peer));
        peer_table_digest_ ^= reinterpret_cast<uint64_t>(table[peer]);
    }
}

SymmetricMemory::~SymmetricMemory() {
    // Teardown must not throw; errors here mean the context is already gone.
    cudaSetDevice(device_);
    for (size_t peer = 0; peer < peers_.size(); ++peer)
        if (opened_by_ipc_[peer]) cudaIpcCloseMemHandle(peers_[peer]);
    if (device_peer_table_) cudaFree(device_peer_table_);
    if (local_ && owns_local_) cudaFree(local_);
}

}  // namespace switchyard::comm
