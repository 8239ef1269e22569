// HT dispatch and combine across nodes (`switchyard-bench ht --nodes N`): the hierarchical path on
// the ranks split into N emulated nodes (one host, the emulated network at its default cap), at
// every SM count of the sweep and at the SM model's choice, FP8 and BF16 dispatch (rank-major,
// device counts), BF16 combine. Records carry the network figures: `nodes`, `network_gbps` (the
// busiest rank's network bytes / median time), `fraction_of_network_cap`, the bytes the network
// carried against the prediction from the routing, and NVLink GB/s of the rows moved inside a node.
//
// Every timed op starts after a host rendezvous and the GPU barrier across nodes (each rank meets
// its rail peers over the network, then its node), as the one-node benches start after theirs: the
// ranks' streams leave their gates microseconds to tens of microseconds apart, and an op's time is
// the slowest rank's. The barrier's own release differs between ranks by the network's delivery
// times of its signals.
#pragma once

#include <vector>

#include "cli.hpp"
#include "record.hpp"
#include "run_info.hpp"

namespace switchyard::bench {

void measure_ht_nodes(const BenchOptions& options, int ranks, int gpus, int nodes, const RunInfo& run,
                      std::vector<BenchRecord>& records, JsonObject& meta);

}  // namespace switchyard::bench
