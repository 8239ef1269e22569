// Prints benchmark records as an aligned text table (the human-readable twin of the JSON file).
#pragma once

#include <vector>

#include "record.hpp"

namespace switchyard::bench {

void print_results_table(const std::vector<BenchRecord>& records);

}  // namespace switchyard::bench
