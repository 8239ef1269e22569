// Topology detection: every rank reports its host, process and GPU; nodes are hosts unless an
// override splits the ranks into emulated nodes (SWITCHYARD_EMULATED_NODES or the config).
#pragma once

#include <chrono>

#include "switchyard/communicator.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::comm {

// Collective. `emulated_nodes` = 0 means: the environment variable, else real hosts.
Topology detect_topology(Communicator& communicator, int device, int emulated_nodes,
                         std::chrono::milliseconds timeout);

// Pure part (tested on the CPU): nodes and GPU sharing from the gathered placements.
Topology make_topology(int rank, std::vector<RankPlacement> placements, int emulated_nodes);

}  // namespace switchyard::comm
