#include "results_table.hpp"

#include <cstdio>
#include <string>

namespace switchyard::bench {
namespace {

std::string optional_text(const std::optional<double>& value, const char* format) {
    if (!value) return "-";
    char text[32];
    std::snprintf(text, sizeof(text), format, *value);
    return text;
}

// The text of an extra field, without JSON quotes; "" when absent.
std::string extra_text(const BenchRecord& record, const char* key) {
    for (const auto& [name, value] : record.extra) {
        if (name != key) continue;
        std::string text = value.dump(0);
        if (text.size() >= 2 && text.front() == '"') text = text.substr(1, text.size() - 2);
        return text;
    }
    return "";
}

// What tells rows of one op apart: a copy's direction, an LL phase and combine reduction.
std::string variant_of(const BenchRecord& record) {
    std::string variant = extra_text(record, "direction");
    if (variant.empty()) variant = extra_text(record, "phase");
    const std::string reduction = extra_text(record, "combine_reduction");
    if (!reduction.empty() && record.op == "combine") variant += (variant.empty() ? "" : ",") + reduction;
    if (!reduction.empty() && record.op == "dispatch" && reduction == "hierarchical")
        variant += (variant.empty() ? "" : ",") + std::string("weights");
    return variant.empty() ? "-" : variant;
}

}  // namespace

void print_results_table(const std::vector<BenchRecord>& records) {
    if (records.empty()) return;
    std::printf("%-8s %-12s %-19s %-5s %5s %4s %4s %6s %5s %10s %10s %10s %9s %8s %8s %8s\n", "mode", "op",
                "variant", "dtype", "ranks", "gpus", "sms", "tokens", "graph", "median_us", "min_us",
                "max_us", "nvl_GB/s", "of_bound", "vs_nccl", "host_us");
    for (const BenchRecord& r : records) {
        const std::string host = extra_text(r, "host_us_median");
        std::printf("%-8s %-12s %-19s %-5s %5d %4d %4s %6lld %5s %10.2f %10.2f %10.2f %9s %8s %8s %8.8s\n",
                    r.mode.c_str(), r.op.c_str(), variant_of(r).c_str(), r.dtype.c_str(), r.ranks, r.gpus,
                    r.num_sms > 0 ? std::to_string(r.num_sms).c_str() : "-",
                    static_cast<long long>(r.tokens_per_rank), r.graph_replay ? "yes" : "no",
                    r.time_us.median, r.time_us.min, r.time_us.max,
                    optional_text(r.nvlink_gbps, "%.1f").c_str(),
                    optional_text(r.fraction_of_peer_bound, "%.3f").c_str(),
                    optional_text(r.speedup_vs_nccl, "%.2fx").c_str(), host.empty() ? "-" : host.c_str());
    }
}

}  // namespace switchyard::bench
