// What a Buffer allocates for its configuration, in one place: the Buffer itself and the public
// planning functions (switchyard/planning.hpp) both call these, so a size hint is what creation
// takes.
#pragma once

#include <cstddef>

#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/config.hpp"
#include "switchyard/routing/routing_kernel.cuh"

namespace switchyard::core {

// The capacities the symmetric buffer's layout is computed from (`num_nodes`: the nodes the ranks
// span, Topology::num_nodes).
device::BufferCapacity buffer_capacity(const BufferConfig& config, int num_ranks, int num_nodes);

// Bytes the buffer's output pool reserves at creation: the largest single op's outputs with some
// slack, capped at 1 GiB (beyond that the pool grows on demand).
size_t output_pool_reserve_bytes(const BufferConfig& config, int num_ranks);

// The routing kernel's scratch for the buffer's largest op (words unset: the Buffer allocates them).
device::RoutingScratch routing_scratch_extent(const BufferConfig& config, int num_ranks, int num_nodes);

}  // namespace switchyard::core
