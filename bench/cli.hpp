// The command line of switchyard-bench: one parser for every subcommand (usage() lists them all).
//
//   switchyard-bench [SUBCOMMAND] [OPTIONS]
//
// Every option is declared once (cli.cpp: name, value, which subcommands take it, doc line), so the
// help text, the checks and the defaults cannot drift apart. A bad command line is a UsageError with
// a one-line reason (main prints it and exits 2); --out is checked to be writable while parsing, so
// a run never ends in an unwritable results file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "a2a_payload.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {

enum class Subcommand {
    kDefault,   // no subcommand: with a GPU baseline + ht + ll; without one, cpu
    kCpu,       // the CPU reference round trip
    kBaseline,  // copy-engine bound (or device-to-device rate), launch floor, NCCL all-to-all
    kHt,        // HT dispatch and combine, baselines beside them
    kLl,        // LL dispatch and combine, baselines beside them
    kHelp,
};

const char* subcommand_name(Subcommand command);  // "" for kDefault

// Every value after parsing. Unset optionals take the mode's default (defaults_for()).
struct BenchOptions {
    Subcommand command = Subcommand::kDefault;
    std::optional<std::string> out;  // results JSON; nothing is written without it
    std::optional<int> iters, warmup, tokens;
    int hidden = 7168;
    int topk = 8;
    int experts = 256;
    std::optional<int> ranks;  // default: max(2, GPUs used), so one GPU runs co-located EP2
    std::optional<int> gpus;   // default: every visible GPU
    std::optional<int> nodes;  // ht, ll: emulated nodes the ranks are split into (emulated network)
    uint64_t seed = 1;
    std::optional<double> timeout_seconds;                // BufferConfig::timeout_seconds
    bool caller_stream = false;                           // launch_on_caller_stream
    std::optional<double> network_gbps;                   // ht --nodes: the emulated network's cap
    bool engine_stats = false;                            // ht --nodes: print the engines' statistics
    std::vector<int> sweep = {4, 8, 12, 16, 20, 24, 32};  // ht: SM counts
    std::vector<PayloadType> dtypes = {PayloadType::kFP8, PayloadType::kBF16};  // ht, baseline
    std::vector<std::string> argv;                                              // as given, for the JSON
};

// Per-mode defaults of the options left unset.
struct ModeDefaults {
    int iters, warmup, tokens;
    double timeout_seconds;
};
ModeDefaults ht_defaults();  // 20 iters, 3 warm-up, 4096 tokens per rank, 30 s
ModeDefaults ll_defaults();  // 50 iters, 5 warm-up, 128 tokens per rank, 100 s

// A bad command line; what() is the one-line reason.
class UsageError : public InvalidArgument {
  public:
    using InvalidArgument::InvalidArgument;
};

// Parses argv[1..] (argv[0] is the program). Throws UsageError.
BenchOptions parse_command_line(const std::vector<std::string>& argv);
BenchOptions parse_command_line(int argc, char** argv);

// Throws UsageError unless `path` can be written: its folder exists and is writable, and the path,
// if it exists, is a writable regular file. Nothing is created.
void check_writable(const std::string& path);

// The full help text: every subcommand and every option.
std::string usage();

}  // namespace switchyard::bench
