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

// The record's distinguishing extra field ("direction" or "phase"), if any.
std::string variant_of(const BenchRecord& record) {
    for (const char* key : {"direction", "phase"}) {
        for (const auto& [name, value] : record.extra) {
            if (name == key) {
                std::string text = value.dump(0);
                if (text.size() >= 2 && text.front() == '"') text = text.substr(1, text.size() - 2);
                return text;
            }
        }
    }
    return "-";
}

std::string bytes_of(const BenchRecord& record) {
    for (const auto& [name, value] : record.extra) {
        if (name == "bytes") return value.dump(0);
    }
    return "-";
}

}  // namespace

void print_results_table(const std::vector<BenchRecord>& records) {
    if (records.empty()) return;
    std::printf("%-9s %-15s %-5s %5s %12s %10s %10s %10s %9s %9s %8s %9s\n", "op", "variant", "dtype",
                "ranks", "bytes/rank", "median_us", "min_us", "max_us", "logic_GB/s", "nvl_GB/s", "of_bound",
                "vs_nccl");
    for (const BenchRecord& r : records) {
        std::printf("%-9s %-15s %-5s %5d %12s %10.1f %10.1f %10.1f %9s %9s %8s %9s\n", r.op.c_str(),
                    variant_of(r).c_str(), r.dtype.c_str(), r.ranks, bytes_of(r).c_str(), r.time_us.median,
                    r.time_us.min, r.time_us.max, optional_text(r.logical_gbps, "%.1f").c_str(),
                    optional_text(r.nvlink_gbps, "%.1f").c_str(),
                    optional_text(r.fraction_of_peer_bound, "%.3f").c_str(),
                    optional_text(r.speedup_vs_nccl, "%.2fx").c_str());
    }
}

}  // namespace switchyard::bench
