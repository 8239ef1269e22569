// The `baseline` subcommand: the two references every HT/LL number is compared with, measured in
// one run — the copy-engine peer-to-peer bound and NCCL all-to-all on the same MoE payload.
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"

namespace switchyard::bench {

// Runs the measurements, prints a table, writes options.out if given. Returns the exit status:
// 0 (parts that need 2 GPUs or NCCL are skipped with a printed reason), 77 if there is no GPU.
int run_baseline(const BaselineOptions& options, const std::vector<std::string>& argv);

}  // namespace switchyard::bench
