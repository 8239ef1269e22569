// One benchmark result record with the fields DESIGN.md §9 requires of every record, and the
// results file that holds them ({"records": [...], "meta": {...}}).
//
// Every measurement (baselines, HT, LL) fills a BenchRecord, so all result files share one schema
// and stay comparable over time. Mode-specific facts go into `extra`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "json_writer.hpp"
#include "run_info.hpp"
#include "stats.hpp"

namespace switchyard::bench {

struct BenchRecord {
    std::string mode;            // "ht" | "ll" | "baseline"
    std::string op;              // "dispatch" | "combine" | "p2p_copy" | "nccl_a2a"
    std::string dtype;           // "bf16" | "fp8" | "fp8_ue8m0"
    std::string layout = "n/a";  // receive layout; "n/a" for baselines
    bool graph_replay = false;
    int ranks = 0;
    int gpus = 0;
    int64_t tokens_per_rank = 0;
    int hidden = 0;
    int topk = 0;
    int experts = 0;
    int num_sms = 0;      // 0 for copy-engine and NCCL baselines
    TimingStats time_us;  // per op
    // Absent values are written as null (e.g. no peer bound on a single GPU).
    std::optional<double> logical_gbps;  // all received bytes / time
    std::optional<double> nvlink_gbps;   // bytes that crossed NVLink out of this rank / time
    std::optional<double> peer_bound_gbps;
    std::optional<double> fraction_of_peer_bound;
    std::optional<double> nccl_a2a_us;
    std::optional<double> speedup_vs_nccl;
    int64_t buffer_bytes = 0;
    std::string gpu;
    std::string commit;
    std::string date;
    JsonObject extra;  // appended after the common fields, in order

    // Copies gpu/commit/date from the run.
    void stamp(const RunInfo& run);
    // Sets peer_bound_gbps and, if nvlink_gbps is known, fraction_of_peer_bound.
    void set_peer_bound(std::optional<double> bound_gbps);
    // Sets nccl_a2a_us and speedup_vs_nccl = nccl time / our median time.
    void set_nccl_reference(std::optional<double> nccl_us);

    JsonValue to_json() const;
};

// GB/s (10^9 bytes per second) of `bytes` moved in `time_us` microseconds; nullopt if time <= 0.
std::optional<double> gbps(double bytes, double time_us);

// The meta of every results file: tool, subcommand, argv, gpu, num_gpus, commit, date, CUDA runtime
// and driver versions, `knobs` (the library's SWITCHYARD_* knobs that are set, util::knobs_set()),
// `tool_variables` (the benchmark's own SWITCHYARD_BENCH_* variables and NCCL_NVLS_ENABLE, when set),
// then `extra`.
JsonValue results_meta(const RunInfo& run, const std::vector<std::string>& argv,
                       const std::string& subcommand, JsonObject extra);

// {"records": [...], "meta": meta}.
JsonValue results_document(const std::vector<BenchRecord>& records, JsonValue meta);

// Writes the document to `path` (throws switchyard::Error if the file cannot be written).
void write_results_file(const std::string& path, const std::vector<BenchRecord>& records, JsonValue meta);

}  // namespace switchyard::bench
