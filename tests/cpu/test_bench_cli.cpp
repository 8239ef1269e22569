// switchyard-bench's command line (bench/cli.hpp), on the CPU: good argument vectors parse to the
// expected options, every bad one is a UsageError whose one-line reason names the problem.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "baseline.hpp"
#include "cli.hpp"
#include "common/testing.hpp"
#include "util/env_knobs.hpp"

using namespace switchyard::bench;

namespace {

BenchOptions parse(std::vector<std::string> args) {
    args.insert(args.begin(), "switchyard-bench");
    return parse_command_line(args);
}

// The reason parse() gives for a bad command line.
std::string reason_for(const std::vector<std::string>& args) {
    try {
        parse(args);
    } catch (const UsageError& error) {
        return error.what();
    }
    return "(parsed)";
}

#define SY_CHECK_REJECTS(args, needle)                                                                    \
    do {                                                                                                  \
        const std::string sy_reason_ = reason_for args;                                                   \
        SY_CHECK_MSG(sy_reason_.find(needle) != std::string::npos, "reason '" << sy_reason_ << "'");      \
        SY_CHECK_MSG(sy_reason_.find('\n') == std::string::npos, "not one line: '" << sy_reason_ << "'"); \
    } while (0)

}  // namespace

// An op's floor: the launch floor plus the crossing bytes at the copy rate, or the network's part
// where that is longer; the record gains floor_us and fraction_of_floor, and nothing when the
// run could not measure a reference.
SY_TEST(BenchFloor, LaunchFloorPlusTheLongerTransfer) {
    Baselines baselines;
    BenchRecord record;
    record.time_us.median = 50.0;
    baselines.add_floor(record, 1e6);
    SY_CHECK(record.extra.empty());  // nothing measured: no floor
    baselines.launch_floor_us = 3.0;
    baselines.peer_bound_gbps = 100.0;  // 100 GB/s: 1 MB in 10 us
    SY_CHECK(baselines.op_floor_us(1e6).has_value());
    SY_CHECK(std::abs(*baselines.op_floor_us(1e6) - 13.0) < 1e-9);
    SY_CHECK(std::abs(*baselines.op_floor_us(1e6, 30.0) - 33.0) < 1e-9);  // the network's part is longer
    SY_CHECK(std::abs(*baselines.op_floor_us(1e6, 4.0) - 13.0) < 1e-9);
    baselines.add_floor(record, 2e6);
    SY_CHECK_EQ(record.extra.size(), size_t(2));
    SY_CHECK(record.extra[0].first == "floor_us" && record.extra[1].first == "fraction_of_floor");
    SY_CHECK(std::abs(std::stod(record.extra[1].second.dump(0)) - 50.0 / 23.0) < 1e-9);
}

SY_TEST(BenchCli, NoArgumentsIsTheDefaultRun) {
    const BenchOptions options = parse({});
    SY_CHECK(options.command == Subcommand::kDefault);
    SY_CHECK(!options.out);
    SY_CHECK(!options.ranks && !options.gpus && !options.tokens);
    SY_CHECK_EQ(options.hidden, 7168);
    SY_CHECK_EQ(options.topk, 8);
    SY_CHECK_EQ(options.experts, 256);
    SY_CHECK_EQ(options.dtypes.size(), size_t(2));
}

SY_TEST(BenchCli, SubcommandsAndOptions) {
    SY_CHECK(parse({"cpu"}).command == Subcommand::kCpu);
    SY_CHECK(parse({"help"}).command == Subcommand::kHelp);
    SY_CHECK(parse({"ll", "--help"}).command == Subcommand::kHelp);
    SY_CHECK(parse({"-h"}).command == Subcommand::kHelp);

    const BenchOptions ht =
        parse({"ht", "--tokens", "512", "--iters=7", "--sweep", "4,24", "--dtypes", "bf16", "--ranks", "4",
               "--gpus", "2", "--caller-stream", "--timeout", "2.5"});
    SY_CHECK(ht.command == Subcommand::kHt);
    SY_CHECK_EQ(*ht.tokens, 512);
    SY_CHECK_EQ(*ht.iters, 7);
    SY_CHECK(ht.sweep == std::vector<int>({4, 24}));
    SY_CHECK(ht.dtypes == std::vector<PayloadType>({PayloadType::kBF16}));
    SY_CHECK_EQ(*ht.ranks, 4);
    SY_CHECK_EQ(*ht.gpus, 2);
    SY_CHECK(ht.caller_stream);
    SY_CHECK_EQ(*ht.timeout_seconds, 2.5);

    const BenchOptions ll = parse({"ll", "--tokens", "1", "--seed", "9", "--experts", "64", "--topk", "4"});
    SY_CHECK(ll.command == Subcommand::kLl);
    SY_CHECK_EQ(*ll.tokens, 1);
    SY_CHECK_EQ(ll.seed, uint64_t(9));
    SY_CHECK_EQ(ll.experts, 64);

    const BenchOptions baseline = parse({"baseline", "--dtypes", "fp8,bf16", "--gpus", "2"});
    SY_CHECK(baseline.command == Subcommand::kBaseline);
    SY_CHECK_EQ(baseline.argv.size(), size_t(6));
}

SY_TEST(BenchCli, ModeDefaults) {
    SY_CHECK_EQ(ht_defaults().tokens, 4096);
    SY_CHECK_EQ(ll_defaults().tokens, 128);
    SY_CHECK_EQ(ht_defaults().iters, 20);
    SY_CHECK_EQ(ll_defaults().iters, 50);
}

