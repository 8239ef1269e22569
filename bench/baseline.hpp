// The references every HT and LL number is compared with, measured in the same run (DESIGN.md §9):
//   - the copy-engine peer bound (GPU0 -> GPU1), or the device-to-device copy rate of GPU 0 when the
//     ranks share one GPU (then nothing crosses NVLink; a copy inside the GPU is the bound);
//   - the launch floor: an empty kernel, event-timed;
//   - NCCL all-to-all on the same MoE payload, when each rank has a GPU of its own and NCCL loads.
// A reference that cannot be measured is skipped with a printed reason, kept in the results' meta.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "a2a_payload.hpp"
#include "cli.hpp"
#include "record.hpp"
#include "run_info.hpp"

namespace switchyard::bench {

struct Baselines {
    std::vector<BenchRecord> records;
    std::vector<std::string> skipped;  // reasons
    // Best one-direction copy (per-direction figure with both directions busy beside it).
    std::optional<double> peer_bound_gbps, peer_bound_bidirectional_gbps;
    bool same_device = false;  // the bound is GPU 0's device-to-device rate
    std::optional<double> launch_floor_us;
    std::map<std::tuple<int, PayloadType, A2aPhase>, double> nccl_us;  // (tokens, payload, phase)
    std::optional<int> nccl_version;
    std::string nccl_library;

    // NCCL's median for this payload, if measured.
    std::optional<double> nccl(int tokens, PayloadType payload, A2aPhase phase) const;
    void skip(const std::string& reason);
    // The facts above, for the results' meta.
    JsonObject meta() const;
    // An op's floor (DESIGN.md §9): the launch floor plus the bytes that cross between ranks at the
    // run's copy rate (the peer bound, or the device-to-device rate when ranks share a GPU), or the
    // network's part where that is longer (`network_us`: its bytes at the cap plus its latency).
    // Empty when the launch floor or the copy rate was not measured.
    std::optional<double> op_floor_us(double crossing_bytes, double network_us = 0.0) const;
    // Adds `floor_us` and `fraction_of_floor` (the median over the floor) to `record` when the
    // floor is known.
    void add_floor(BenchRecord& record, double crossing_bytes, double network_us = 0.0) const;
};

// What to measure; ranks share GPUs when ranks > gpus.
struct BaselinePlan {
    int ranks = 2, gpus = 2;
    A2aShape shape;  // ranks is set from `ranks`; dispatch_type per entry of `dtypes`
    std::vector<PayloadType> dtypes = {PayloadType::kFP8, PayloadType::kBF16};
    int iters = 20, warmup = 3;
    int copy_iters = 10;
};

void measure_copy_bound(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines);
void measure_floor(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines);
void measure_nccl(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines);
// All three.
void measure_baselines(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines);

}  // namespace switchyard::bench
