#include "record.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <fstream>

#include "switchyard/errors.hpp"
#include "util/env_knobs.hpp"

extern char** environ;

namespace switchyard::bench {
namespace {

JsonValue optional_number(const std::optional<double>& value) {
    return value ? JsonValue(*value) : JsonValue();
}

}  // namespace

void BenchRecord::stamp(const RunInfo& run) {
    gpu = run.gpu;
    commit = run.commit;
    date = run.date;
}

void BenchRecord::set_peer_bound(std::optional<double> bound_gbps) {
    peer_bound_gbps = bound_gbps;
    fraction_of_peer_bound.reset();
    if (bound_gbps && *bound_gbps > 0.0 && nvlink_gbps) fraction_of_peer_bound = *nvlink_gbps / *bound_gbps;
}

void BenchRecord::set_nccl_reference(std::optional<double> nccl_us) {
    nccl_a2a_us = nccl_us;
    speedup_vs_nccl.reset();
    if (nccl_us && time_us.median > 0.0) speedup_vs_nccl = *nccl_us / time_us.median;
}

JsonValue BenchRecord::to_json() const {
    JsonObject fields = {
        {"mode", mode},
        {"op", op},
        {"dtype", dtype},
        {"layout", layout},
        {"graph_replay", graph_replay},
        {"ranks", ranks},
        {"gpus", gpus},
        {"tokens_per_rank", tokens_per_rank},
        {"hidden", hidden},
        {"topk", topk},
        {"experts", experts},
        {"num_sms", num_sms},
        {"time_us_median", time_us.median},
        {"time_us_min", time_us.min},
        {"time_us_max", time_us.max},
        {"logical_gbps", optional_number(logical_gbps)},
        {"nvlink_gbps", optional_number(nvlink_gbps)},
        {"peer_bound_gbps", optional_number(peer_bound_gbps)},
        {"fraction_of_peer_bound", optional_number(fraction_of_peer_bound)},
        {"nccl_a2a_us", optional_number(nccl_a2a_us)},
        {"speedup_vs_nccl", optional_number(speedup_vs_nccl)},
        {"buffer_bytes", buffer_bytes},
        {"gpu", gpu},
        {"commit", commit},
        {"date", date},
    };
    JsonValue json(std::move(fields));
    for (const auto& [key, value] : extra) json.set(key, value);
    return json;
}

std::optional<double> gbps(double bytes, double time_us) {
    if (time_us <= 0.0) return std::nullopt;
    return bytes / (time_us * 1e3);  // bytes / (us * 1e-6) / 1e9
}

JsonValue results_meta(const RunInfo& run, const std::vector<std::string>& argv,
                       const std::string& subcommand, JsonObject extra) {
    int runtime_version = 0, driver_version = 0;
    cudaRuntimeGetVersion(&runtime_version);
    cudaDriverGetVersion(&driver_version);  // 0 without a driver
    JsonObject knobs;
    for (const auto& [name, value] : util::knobs_set()) knobs.emplace_back(name, value);
    JsonObject tool_variables;
    for (char** entry = environ; entry && *entry; ++entry) {
        const std::string text(*entry);
        const size_t eq = text.find('=');
        const std::string name = text.substr(0, eq);
        if (name.rfind("SWITCHYARD_BENCH_", 0) == 0 || name == "NCCL_NVLS_ENABLE")
            tool_variables.emplace_back(name, eq == std::string::npos ? "" : text.substr(eq + 1));
    }
    JsonObject meta = {
        {"tool", "switchyard-bench"},
        {"subcommand", subcommand.empty() ? "default" : subcommand},
        {"argv", JsonValue(JsonArray(argv.begin(), argv.end()))},
        {"gpu", run.gpu},
        {"num_gpus", run.num_gpus},
        {"commit", run.commit},
        {"date", run.date},
        {"cuda_runtime_version", runtime_version},
        {"cuda_driver_version", driver_version},
        {"knobs", JsonValue(std::move(knobs))},
        {"tool_variables", JsonValue(std::move(tool_variables))},
    };
    JsonValue json(std::move(meta));
    for (auto& [key, value] : extra) json.set(key, std::move(value));
    return json;
}

JsonValue results_document(const std::vector<BenchRecord>& records, JsonValue meta) {
    JsonArray items;
    items.reserve(records.size());
    for (const BenchRecord& record : records) items.push_back(record.to_json());
    return JsonValue(JsonObject{{"records", JsonValue(std::move(items))}, {"meta", std::move(meta)}});
}

void write_results_file(const std::string& path, const std::vector<BenchRecord>& records, JsonValue meta) {
    std::ofstream file(path);
    if (!file) throw Error("switchyard-bench: cannot open " + path + " for writing (does its folder exist?)");
    file << results_document(records, std::move(meta)).dump(2) << '\n';
    file.close();
    if (!file) throw Error("switchyard-bench: writing " + path + " failed");
}

}  // namespace switchyard::bench
