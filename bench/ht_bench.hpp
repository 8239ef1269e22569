// HT dispatch and combine (DESIGN.md §9): ranks as threads over the local GPUs (co-located when
// ranks > GPUs), 4096 tokens per rank, hidden 7168, top-8 of 256 experts by default; FP8 and BF16
// dispatch (rank-major, device counts: the graph-safe path), BF16 combine; at every SM count of the
// sweep and at the analytical model's choice, which is checked against the sweep's best.
//
// Every timed iteration starts with an L2 flush, a host rendezvous and a GPU barrier so the ranks
// start together; the stream is gated until the op is enqueued, so the events time the GPU (host
// time per call is reported apart); an op's time is the slowest rank's.
#pragma once

#include <vector>

#include "baseline.hpp"
#include "cli.hpp"
#include "record.hpp"
#include "run_info.hpp"

namespace switchyard::bench {

// Appends the records; adds the model check to `meta`.
void measure_ht(const BenchOptions& options, int ranks, int gpus, const Baselines& baselines,
                const RunInfo& run, std::vector<BenchRecord>& records, JsonObject& meta);

}  // namespace switchyard::bench
