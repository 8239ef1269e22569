// Command line of switchyard-bench.
//
//   switchyard-bench                 GPU present: `baseline`; no GPU: the CPU reference round trip
//   switchyard-bench cpu             the CPU reference round trip
//   switchyard-bench baseline [...]  copy-engine peer bound and NCCL all-to-all (see usage())
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "a2a_payload.hpp"

namespace switchyard::bench {

struct BaselineOptions {
    std::optional<std::string> out;  // JSON results file; nothing is written without it
    int iters = 20;
    int warmup = 3;
    int tokens = 4096;  // per rank (DeepSeek-V3 prefill shape)
    int hidden = 7168;
    int topk = 8;
    int experts = 256;
    PayloadType dtype = PayloadType::kFP8;  // dispatch payload; combine is always bf16
    int gpus = 2;                           // ranks of the NCCL all-to-all, one per GPU
    uint64_t seed = 1;
};

struct CommandLine {
    std::string subcommand;  // "" (none given), "cpu", "baseline", "help"
    BaselineOptions baseline;
    std::vector<std::string> argv;  // as given, for the results file's meta
};

// Throws InvalidArgument with a message naming the bad argument.
CommandLine parse_command_line(int argc, char** argv);

std::string usage();

}  // namespace switchyard::bench
