// The analytical SM model (DESIGN.md §7): how many SMs a communication kernel needs to keep its
// bottleneck link busy, computed from a bandwidth model instead of auto-tuning.
//
// Per unit of token payload, a sender SM reads the token once and writes it once per distinct
// destination rank; the links carry only the remote share of those writes. The SM count that
// matches the SMs' read and write throughput to the link's throughput, with headroom, is the
// answer. All figures are per-arch constants that a calibration can replace.
//
// With several nodes (num_nodes > 1) the ops are the hierarchical ones: the network is the link to
// keep busy (one copy per other destination node crosses it), and per token byte the SMs read and
// write what the hierarchical roles move: dispatch, reads 1 + N_d (the token, then each node's
// record at its forwarder) and writes N_d + D (a record per destination node, a row per destination
// rank); combine, reads 2 D + N_d and writes D + N_d (rows to the forwarders, partials back), with
// N_d the expected distinct destination nodes and D the distinct destination ranks of a token.
#pragma once

#include <string>

namespace switchyard {

// Expected number of distinct groups hit by top-k of `num_experts` experts, when the experts are
// split into `num_groups` equal groups and the k experts are a uniform random k-subset:
//   g * (1 - C(E - E/g, k) / C(E, k)).
double expected_distinct_groups(int num_experts, int topk, int num_groups);

struct ArchBandwidth {
    double sm_read_gbps = 200.0;  // one SM reading local HBM with bulk copies
    // One SM storing to a peer over NVLink, as the HT dispatch achieves it (calibrated: with it the
    // model picks the SM count the EP2 sweeps on 2 x H200 found fastest for both dispatches).
    double sm_write_gbps = 65.0;
    double nvlink_gbps = 390.0;  // per direction, copy-engine peer bound
    double rdma_gbps = 46.0;     // per NIC, scale-out
};

// Which kernel the SM count is for. The HT combine gives only some of each block's warps to
// sending (the others reduce), so one of its SMs writes at that share of sm_write_gbps.
enum class SmModelOp { kDispatch, kCombine };

// Constants for a compute capability (9.x: measured on H200 NV18; others: conservative leads).
ArchBandwidth default_arch_bandwidth(int compute_capability_major);

struct SmModelInput {
    int num_experts = 256;
    int topk = 8;
    int num_ranks = 8;  // R
    int num_nodes = 1;  // scale-out groups; 1 = one NVLink domain (direct kernels)
    int num_device_sms = 132;
    int max_sms = 0;         // budget (e.g. SMs / ranks sharing the GPU); 0 = num_device_sms
    double headroom = 1.25;  // over the balanced-load estimate
    ArchBandwidth bandwidth{};
    SmModelOp op = SmModelOp::kDispatch;
    double combine_send_fraction = 10.0 / 16.0;  // an HT combine block's share of its write rate
};

struct SmModelResult {
    double expected_ranks_per_token = 0;  // distinct destination ranks of one token
    double expected_nodes_per_token = 0;  // distinct destination nodes of one token
    double link_bytes_per_token = 0;      // bottleneck link bytes per token byte sent by this rank
    double sm_read_bytes_per_token = 0;   // SM read bytes per token byte
    double sm_write_bytes_per_token = 0;  // SM write bytes per token byte
    double link_gbps = 0;                 // the bottleneck link's bandwidth
    std::string bottleneck;               // "nvlink" or "rdma" or "none"
    double exact_sms = 0;                 // before headroom and rounding
    int num_sms = 0;                      // the choice: rounded up to even, within [2, budget]
};

SmModelResult model_num_sms(const SmModelInput& input);

}  // namespace switchyard
