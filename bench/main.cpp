// switchyard-bench: Switchyard's benchmark driver (DESIGN.md §9) and quick-start demo (§10).
#include <cstdio>
#include <exception>
#include <string>

#include "baseline.hpp"
#include "ht_bench.hpp"
#include "ll_bench.hpp"
#include "cli.hpp"
#include "cpu_round_trip.hpp"
#include "cuda_check.hpp"
#include "switchyard/errors.hpp"

namespace {

using namespace switchyard::bench;

int run_cpu(bool gpu_present) {
    const std::string note =
        gpu_present ? "a CUDA GPU is present: run `switchyard-bench baseline` for the GPU benchmark"
                    : "no CUDA GPU found: ran the CPU reference round trip; run on a GPU machine for "
                      "the benchmark";
    return run_cpu_round_trip(CpuRoundTripShape{}, note) ? 0 : 1;
}

int run(int argc, char** argv) {
    // Subcommands with their own options.
    if (argc > 1 && std::string(argv[1]) == "ht") return run_ht_bench(argc - 1, argv + 1);
    if (argc > 1 && std::string(argv[1]) == "ll")
        return run_ll_bench(argc - 2, argv + 2);  // its parser starts at the first option
    CommandLine command;
    try {
        command = parse_command_line(argc, argv);
    } catch (const switchyard::InvalidArgument& e) {
        std::fprintf(stderr, "switchyard-bench: %s\nrun `switchyard-bench --help` for usage\n", e.what());
        return 2;
    }
    if (command.subcommand == "help") {
        std::printf("%s", usage().c_str());
        return 0;
    }
    if (command.subcommand == "cpu") return run_cpu(usable_gpu_count() > 0);
    if (command.subcommand == "baseline") return run_baseline(command.baseline, command.argv);
    // No subcommand: the quick-start job. The GPU benchmark when there is a GPU, else the demo.
    if (usable_gpu_count() == 0) return run_cpu(false);
    return run_baseline(command.baseline, command.argv);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "switchyard-bench: error: %s\n", e.what());
        return 1;
    }
}
