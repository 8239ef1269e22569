// Low-latency (LL) dispatch (FP8 quantized in the kernel) and combine (BF16, weighted) of the
// DeepSeek-V3 decoding shape (128 tokens per rank, hidden 7168, top-8 of 256 experts) and of a
// single token, ranks as threads over the local GPUs (co-located when ranks > GPUs). Plain
// launches, CUDA-graph replay, and hook mode with the send and receive halves timed apart; the
// flat and the hierarchical combine. Records follow DESIGN.md §9, with each op's floor beside it.
#pragma once

#include <vector>

#include "baseline.hpp"
#include "cli.hpp"
#include "record.hpp"
#include "run_info.hpp"

namespace switchyard::bench {

// Appends the records.
void measure_ll(const BenchOptions& options, int ranks, int gpus, const Baselines& baselines,
                const RunInfo& run, std::vector<BenchRecord>& records);

}  // namespace switchyard::bench