SY_TEST(BenchCli, BadValuesGiveOneLineReasons) {
    SY_CHECK_REJECTS(({"ht", "--tokens", "abc"}), "--tokens expects an integer");
    SY_CHECK_REJECTS(({"ht", "--tokens", "0"}), "--tokens expects an integer");
    SY_CHECK_REJECTS(({"ht", "--tokens", "12x"}), "got '12x'");
    SY_CHECK_REJECTS(({"ht", "--iters"}), "--iters needs a value");
    SY_CHECK_REJECTS(({"ll", "--hidden", "100"}), "multiple of 16");
    SY_CHECK_REJECTS(({"ll", "--timeout", "0"}), "--timeout expects a number of seconds");
    SY_CHECK_REJECTS(({"ht", "--sweep", "4,,8"}), "comma-separated list");
    SY_CHECK_REJECTS(({"ht", "--sweep", "4,x"}), "--sweep expects an integer");
    SY_CHECK_REJECTS(({"ht", "--dtypes", "fp16"}), "fp8 and/or bf16");
    SY_CHECK_REJECTS(({"ht", "--topk", "9", "--experts", "8"}), "exceeds --experts");
    SY_CHECK_REJECTS(({"ht", "--ranks", "1", "--gpus", "2"}), "fewer than --gpus");
    SY_CHECK_REJECTS(({"ll", "--ranks", "3"}), "not a multiple of --ranks");
    SY_CHECK_REJECTS(({"ll", "--ranks", "6", "--experts", "24", "--nodes", "4"}),
                     "not a multiple of --nodes");
    SY_CHECK_REJECTS(({"ll", "--nodes", "0"}), "--nodes expects an integer");
    SY_CHECK_EQ(*parse({"ll", "--nodes", "2", "--ranks", "4"}).nodes, 2);
    SY_CHECK_REJECTS(({"ht", "--caller-stream=yes"}), "takes no value");
    SY_CHECK_REJECTS(({"ht", "--seed", "-1"}), "--seed expects an integer");
}

SY_TEST(BenchCli, UnknownAndMisplacedArguments) {
    SY_CHECK_REJECTS(({"bogus"}), "unknown subcommand 'bogus'");
    SY_CHECK_REJECTS(({"ht", "--bogus", "1"}), "unknown option '--bogus'");
    SY_CHECK_REJECTS(({"ll", "--sweep", "4"}), "--sweep is not an option of ll");
    SY_CHECK_REJECTS(({"cpu", "--iters", "3"}), "--iters is not an option of cpu");
    SY_CHECK_REJECTS(({"--tokens", "5"}), "--tokens is not an option of the default run");
    SY_CHECK_REJECTS(({"ht", "ll"}), "unexpected argument 'll'");
}

SY_TEST(BenchCli, OutIsCheckedBeforeTheRun) {
    char folder[] = "/tmp/switchyard-cli-XXXXXX";
    SY_CHECK(mkdtemp(folder) != nullptr);
    const std::string good = std::string(folder) + "/results.json";
    const BenchOptions options = parse({"ht", "--out", good});
    SY_CHECK_EQ(*options.out, good);
    SY_CHECK(access(good.c_str(), F_OK) != 0);  // checking creates nothing
    SY_CHECK_REJECTS(({"ht", "--out", std::string(folder) + "/missing/results.json"}), "does not exist");
    SY_CHECK_REJECTS(({"ht", "--out", std::string(folder)}), "not a regular file");
    SY_CHECK_REJECTS(({"ht", "--out", std::string(folder) + "/"}), "names a folder");
    SY_CHECK_REJECTS(({"ht", "--out="}), "expects a file name");
    if (geteuid() != 0) {  // root writes anywhere
        const std::string locked = std::string(folder) + "/locked";
        SY_CHECK(mkdir(locked.c_str(), 0500) == 0);
        SY_CHECK_REJECTS(({"ll", "--out", locked + "/results.json"}), "is not writable");
        rmdir(locked.c_str());
    }
    rmdir(folder);
}

SY_TEST(BenchCli, HelpListsEverySubcommandAndOption) {
    const std::string text = usage();
    for (const char* word : {"cpu",
                             "baseline",
                             "ht",
                             "ll",
                             "help",
                             "--out",
                             "--iters",
                             "--warmup",
                             "--tokens",
                             "--hidden",
                             "--topk",
                             "--experts",
                             "--ranks",
                             "--gpus",
                             "--seed",
                             "--timeout",
                             "--caller-stream",
                             "--sweep",
                             "--dtypes",
                             "--nodes",
                             "SWITCHYARD_BENCH_NO_GATE"})
        SY_CHECK_MSG(text.find(word) != std::string::npos, "help lacks " << word);
    for (const char* name : {"cpu", "baseline", "ht", "ll", "help"})
        SY_CHECK_MSG(text.find(std::string("\n  ") + name + " ") != std::string::npos,
                     "help lists no subcommand " << name);
}

SY_TEST(BenchCli, ReadmeDocumentsEveryOptionAndKnob) {
    std::ifstream file(std::string(SWITCHYARD_SOURCE_DIR) + "/bench/README.md");
    SY_CHECK(file.good());
    std::stringstream buffer;
    buffer << file.rdbuf();
    const std::string readme = buffer.str();
    // Every option of --help ("  --name ..." lines) appears in the README's option table.
    std::istringstream help(usage());
    int options = 0;
    for (std::string line; std::getline(help, line);) {
        if (line.rfind("  --", 0) != 0) continue;
        const std::string name = line.substr(2, line.find(' ', 2) - 2);
        ++options;
        SY_CHECK_MSG(readme.find("`" + name) != std::string::npos, "bench/README.md lacks " << name);
    }
    SY_CHECK(options >= 14);
    for (const auto& knob : switchyard::util::knob_registry())
        SY_CHECK_MSG(readme.find(std::string("`") + knob.name + "`") != std::string::npos,
                     "bench/README.md lacks the knob " << knob.name);
}

SY_TEST_MAIN()
