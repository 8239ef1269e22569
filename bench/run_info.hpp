// Facts about this run that every result record carries: GPU model, git commit and date.
#pragma once

#include <string>

namespace switchyard::bench {

struct RunInfo {
    std::string gpu = "none";  // cudaGetDeviceProperties(0).name, or "none"
    int num_gpus = 0;          // CUDA devices visible to the process
    std::string commit = "unknown";
    std::string date;  // ISO 8601 UTC, e.g. 2026-12-01T09:30:00Z
};

// $SWITCHYARD_BENCH_COMMIT when set, else `git rev-parse --short HEAD` in the working directory, else
// "unknown".
// (Result files are written from a checkout; the variable covers runs from a copied binary.)
std::string current_commit();

// Now, as ISO 8601 UTC with second resolution.
std::string iso8601_utc_now();

// Fills every field; `num_gpus` is what harness::usable_gpu_count() returned.
RunInfo collect_run_info(int num_gpus);

}  // namespace switchyard::bench
