// The copy-engine peer-to-peer bound: how fast cudaMemcpyPeerAsync moves bytes between two GPUs;
// with src_device == dst_device, the device-to-device copy rate, the bound of ranks that share a GPU.
//
// Our kernels are judged against this number (DESIGN.md §9: fraction_of_peer_bound), so it is
// measured in the same run, on the same machine, rather than taken from a datasheet.
#pragma once

#include <cstddef>
#include <vector>

#include "stats.hpp"

namespace switchyard::bench {

struct P2pCopyOptions {
    int src_device = 0;
    int dst_device = 1;
    std::vector<size_t> sizes = {size_t{256} << 20, size_t{1} << 30};
    int warmup = 2;
    int iters = 10;
};

struct P2pCopyResult {
    size_t bytes = 0;                 // per direction
    bool bidirectional = false;       // both directions at once
    TimingStats time_us;              // bidirectional: until the slower direction finished
    double gbps_per_direction = 0.0;  // bytes / median time
};

// Enables peer access both ways (already-enabled is fine; nothing to do for one device). Throws
// UnsupportedError if the GPUs cannot reach each other's memory.
void enable_peer_access(int device_a, int device_b);

// For each size: one direction alone, then both directions at once.
std::vector<P2pCopyResult> measure_p2p_copy(const P2pCopyOptions& options);

}  // namespace switchyard::bench
