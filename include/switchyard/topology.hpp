// Where the ranks run: which host (node), process and GPU each rank uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace switchyard {

struct RankPlacement {
    int32_t rank = 0;
    uint64_t host_id = 0;  // hash of the host name and boot id
    int32_t process_id = 0;
    int32_t device = 0;      // CUDA device ordinal in that process
    std::string gpu_bus_id;  // PCI bus id, unique per GPU on a host
};

struct Topology {
    int32_t rank = 0;
    int32_t num_ranks = 1;
    std::vector<RankPlacement> placements;  // [R]
    std::vector<int32_t> node_of_rank;      // [R] scale-up domain (NVLink) of each rank
    int32_t num_nodes = 1;
    bool emulated_nodes = false;  // nodes come from an override, not from hosts
    int32_t ranks_on_my_gpu = 1;  // ranks (this one included) sharing this rank's GPU
    int32_t index_on_my_gpu = 0;  // this rank's position among them

    bool same_node(int peer) const { return node_of_rank[peer] == node_of_rank[rank]; }
    bool same_host(int peer) const { return placements[peer].host_id == placements[rank].host_id; }
    bool same_process(int peer) const {
        return same_host(peer) && placements[peer].process_id == placements[rank].process_id;
    }
    bool same_gpu(int peer) const {
        return same_host(peer) && placements[peer].gpu_bus_id == placements[rank].gpu_bus_id;
    }
    int32_t num_gpus() const;      // distinct GPUs over all ranks
    std::string describe() const;  // "8 ranks on 2 GPUs of 1 host, 1 node; rank 3: GPU 0 (4 ranks)"
};

}  // namespace switchyard
