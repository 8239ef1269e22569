// The results table printed at the end of a run: one row per record, every mode in the same columns
// (the SM count of each row included).
#pragma once

#include <vector>

#include "record.hpp"

namespace switchyard::bench {

void print_results_table(const std::vector<BenchRecord>& records);

}  // namespace switchyard::bench
