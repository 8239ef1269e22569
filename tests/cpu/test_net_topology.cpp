// Nodes for the scale-out path (comm::node_layout): N nodes x G ranks, any G, from hosts or from
// the emulated-nodes override; a rank's node, local index and rail peers; the layouts refused.
#include <string>
#include <vector>

#include "comm/topology.hpp"
#include "common/testing.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;

namespace {

// One rank per entry: the host it runs on (all on GPU "A" of process 1 of their host).
std::vector<RankPlacement> on_hosts(const std::vector<uint64_t>& hosts) {
    std::vector<RankPlacement> out;
    for (size_t r = 0; r < hosts.size(); ++r) {
        RankPlacement p;
        p.rank = static_cast<int32_t>(r);
        p.host_id = hosts[r];
        p.process_id = 1;
        p.gpu_bus_id = "A" + std::to_string(r);
        out.push_back(p);
    }
    return out;
}

}  // namespace

SY_TEST(NetTopology, EmulatedNodesOfEveryShape) {
    struct Shape {
        int nodes, per_node;
    };
    for (const Shape shape : {Shape{2, 1}, Shape{2, 2}, Shape{4, 1}, Shape{2, 4}, Shape{4, 2}, Shape{1, 8}}) {
        const int ranks = shape.nodes * shape.per_node;
        for (int rank = 0; rank < ranks; ++rank) {
            const Topology t = comm::make_topology(rank, on_hosts(std::vector<uint64_t>(ranks, 7)), shape.nodes);
            const comm::NodeLayout layout = comm::node_layout(t);
            SY_CHECK_EQ(layout.num_nodes, shape.nodes);
            SY_CHECK_EQ(layout.ranks_per_node, shape.per_node);
            SY_CHECK_EQ(layout.node, rank / shape.per_node);
            SY_CHECK_EQ(layout.local_index, rank % shape.per_node);
            SY_CHECK_EQ(layout.rank_of(layout.node, layout.local_index), rank);
            const std::vector<int32_t> rail = layout.rail_peers();
            SY_CHECK_EQ(static_cast<int>(rail.size()), shape.nodes - 1);
            for (int32_t peer : rail) {
                SY_CHECK_EQ(layout.local_index_of(peer), layout.local_index);
                SY_CHECK(layout.node_of(peer) != layout.node);
            }
            SY_CHECK_EQ(layout.rail_peer(layout.node), rank);
        }
    }
}

SY_TEST(NetTopology, HostsInContiguousBlocks) {
    // 2 hosts x 3 ranks: rank 4 is local index 1 on node 1; its rail peer on node 0 is rank 1.
    const Topology t = comm::make_topology(4, on_hosts({11, 11, 11, 22, 22, 22}), 0);
    const comm::NodeLayout layout = comm::node_layout(t);
    SY_CHECK_EQ(layout.num_nodes, 2);
    SY_CHECK_EQ(layout.ranks_per_node, 3);
    SY_CHECK_EQ(layout.node, 1);
    SY_CHECK_EQ(layout.local_index, 1);
    const std::vector<int32_t> rail = layout.rail_peers();
    SY_CHECK(rail == std::vector<int32_t>{1});
    // Network only: one rank per host.
    const comm::NodeLayout single = comm::node_layout(comm::make_topology(2, on_hosts({1, 2, 3, 4}), 0));
    SY_CHECK_EQ(single.ranks_per_node, 1);
    SY_CHECK(single.rail_peers() == (std::vector<int32_t>{0, 1, 3}));
}

SY_TEST(NetTopology, UnequalNodesAreRefused) {
    const Topology t = comm::make_topology(0, on_hosts({1, 1, 1, 2}), 0);
    SY_CHECK_THROWS_WITH(comm::node_layout(t), InvalidArgument, "node 1 has 1 rank(s) but node 0 has 3");
    SY_CHECK_THROWS_WITH(comm::node_layout(t), InvalidArgument, "same number of ranks on every node");
}

SY_TEST(NetTopology, InterleavedNodesAreRefused) {
    // Ranks alternate between the hosts: equal counts, but no node is a contiguous block.
    const Topology t = comm::make_topology(0, on_hosts({1, 2, 1, 2}), 0);
    SY_CHECK_THROWS_WITH(comm::node_layout(t), InvalidArgument, "rank 1 is on node 1");
    SY_CHECK_THROWS_WITH(comm::node_layout(t), InvalidArgument, "one contiguous block");
}

SY_TEST(NetTopology, OneNode) {
    const comm::NodeLayout layout = comm::node_layout(comm::make_topology(1, on_hosts({5, 5, 5}), 0));
    SY_CHECK_EQ(layout.num_nodes, 1);
    SY_CHECK_EQ(layout.ranks_per_node, 3);
    SY_CHECK(layout.rail_peers().empty());
}

SY_TEST_MAIN()
