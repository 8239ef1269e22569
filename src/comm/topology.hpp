// Topology detection: every rank reports its host, process and GPU; nodes are hosts unless an
// override splits the ranks into emulated nodes (SWITCHYARD_EMULATED_NODES or the config).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "switchyard/communicator.hpp"
#include "switchyard/topology.hpp"

namespace switchyard::comm {

// Collective. `emulated_nodes` = 0 means: the environment variable, else real hosts.
Topology detect_topology(Communicator& communicator, int device, int emulated_nodes,
                         std::chrono::milliseconds timeout);

// Pure part (tested on the CPU): nodes and GPU sharing from the gathered placements.
Topology make_topology(int rank, std::vector<RankPlacement> placements, int emulated_nodes);

// The ranks as nodes for the scale-out path: N nodes of G ranks each (any G >= 1), node n holding
// the contiguous block of ranks [n * G, (n + 1) * G). A rank is local index r % G on node r / G;
// its rail peers are the ranks with its local index on the other nodes (one per node), the only
// ranks it reaches over the network.
struct NodeLayout {
    int32_t num_nodes = 1;
    int32_t ranks_per_node = 1;
    int32_t rank = 0;
    int32_t node = 0;         // this rank's node
    int32_t local_index = 0;  // this rank's index inside its node

    int32_t rank_of(int32_t node_index, int32_t local) const { return node_index * ranks_per_node + local; }
    int32_t node_of(int32_t any_rank) const { return any_rank / ranks_per_node; }
    int32_t local_index_of(int32_t any_rank) const { return any_rank % ranks_per_node; }
    // This rank's rail peer on `node_index` (itself on its own node).
    int32_t rail_peer(int32_t node_index) const { return rank_of(node_index, local_index); }
    // The rail peers on the other nodes, by node ascending (empty on one node).
    std::vector<int32_t> rail_peers() const;
};

// The node layout of `topology`. Throws InvalidArgument, naming the offending node and ranks, when
// the nodes hold different numbers of ranks or a node's ranks are not one contiguous block of
// ranks in node order (rank order must list node 0's ranks, then node 1's, ...).
NodeLayout node_layout(const Topology& topology);

}  // namespace switchyard::comm
