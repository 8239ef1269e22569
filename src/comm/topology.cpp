// Topology detection (see topology.hpp).
#include "comm/topology.hpp"
#include "util/env_knobs.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "switchyard/errors.hpp"

namespace switchyard {

int32_t Topology::num_gpus() const {
    std::set<std::pair<uint64_t, std::string>> gpus;
    for (const auto& placement : placements) gpus.insert({placement.host_id, placement.gpu_bus_id});
    return static_cast<int32_t>(gpus.size());
}

std::string Topology::describe() const {
    std::set<uint64_t> hosts;
    for (const auto& placement : placements) hosts.insert(placement.host_id);
    std::ostringstream out;
    out << num_ranks << " ranks on " << num_gpus() << " GPU(s) of " << hosts.size() << " host(s), "
        << num_nodes << (emulated_nodes ? " emulated" : "") << " node(s); rank " << rank << ": device "
        << placements[rank].device << " (" << placements[rank].gpu_bus_id << ", " << ranks_on_my_gpu
        << " rank(s) on it)";
    return out.str();
}

namespace comm {
namespace {

// Wire format of one rank's placement for the all-gather (fixed size, trivially copyable).
struct PlacementWire {
    uint64_t host_id;
    int32_t process_id;
    int32_t device;
    char bus_id[32];
};

uint64_t local_host_id() {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    std::string identity = name;
    std::ifstream boot_id("/proc/sys/kernel/random/boot_id");
    std::string boot;
    if (boot_id >> boot) identity += "/" + boot;
    // FNV-1a: stable across processes (std::hash is not guaranteed to be).
    uint64_t hash = 1469598103934665603ull;
    for (unsigned char c : identity) hash = (hash ^ c) * 1099511628211ull;
    return hash;
}

int emulated_nodes_from_environment() {
    return static_cast<int>(util::knob_int(util::Knob::kEmulatedNodes, 0));
}

}  // namespace

Topology make_topology(int rank, std::vector<RankPlacement> placements, int emulated_nodes) {
    Topology topology;
    topology.rank = rank;
    topology.num_ranks = static_cast<int32_t>(placements.size());
    topology.placements = std::move(placements);
    const int num_ranks = topology.num_ranks;
    topology.node_of_rank.assign(num_ranks, 0);
    if (emulated_nodes > 0) {
        if (num_ranks % emulated_nodes != 0)
            throw InvalidArgument("cannot split " + std::to_string(num_ranks) + " ranks into " +
                                  std::to_string(emulated_nodes) + " emulated nodes of equal size");
        for (int r = 0; r < num_ranks; ++r) topology.node_of_rank[r] = r / (num_ranks / emulated_nodes);
        topology.num_nodes = emulated_nodes;
        topology.emulated_nodes = true;
    } else {
        std::vector<uint64_t> hosts;
        for (int r = 0; r < num_ranks; ++r) {
            const uint64_t host = topology.placements[r].host_id;
            int node = -1;
            for (size_t h = 0; h < hosts.size(); ++h)
                if (hosts[h] == host) node = static_cast<int>(h);
            if (node < 0) {
                node = static_cast<int>(hosts.size());
                hosts.push_back(host);
            }
            topology.node_of_rank[r] = node;
        }
        topology.num_nodes = static_cast<int32_t>(hosts.size());
    }
    topology.ranks_on_my_gpu = 0;
    for (int r = 0; r < num_ranks; ++r) {
        if (!topology.same_gpu(r)) continue;
        if (r < rank) ++topology.index_on_my_gpu;
        ++topology.ranks_on_my_gpu;
    }
    return topology;
}

std::vector<int32_t> NodeLayout::rail_peers() const {
    std::vector<int32_t> peers;
    for (int32_t n = 0; n < num_nodes; ++n)
        if (n != node) peers.push_back(rail_peer(n));
    return peers;
}

NodeLayout node_layout(const Topology& topology) {
    const int32_t num_ranks = topology.num_ranks, num_nodes = topology.num_nodes;
    std::vector<int32_t> count(static_cast<size_t>(num_nodes), 0);
    for (int32_t r = 0; r < num_ranks; ++r) {
        const int32_t node = topology.node_of_rank[r];
        if (node < 0 || node >= num_nodes)
            throw InvalidArgument("switchyard: rank " + std::to_string(r) + " is on node " + std::to_string(node) +
                                  " of " + std::to_string(num_nodes));
        ++count[node];
    }
    for (int32_t n = 1; n < num_nodes; ++n)
        if (count[n] != count[0])
            throw InvalidArgument("switchyard: node " + std::to_string(n) + " has " + std::to_string(count[n]) +
                                  " rank(s) but node 0 has " + std::to_string(count[0]) +
                                  "; a buffer spanning nodes needs the same number of ranks on every node "
                                  "(launch as many ranks on every host)");
    const int32_t per_node = count.empty() ? num_ranks : count[0];
    for (int32_t r = 0; r < num_ranks; ++r) {
        if (topology.node_of_rank[r] == r / per_node) continue;
        const int32_t node = topology.node_of_rank[r];
        throw InvalidArgument("switchyard: rank " + std::to_string(r) + " is on node " + std::to_string(node) +
                              ", but with " + std::to_string(per_node) + " rank(s) per node it must be on node " +
                              std::to_string(r / per_node) + ": the ranks of each node must form one contiguous " +
                              "block, in node order (node 0: ranks 0-" + std::to_string(per_node - 1) +
                              ", node 1: ranks " + std::to_string(per_node) + "-" +
                              std::to_string(2 * per_node - 1) + ", ...); order the ranks by host");
    }
    NodeLayout layout;
    layout.num_nodes = num_nodes;
    layout.ranks_per_node = per_node;
    layout.rank = topology.rank;
    layout.node = topology.rank / per_node;
    layout.local_index = topology.rank % per_node;
    return layout;
}

Topology detect_topology(Communicator& communicator, int device, int emulated_nodes,
                         std::chrono::milliseconds timeout) {
    PlacementWire wire{};
    wire.host_id = local_host_id();
    wire.process_id = static_cast<int32_t>(getpid());
    wire.device = device;
    if (cudaDeviceGetPCIBusId(wire.bus_id, sizeof(wire.bus_id), device) != cudaSuccess)
        throw CudaError("switchyard: cannot read the PCI bus id of device " + std::to_string(device));
    const auto gathered = communicator.all_gather_value(wire, timeout);
    std::vector<RankPlacement> placements(gathered.size());
    for (size_t r = 0; r < gathered.size(); ++r) {
        placements[r].rank = static_cast<int32_t>(r);
        placements[r].host_id = gathered[r].host_id;
        placements[r].process_id = gathered[r].process_id;
        placements[r].device = gathered[r].device;
        placements[r].gpu_bus_id =
            std::string(gathered[r].bus_id, strnlen(gathered[r].bus_id, sizeof(wire.bus_id)));
    }
    const int nodes = emulated_nodes > 0 ? emulated_nodes : emulated_nodes_from_environment();
    return make_topology(communicator.rank(), std::move(placements), nodes);
}

}  // namespace comm
}  // namespace switchyard
