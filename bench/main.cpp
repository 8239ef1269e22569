// switchyard-bench: Switchyard's benchmark driver (DESIGN.md §9) and quick-start demo (§10).
// The command line is cli.hpp's; this file runs what it asks for.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "baseline.hpp"
#include "cli.hpp"
#include "cpu_round_trip.hpp"
#include "harness/cuda_raii.hpp"
#include "ht_bench.hpp"
#include "ht_nodes_bench.hpp"
#include "ll_bench.hpp"
#include "record.hpp"
#include "results_table.hpp"
#include "run_info.hpp"

namespace {

using namespace switchyard::bench;

constexpr int kNoGpuExitCode = 77;

int run_cpu(const std::string& note) {
    return run_cpu_round_trip(CpuRoundTripShape{}, note) ? 0 : 1;
}

// Ranks and GPUs of a run: every visible GPU unless --gpus, max(2, GPUs) ranks unless --ranks.
struct RankPlan {
    int ranks, gpus;
};

RankPlan plan_ranks(const BenchOptions& options, int visible) {
    RankPlan plan{};
    plan.gpus = options.gpus.value_or(options.ranks ? std::min(visible, *options.ranks) : visible);
    if (plan.gpus > visible)
        throw UsageError("--gpus " + std::to_string(plan.gpus) + " but only " + std::to_string(visible) +
                         " CUDA GPU(s) are visible");
    plan.ranks = options.ranks.value_or(std::max(2, plan.gpus));
    // ll --nodes N without --ranks: the smallest multiple of N at least the default.
    if (options.nodes && !options.ranks) plan.ranks = (plan.ranks + *options.nodes - 1) / *options.nodes * *options.nodes;
    if (options.experts % plan.ranks != 0)
        throw UsageError("--experts (" + std::to_string(options.experts) +
                         ") is not a multiple of the ranks (" + std::to_string(plan.ranks) + ")");
    return plan;
}

BaselinePlan baseline_plan(const BenchOptions& options, const RankPlan& ranks, int tokens,
                           std::vector<PayloadType> dtypes) {
    BaselinePlan plan;
    plan.ranks = ranks.ranks;
    plan.gpus = ranks.gpus;
    plan.shape = A2aShape{ranks.ranks,     tokens,         options.hidden, options.topk,
                          options.experts, dtypes.front(), options.seed};
    plan.dtypes = std::move(dtypes);
    plan.iters = options.iters.value_or(20);
    plan.warmup = options.warmup.value_or(3);
    return plan;
}

int run_gpu(const BenchOptions& options, int visible) {
    const Subcommand command = options.command;
    const RankPlan ranks = plan_ranks(options, visible);
    const RunInfo run = collect_run_info(visible);
    const std::string name = command == Subcommand::kDefault ? "" : subcommand_name(command);
    std::printf("switchyard-bench %s on %d x %s (commit %s, %s): %d rank(s) on %d GPU(s)%s\n",
                name.empty() ? "(baseline, ht, ll)" : name.c_str(), visible, run.gpu.c_str(),
                run.commit.c_str(), run.date.c_str(), ranks.ranks, ranks.gpus,
                ranks.ranks > ranks.gpus ? ", co-located" : "");

    const bool run_ht = command == Subcommand::kDefault || command == Subcommand::kHt;
    const bool run_ll = command == Subcommand::kDefault || command == Subcommand::kLl;
    const int ht_tokens = options.tokens.value_or(ht_defaults().tokens);
    const int ll_tokens = options.tokens.value_or(ll_defaults().tokens);

    // The references first, before any rank exists (they synchronize whole devices).
    std::printf("\nbaselines:\n");
    Baselines baselines;
    const BaselinePlan plan = baseline_plan(options, ranks, ht_tokens, options.dtypes);
    measure_copy_bound(plan, run, baselines);
    measure_floor(plan, run, baselines);
    if (command != Subcommand::kLl) measure_nccl(plan, run, baselines);
    if (run_ll) measure_nccl(baseline_plan(options, ranks, ll_tokens, {PayloadType::kFP8}), run, baselines);

    std::vector<BenchRecord> records = baselines.records;
    JsonObject meta = baselines.meta();
    meta.emplace_back("ranks", ranks.ranks);
    meta.emplace_back("gpus", ranks.gpus);
    if (run_ht) measure_ht(options, ranks.ranks, ranks.gpus, baselines, run, records, meta);
    if (run_ht && options.nodes.value_or(1) > 1) {
        if (ranks.ranks % *options.nodes != 0)
            throw UsageError("--nodes " + std::to_string(*options.nodes) + " does not divide the " +
                             std::to_string(ranks.ranks) + " ranks");
        measure_ht_nodes(options, ranks.ranks, ranks.gpus, *options.nodes, run, records, meta);
    }
    if (run_ll) measure_ll(options, ranks.ranks, ranks.gpus, baselines, run, records);

    std::printf("\n");
    print_results_table(records);
    if (options.out) {
        write_results_file(*options.out, records, results_meta(run, options.argv, name, std::move(meta)));
        std::printf("\nwrote %zu records to %s\n", records.size(), options.out->c_str());
    }
    return 0;
}

int run(const BenchOptions& options) {
    std::string why;
    const int visible =
        options.command == Subcommand::kHelp ? 0 : switchyard::harness::usable_gpu_count(&why);
    switch (options.command) {
        case Subcommand::kHelp:
            std::printf("%s", usage().c_str());
            return 0;
        case Subcommand::kCpu:
            return run_cpu(
                visible > 0 ? "a CUDA GPU is present: `switchyard-bench` (no subcommand) benchmarks it" : "");
        case Subcommand::kDefault:
            if (visible == 0)
                return run_cpu(
                    "no CUDA GPU found (" + why +
                    "): ran the CPU reference round trip; GPU runs (HT, LL, baselines) need a GPU");
            return run_gpu(options, visible);
        case Subcommand::kBaseline:
        case Subcommand::kHt:
        case Subcommand::kLl:
            if (visible == 0) {
                std::printf(
                    "switchyard-bench %s: needs a CUDA GPU, found none (%s); `switchyard-bench cpu` runs "
                    "the CPU reference round trip\n",
                    subcommand_name(options.command), why.c_str());
                return kNoGpuExitCode;
            }
            return run_gpu(options, visible);
    }
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(parse_command_line(argc, argv));
    } catch (const UsageError& e) {
        std::fprintf(stderr, "switchyard-bench: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "switchyard-bench: error: %s\n", e.what());
        return 1;
    }
}
