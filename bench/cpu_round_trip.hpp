// The quick-start demo for machines without a GPU (DESIGN.md §10): one dispatch and combine on the
// CPU reference implementation, with a short summary of what moved where and two checks.
#pragma once

#include <cstdint>
#include <string>

namespace switchyard::bench {

struct CpuRoundTripShape {
    int ranks = 4;
    int tokens_per_rank = 64;
    int hidden = 512;
    int topk = 4;
    int experts = 16;
    uint64_t seed = 7;
};

// Prints the summary to stdout. Returns true if every check passed. `gpu_note` is printed last
// (e.g. why no GPU benchmark ran).
bool run_cpu_round_trip(const CpuRoundTripShape& shape, const std::string& gpu_note);

}  // namespace switchyard::bench
