// NCCL GIN as the scale-out network: a Buffer over an ncclComm_t spanning nodes.
//
// Set-up (collective over the buffer's NCCL communicator):
//   1. Capability, decided on every rank: NCCL device headers at build time, the NCCL loaded at run
//      time of the same version (GIN kernels and ncclDevComm are version-specific) and at least
//      2.28.9 (signals by id, counters, flush), its device-API entry points, and the GIN kernels
//      compiled (nvcc) and loaded. All-gathered and agreed before any rank calls a collective
//      NCCL function: without GIN every rank raises the same UnsupportedError naming the NCCL
//      versions (compiled and running) and what is missing, and no rank waits on another.
//   2. The buffer: ncclMemAlloc'd (cudaMalloc memory cannot be registered), registered as a window
//      (NCCL_WIN_COLL_SYMMETRIC), its node's peers mapped by NCCL and read back through the device
//      API (ncclGetLsaPointer) into the kernels' peer table. Outcome agreed again.
//   3. The device communicator: ncclDevCommCreate with GIN requirements (contexts, signals and
//      counters for transport/net.cuh), checked against our nodes (NCCL's LSA team must be this
//      rank's node, its rail team the rank's rail); outcome agreed again. ncclDevComm travels to
//      the kernels by value, as bytes in GinNetContext.
// A buffer over a single-node NCCL communicator never gets here: it keeps CUDA IPC (no GIN).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl_library.hpp"
#include "comm/symmetric_memory.hpp"
#include "comm/topology.hpp"
#include "net/network.hpp"
#include "switchyard/communicator.hpp"

namespace switchyard::net {

// What a rank lacks for GIN (bits of GinCapability::missing).
enum GinMissing : uint32_t {
    kGinNotBuilt = 1u << 0,         // the library was built without the NCCL device headers
    kGinNoLibrary = 1u << 1,        // NCCL could not be loaded
    kGinTooOld = 1u << 2,           // the NCCL running is older than 2.28.9
    kGinVersionMismatch = 1u << 3,  // running and compiled versions differ
    kGinNoEntryPoints = 1u << 4,    // the NCCL running lacks ncclDevCommCreate, windows or ncclMemAlloc
    kGinNoKernels = 1u << 5,        // the GIN kernels could not be compiled (nvcc) or loaded
    kGinWindowFailed = 1u << 6,     // ncclMemAlloc or ncclCommWindowRegister failed
    kGinDevCommFailed = 1u << 7,    // ncclDevCommCreate failed (no GIN-capable NIC, ...)
    kGinTeamMismatch = 1u << 8,     // NCCL's LSA team is not this rank's node
};

// The oldest NCCL whose GIN has what transport/net.cuh uses.
constexpr int kGinMinimumVersion = 22809;

// One rank's verdict, all-gathered (fixed size, trivially copyable).
struct GinCapability {
    int32_t rank = 0;
    int32_t compiled_version = 0;  // NCCL_VERSION_CODE of the headers built against (0: none)
    int32_t runtime_version = 0;   // ncclGetVersion (0: not loaded)
    uint32_t missing = 0;          // GinMissing bits
    char detail[200] = {};         // the first problem in words (NCCL's or the compiler's message)
};

// This rank's step-1 verdict, from what this process sees (and `kernels_ok`/`kernel_problem`: the
// GIN kernels compiled and loaded). Pure apart from the NCCL versions it is given.
GinCapability judge_gin(int32_t rank, int32_t compiled_version, int32_t runtime_version,
                        const std::string& library_problem, bool has_entry_points, bool kernels_ok,
                        const std::string& kernel_problem);

// Throws UnsupportedError on every rank unless every rank in `all` is capable; the message names
// each failing rank's NCCL versions (compiled and running) and what it lacks. `step` says which
// step of the set-up was agreed on. Pure (CPU-tested).
void agree_on_gin(const std::vector<GinCapability>& all, const std::string& step, int32_t num_nodes);

// The NCCL objects of a GIN buffer. Destroyed after the buffer's final barrier.
class GinResources {
  public:
    ~GinResources();
    nccl::Comm comm = nullptr;
    int device = 0;
    int32_t rank = 0;
    comm::NodeLayout layout;
    void* memory = nullptr;  // ncclMemAlloc
    size_t bytes = 0;
    void* window = nullptr;  // ncclWindow_t
    bool window_leaked = false;  // a peer failed registration: deregistering (collective) could hang
    bool dev_comm_created = false;
    int32_t num_contexts = 0;
    alignas(16) uint8_t dev_comm[device::kGinDevCommSlotBytes] = {};
};

// Step 1 on every rank, agreed. Throws UnsupportedError (same message everywhere) without GIN.
std::shared_ptr<GinResources> prepare_gin(Communicator& communicator, const Topology& topology,
                                          const comm::NodeLayout& layout, int device,
                                          std::chrono::milliseconds timeout);

// Steps 2 and 3: the buffer as a window, the device communicator, the kernels' peer table.
std::unique_ptr<comm::SymmetricMemory> allocate_gin_window(GinResources& gin, Communicator& communicator,
                                                           const Topology& topology, int device, size_t bytes,
                                                           std::chrono::milliseconds timeout);

class GinNetwork final : public Network {
  public:
    GinNetwork(const comm::NodeLayout& layout, std::shared_ptr<GinResources> resources, int device);
    NetworkKind kind() const override { return NetworkKind::kGin; }
    device::GinNetContext gin_context() const override;
    // The NIC moves the bytes on its own; nothing of ours to wait for.
    bool drain(std::chrono::milliseconds) override { return true; }
    void stop_for_reset(std::chrono::milliseconds) override {}
    // Zeroes every signal and counter (a kernel through the device API's resets).
    void clear_for_reset() override;
    void resume_after_reset() override {}
    void shutdown() override {}
    NetworkStats stats() const override;

  private:
    std::shared_ptr<GinResources> resources_;
    int device_;
};

}  // namespace switchyard::net
