// Types of the scale-out transport shared by the device API (net.cuh) and the host (src/net/): the
// backend tags, the per-backend contexts a kernel receives in its argument struct, the emulated
// network's request descriptor, and the detail words of a network timeout. Plain structs with
// fixed-width fields only, so host (g++) and device (NVRTC, nvcc) agree on every offset.
#pragma once

#include "switchyard/common/base.cuh"

namespace switchyard::device {

// --- Sizes --------------------------------------------------------------------------------------
// Contexts per rank (NCCL 2.28 caps GIN at 4). Requests on one context to one peer are ordered by
// the signals among them; nothing orders different contexts.
constexpr int32_t kNetMaxContexts = 4;
// Signals per receiving rank and local counters per rank, ids [0, count), each belonging to one
// context (net.cuh, contract 6). The library's kernels lay signal ids out per source node (each id
// is raised by one source rank only).
constexpr int32_t kNetNumSignals = 4096;
constexpr int32_t kNetNumCounters = 1024;
// The network check (transport/net_check.cuh) reserves the top kNetCheckIds signal and counter ids
// (up to kNetCheckMaxNodes nodes); every other kernel of the library uses ids below them.
constexpr int32_t kNetCheckMaxNodes = 64;
constexpr uint32_t kNetCheckIds = uint32_t(kNetCheckMaxNodes * (kNetMaxContexts + 1));
// Signal ids below the check's, from the top: the LL kernels' four per source node
// (ll/net_layout.cuh), then the barrier's one per source node (transport/net_barrier.cuh); the HT
// kernels use the ids below those (hier/hier_layout.cuh, kHierSignalIdLimit).
constexpr int32_t kNetLlSignalIds = 4 * 64;
constexpr int32_t kNetBarrierMaxNodes = 64;
constexpr uint32_t kNetBarrierSignalBase =
    uint32_t(kNetNumSignals) - kNetCheckIds - uint32_t(kNetLlSignalIds) - uint32_t(kNetBarrierMaxNodes);
// "No signal" / "no counter" in a request.
constexpr uint32_t kNetNone = 0xffffffffu;

// --- Actions a request carries (net.cuh) ---------------------------------------------------------
// A remote signal add: signal `id` of the destination rank grows by `value` once this request's
// payload and every earlier put on the same context to the same peer have landed.
struct NetSignal {
    uint32_t id = kNetNone;
    uint64_t value = 0;
    SY_HOST_DEVICE bool present() const { return id != kNetNone; }
};
SY_HOST_DEVICE NetSignal net_signal_add(uint32_t id, uint64_t value) {
    NetSignal signal;
    signal.id = id;
    signal.value = value;
    return signal;
}

// A local counter increment: counter `id` of the issuing rank grows by one once this put's source
// has been read (the source may then be reused).
struct NetCounter {
    uint32_t id = kNetNone;
    SY_HOST_DEVICE bool present() const { return id != kNetNone; }
};
SY_HOST_DEVICE NetCounter net_counter_inc(uint32_t id) {
    NetCounter counter;
    counter.id = id;
    return counter;
}

// --- Emulated network ----------------------------------------------------------------------------
enum NetRequestKind : uint32_t {
    kNetRequestPut = 1,     // bytes from this rank's window to the peer's (signal and counter optional)
    kNetRequestSignal = 2,  // a bare signal add (a zero-byte put)
    kNetRequestFlush = 3,   // report when every earlier put on the context has read its source
};

// One request in a (rank, context) ring, in mapped host memory. The kernel claims a position with
// a device atomic, writes the fields, then the tag (position + 1) last, with release semantics at
// system scope; the host engine consumes positions in order and takes a slot only once its tag
// matches. 64 bytes: one write-combined burst over PCIe.
struct NetDescriptor {
    uint64_t dst_offset;  // into the destination rank's window
    uint64_t src_offset;  // into this rank's window
    uint64_t bytes;
    uint64_t signal_value;
    uint32_t kind;  // NetRequestKind
    int32_t peer_node;
    uint32_t signal_id;   // kNetNone: no signal
    uint32_t counter_id;  // kNetNone: no counter
    uint64_t posted_ns;   // the kernel's globaltimer when it posted (its due time, the GPU's clock)
    uint64_t tag;         // position + 1 once valid
};
static_assert(sizeof(NetDescriptor) == 64, "a ring slot is 64 bytes");

// This rank's network state in device memory (one allocation, mapped into the other ranks of the
// host for their engines, never into kernels): the signals peers raise here, then the local
// counters, the flush reports and the ring bookkeeping. Offsets in 64-bit words.
struct EmulatedNetState {
    // Signals and counters per context, as GIN keeps them: [context][id].
    static constexpr int64_t kSignals = 0;
    static constexpr int64_t kCounters = kSignals + int64_t(kNetMaxContexts) * kNetNumSignals;
    static constexpr int64_t kFlushDone =
        kCounters + int64_t(kNetMaxContexts) * kNetNumCounters;             // [context]
    static constexpr int64_t kRingHeads = kFlushDone + kNetMaxContexts;     // [context] claims (kernels)
    static constexpr int64_t kRingFreeHint = kRingHeads + kNetMaxContexts;  // [context] (kernels)
    // The engine's copy kernel: blocks of the running launch past their pieces (net_copy.cuh).
    static constexpr int64_t kCopyBlocksDone = kRingFreeHint + kNetMaxContexts;
    static constexpr int64_t kWords = kCopyBlocksDone + 1;
    static constexpr int64_t kBytes = kWords * 8;
};

// What a kernel needs to use the emulated network (net_emulated.cuh). Filled by the host engine.
struct EmulatedNetContext {
    NetDescriptor* rings;           // [kNetMaxContexts][ring_slots]: device alias of mapped host memory
    const uint64_t* ring_consumed;  // [kNetMaxContexts]: positions the engine took (mapped host memory)
    uint64_t* state;                // this rank's EmulatedNetState (device memory)
    uint64_t window_bytes;          // bytes of every rank's window (its symmetric buffer)
    uint32_t ring_slots;            // a power of two
    int32_t num_contexts;           // <= kNetMaxContexts
    int32_t rank;
    int32_t node;
    int32_t num_nodes;
    int32_t local_index;
    int32_t ranks_per_node;
    int32_t pad;
};

// --- NCCL GIN ----------------------------------------------------------------------------------------
// The ncclDevComm is carried as bytes: host code outside the GIN setup never sees nccl.h. 512 bytes
// hold every ncclDevComm we build against (200 bytes in 2.28.9, 240 in 2.30.7); net_gin.cuh
// checks the size and alignment at compile time and the setup checks them at run time.
constexpr int32_t kGinDevCommSlotBytes = 512;

struct GinNetContext {
    alignas(16) uint8_t dev_comm[kGinDevCommSlotBytes];  // an ncclDevComm, by value
    void* window;                                        // ncclWindow_t of the buffer
    uint64_t window_bytes;
    int32_t num_contexts;  // <= the device communicator's ginContextCount
    int32_t rank;
    int32_t node;
    int32_t num_nodes;
    int32_t local_index;
    int32_t ranks_per_node;
};

// --- Backend tags ------------------------------------------------------------------------------------
// A kernel that uses the network is a template on one of these; the launcher picks the one the
// buffer's backend needs (Gin kernels are compiled by nvcc against the NCCL headers, see src/jit).
struct NetEmulated {
    using Context = EmulatedNetContext;
};
struct NetGin {
    using Context = GinNetContext;
};

// --- Timeout details --------------------------------------------------------------------------------
// A network wait that times out fills the error record's detail words (diagnostics.cuh) so: the
// host prints the peer node, what was waited for, and "over the network" whatever the phase.
enum NetDetailWord : int32_t {
    kNetDetailPeerNode = 0,  // the node waited for (-1: this rank's own completion)
    kNetDetailId = 1,        // signal or counter id (-1 for ring space and flushes)
    kNetDetailContext = 2,
    kNetDetailWhat = 3,       // NetWaitKind (a timeout) or NetRequestProblem (kErrorNetworkRequest)
    kNetDetailTransport = 4,  // kNetTransportMarker
};
enum NetWaitKind : int32_t {
    kNetWaitSignal = 1,     // a signal raised by the peer node's rail peer
    kNetWaitCounter = 2,    // a local counter (this rank's puts reading their sources)
    kNetWaitFlush = 3,      // a flush of the context
    kNetWaitRingSpace = 4,  // a free slot in the emulated network's request ring
    kNetWaitRelay = 5,      // an arrival a node-mate relays once its signal from the peer node came (LL)
};
// Why a request was refused (kErrorNetworkRequest; expected/observed hold the limit and the value).
enum NetRequestProblem : int32_t {
    kNetBadDestination = 1,  // dst_offset + bytes past the window
    kNetBadSource = 2,       // src_offset + bytes past the window
    kNetBadSignal = 3,       // signal id >= kNetNumSignals
    kNetBadCounter = 4,      // counter id >= kNetNumCounters
    kNetBadPeerNode = 5,     // node outside [0, num_nodes)
    kNetBadContext = 6,      // context outside [0, num_contexts)
};
SY_HOST_DEVICE constexpr int64_t net_signal_word(int32_t context, uint32_t id) {
    return EmulatedNetState::kSignals + int64_t(context) * kNetNumSignals + id;
}
SY_HOST_DEVICE constexpr int64_t net_counter_word(int32_t context, uint32_t id) {
    return EmulatedNetState::kCounters + int64_t(context) * kNetNumCounters + id;
}
constexpr int64_t kNetTransportMarker = 0x4e4554574f524bll;  // "NETWORK"

}  // namespace switchyard::device
