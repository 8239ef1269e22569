// What every kernel launcher needs from a buffer: the device, the stream, the mapped memory and
// the diagnostics of this rank.
#pragma once

#include <cuda_runtime_api.h>

#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/routing/routing_kernel.cuh"

namespace switchyard::core {
class OutputMemory;
}
namespace switchyard::net {
class Network;
}

namespace switchyard::launch {

struct LaunchContext {
    int device = 0;
    cudaStream_t stream = nullptr;
    int32_t rank = 0;
    int32_t num_ranks = 1;
    uint8_t* local_base = nullptr;
    uint8_t* const* peer_bases = nullptr;  // device array [R]
    uint64_t peer_table_digest = 0;        // XOR of its entries as the host wrote them
    device::BufferLayout layout{};
    device::Diagnostics diagnostics{};
    int sm_budget = 1;
    // No other rank shares this GPU. The kernels of an op are chained with programmatic dependent
    // launch everywhere; only on a GPU of its own may a dispatch let the receive kernel's blocks
    // become resident as it starts (with co-located ranks they would hold SMs of this rank's share
    // through the whole dispatch).
    bool gpu_alone = false;
    // Another rank of this process shares this GPU: a kernel loaded now would wait for the device's
    // queued work, which may be that rank's kernel waiting for this one (DESIGN.md §4, rule 7).
    // Launchers of kernels that wait for peers then refuse a kernel not loaded beforehand.
    bool kernels_preloaded_only = false;
    const core::OutputMemory* outputs = nullptr;  // the buffer's memory for outputs
    device::RoutingScratch routing_scratch{};     // the layout kernel's tagged per-chunk totals and epoch
    // The scale-out network (null on one node): kernels of the emulated backend take
    // network->emulated_context(), those of GIN network->gin_context() (net/network.hpp).
    const net::Network* network = nullptr;
    // BufferConfig::ht_mask_unresponsive_ranks (HtCommon::mask_unresponsive, ht/masking.cuh).
    bool ht_mask_unresponsive = false;
};

// Cross-rank barrier kernel (one block): over NVLink on one node; across nodes, the rail peers
// over the network first, then the node.
void launch_barrier(const LaunchContext& context);

// Preloading. Loading a kernel module waits for the work queued on the device; with several ranks
// on one GPU that can be a co-located peer's kernel waiting for this rank, which launches its
// matching kernel only after the load (DESIGN.md §4, rule 7). A buffer with co-located ranks
// therefore loads its fixed kernels when it is created (preload_barrier, preload_routing); the HT
// and LL kernels, whose templates depend on the op's shape, are loaded by Buffer::ht_load_kernels
// and Buffer::ll_load_kernels.
// `nodes`: the buffer spans emulated nodes, whose barrier kernel meets the rail peers first.
void preload_barrier(int device, bool nodes = false);
// Every routing kernel (both index types, with or without histogram); `nodes`: those with the node
// columns of a buffer spanning nodes instead.
void preload_routing(int device, bool nodes = false);

// Dispatch layout kernel over `args` (its scratch and diagnostics are filled from the context).
void launch_routing(const LaunchContext& context, device::RoutingArgs args, bool index_is_int64);

}  // namespace switchyard::launch
