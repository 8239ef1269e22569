#include "cli.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>

namespace switchyard::bench {
namespace {

// Which subcommands take an option.
enum : unsigned {
    kOnDefault = 1u << 0,
    kOnBaseline = 1u << 2,
    kOnHt = 1u << 3,
    kOnLl = 1u << 4,
    kOnGpu = kOnDefault | kOnBaseline | kOnHt | kOnLl,
};

unsigned bit_of(Subcommand command) {
    switch (command) {
        case Subcommand::kDefault:
            return kOnDefault;
        case Subcommand::kCpu:
            return 1u << 1;
        case Subcommand::kBaseline:
            return kOnBaseline;
        case Subcommand::kHt:
            return kOnHt;
        case Subcommand::kLl:
            return kOnLl;
        case Subcommand::kHelp:
            return 0;
    }
    return 0;
}

[[noreturn]] void usage_error(const std::string& reason) {
    throw UsageError(reason);
}

template <typename Int>
Int parse_int(const std::string& flag, const std::string& text, Int min_value,
              Int max_value = std::numeric_limits<Int>::max()) {
    Int value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < min_value ||
        value > max_value) {
        std::string range = ">= " + std::to_string(min_value);
        if (max_value != std::numeric_limits<Int>::max())
            range = "in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
        usage_error(flag + " expects an integer " + range + ", got '" + text + "'");
    }
    return value;
}

// A number in (0, 1e6], or [0, 1e6] when `zero_allowed`; `what` names it in the error.
double parse_number(const std::string& flag, const std::string& text, bool zero_allowed, const char* what) {
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
        !(zero_allowed ? value >= 0 : value > 0) || value > 1e6)
        usage_error(flag + " expects " + what + ", got '" + text + "'");
    return value;
}

double parse_seconds(const std::string& flag, const std::string& text) {
    return parse_number(flag, text, false, "a number of seconds > 0");
}

// "a,b,c" -> {"a", "b", "c"}; an empty item is an error.
std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
    std::vector<std::string> items;
    size_t start = 0;
    while (true) {
        const size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (item.empty()) usage_error(flag + " expects a comma-separated list, got '" + text + "'");
        items.push_back(std::move(item));
        if (comma == std::string::npos) return items;
        start = comma + 1;
    }
}

struct OptionSpec {
    const char* name;   // "--iters"
    const char* value;  // "N"; nullptr for a flag
    unsigned subcommands;
    const char* doc;
    void (*apply)(BenchOptions& options, const std::string& flag, const std::string& value);
};

const OptionSpec kOptions[] = {
    {"--out", "FILE.json", kOnGpu,
     "write the results ({\"records\": [...], \"meta\": {...}}) to FILE.json; checked before the run",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         if (v.empty()) usage_error(flag + " expects a file name");
         o.out = v;
     }},
    {"--iters", "N", kOnGpu, "timed iterations per measurement (ht 20, ll 50, baseline 20)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.iters = parse_int(flag, v, 1, 100000);
     }},
    {"--warmup", "N", kOnGpu, "untimed iterations first (ht 3, ll 5, baseline 3)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.warmup = parse_int(flag, v, 0, 100000);
     }},
    {"--tokens", "N", kOnBaseline | kOnHt | kOnLl, "tokens per rank (ht and baseline 4096, ll 128)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.tokens = parse_int(flag, v, 1, 1 << 20);
     }},
    {"--hidden", "N", kOnGpu, "hidden size, a multiple of 16 (default 7168)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.hidden = parse_int(flag, v, 16, 1 << 20);
         if (o.hidden % 16 != 0) usage_error(flag + " expects a multiple of 16, got '" + v + "'");
     }},
    {"--topk", "N", kOnGpu, "experts per token (default 8)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.topk = parse_int(flag, v, 1, 1024);
     }},
    {"--experts", "N", kOnGpu, "experts in total, a multiple of the ranks (default 256)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.experts = parse_int(flag, v, 1, 1 << 20);
     }},
    {"--ranks", "N", kOnDefault | kOnHt | kOnLl,
     "ranks (threads of this process; rank r on GPU r * GPUs / ranks); default max(2, GPUs), so one GPU "
     "runs co-located EP2",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.ranks = parse_int(flag, v, 1, 64);
     }},
    {"--gpus", "N", kOnGpu,
     "GPUs to use, devices 0..N-1 (default: all visible); baseline: the NCCL all-to-all's ranks",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.gpus = parse_int(flag, v, 1, 64);
     }},
    {"--nodes", "N", kOnHt | kOnLl,
     "ht, ll: split the ranks into N emulated nodes joined by the emulated network (46 GB/s, 3 us per "
     "rank); ht also times the single-node path on the same ranks; the ranks must be a multiple of N",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.nodes = parse_int(flag, v, 1, 64);
     }},
    {"--seed", "N", kOnGpu, "seed of the random routing (default 1)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.seed = parse_int<uint64_t>(flag, v, 0);
     }},
    {"--timeout", "SECONDS", kOnDefault | kOnHt | kOnLl,
     "the buffers' wait limit, BufferConfig::timeout_seconds (ht 30, ll 100)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.timeout_seconds = parse_seconds(flag, v);
     }},
    {"--caller-stream", nullptr, kOnDefault | kOnHt | kOnLl,
     "ops run on the caller's stream (BufferConfig::launch_on_caller_stream)",
     [](BenchOptions& o, const std::string&, const std::string&) { o.caller_stream = true; }},
    {"--network-gbps", "GBPS", kOnHt,
     "ht --nodes N: the emulated network's cap on each rank's outgoing bytes (default 46; 0: unlimited, "
     "which shows what the ops take apart from the cap)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.network_gbps = parse_number(flag, v, true, "GB/s >= 0");
     }},
    {"--engine-stats", nullptr, kOnHt,
     "ht --nodes N: after each measurement point, print every rank's emulated network engine statistics "
     "over that point (passes, requests, copy and write calls, wire bursts and idle, lateness, ring and "
     "stream lag)",
     [](BenchOptions& o, const std::string&, const std::string&) { o.engine_stats = true; }},
    {"--sweep", "LIST", kOnDefault | kOnHt,
     "ht: SM counts to time, e.g. 4,8,24 (default 4,8,12,16,20,24,32; the model's choice is always added)",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.sweep.clear();
         for (const std::string& item : split_list(flag, v))
             o.sweep.push_back(parse_int(flag, item, 1, 1024));
     }},
    {"--dtypes", "LIST", kOnDefault | kOnBaseline | kOnHt,
     "dispatch payloads, fp8 and/or bf16 (default fp8,bf16); the combine is always bf16, the ll dispatch "
     "always quantizes bf16 to fp8",
     [](BenchOptions& o, const std::string& flag, const std::string& v) {
         o.dtypes.clear();
         for (const std::string& item : split_list(flag, v)) {
             if (item == "fp8")
                 o.dtypes.push_back(PayloadType::kFP8);
             else if (item == "bf16")
                 o.dtypes.push_back(PayloadType::kBF16);
             else
                 usage_error(flag + " takes fp8 and/or bf16, got '" + item + "'");
         }
     }},
};

struct SubcommandSpec {
    Subcommand command;
    const char* name;
    const char* doc;
};

const SubcommandSpec kSubcommands[] = {
    {Subcommand::kDefault, "",
     "with a CUDA GPU: baseline, ht and ll in one run (one GPU: co-located EP2); without one: cpu"},
    {Subcommand::kCpu, "cpu",
     "CPU reference round trip (dispatch + combine, EP4) showing what the library does"},
    {Subcommand::kBaseline, "baseline",
     "the references: copy-engine peer bound (device-to-device rate when ranks share a GPU), launch "
     "floor, NCCL all-to-all on the MoE payload (needs 2 GPUs)"},
    {Subcommand::kHt, "ht",
     "high-throughput dispatch and combine (rank-major, device counts) over a sweep of SM counts, "
     "baselines beside them"},
    {Subcommand::kLl, "ll",
     "low-latency dispatch and combine: plain launches, graph replay, hook mode, flat and hierarchical "
     "combine, at --tokens and at 1 token, baselines beside them"},
    {Subcommand::kHelp, "help", "this text"},
};

std::string subcommands_taking(unsigned mask) {
    std::string names;
    for (const SubcommandSpec& spec : kSubcommands) {
        if (!(mask & bit_of(spec.command)) || spec.command == Subcommand::kHelp) continue;
        names += (names.empty() ? "" : ", ") + std::string(*spec.name ? spec.name : "default");
    }
    return names;
}

// `head` padded to `indent` columns, then `text` wrapped at `width` columns under the indent.
std::string wrapped(const std::string& head, const std::string& text, size_t indent, size_t width = 100) {
    std::string out = head;
    if (out.size() + 1 > indent)
        out += "\n" + std::string(indent, ' ');
    else
        out += std::string(indent - out.size(), ' ');
    size_t column = indent;
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find(' ', start);
        if (end == std::string::npos) end = text.size();
        const std::string word = text.substr(start, end - start);
        if (column > indent && column + 1 + word.size() > width) {
            out += "\n" + std::string(indent, ' ');
            column = indent;
        } else if (column > indent) {
            out += ' ';
            ++column;
        }
        out += word;
        column += word.size();
        start = end + 1;
    }
    return out + "\n";
}

}  // namespace

const char* subcommand_name(Subcommand command) {
    for (const SubcommandSpec& spec : kSubcommands)
        if (spec.command == command) return spec.name;
    return "";
}

ModeDefaults ht_defaults() {
    return {20, 3, 4096, 30.0};
}

ModeDefaults ll_defaults() {
    return {50, 5, 128, 100.0};
}

void check_writable(const std::string& path) {
    const std::string flag = "--out";
    const size_t slash = path.find_last_of('/');
    const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    if (slash != std::string::npos && slash + 1 == path.size())
        usage_error(flag + ": '" + path + "' names a folder, not a file");
    struct stat info {};
    if (stat(folder.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
        usage_error(flag + ": cannot write '" + path + "': folder '" + folder + "' does not exist");
    if (access(folder.c_str(), W_OK | X_OK) != 0)
        usage_error(flag + ": cannot write '" + path + "': folder '" + folder + "' is not writable");
    if (stat(path.c_str(), &info) == 0) {
        if (!S_ISREG(info.st_mode)) usage_error(flag + ": '" + path + "' exists and is not a regular file");
        if (access(path.c_str(), W_OK) != 0) usage_error(flag + ": '" + path + "' is not writable");
    }
}

BenchOptions parse_command_line(const std::vector<std::string>& argv) {
    BenchOptions options;
    options.argv = argv;
    for (size_t i = 1; i < argv.size(); ++i)
        if (argv[i] == "-h" || argv[i] == "--help") {
            options.command = Subcommand::kHelp;
            return options;
        }

    size_t i = 1;
    if (i < argv.size() && !argv[i].empty() && argv[i][0] != '-') {
        const std::string& name = argv[i++];
        bool known = false;
        for (const SubcommandSpec& spec : kSubcommands)
            if (*spec.name && name == spec.name) options.command = spec.command, known = true;
        if (!known)
            usage_error("unknown subcommand '" + name + "' (subcommands: cpu, baseline, ht, ll, help)");
    }
    const unsigned here = bit_of(options.command);
    const std::string where = options.command == Subcommand::kDefault ? "the default run (no subcommand)"
                                                                      : subcommand_name(options.command);
    for (; i < argv.size(); ++i) {
        std::string flag = argv[i];
        if (flag.rfind("--", 0) != 0)
            usage_error("unexpected argument '" + flag + "' (the subcommand comes first; see --help)");
        std::optional<std::string> value;
        if (const size_t eq = flag.find('='); eq != std::string::npos) {  // --flag=value
            value = flag.substr(eq + 1);
            flag.resize(eq);
        }
        const OptionSpec* spec = nullptr;
        for (const OptionSpec& candidate : kOptions)
            if (flag == candidate.name) spec = &candidate;
        if (!spec) usage_error("unknown option '" + flag + "' (see switchyard-bench --help)");
        if (!(spec->subcommands & here))
            usage_error(flag + " is not an option of " + where +
                        " (it is one of: " + subcommands_taking(spec->subcommands) + ")");
        if (!spec->value) {
            if (value) usage_error(flag + " takes no value, got '" + *value + "'");
        } else if (!value) {
            if (i + 1 >= argv.size()) usage_error(flag + " needs a value (" + spec->value + ")");
            value = argv[++i];
        }
        spec->apply(options, flag, value.value_or(""));
    }

    if (options.topk > options.experts)
        usage_error("--topk (" + std::to_string(options.topk) + ") exceeds --experts (" +
                    std::to_string(options.experts) + ")");
    if (options.ranks && options.gpus && *options.ranks < *options.gpus)
        usage_error("--ranks (" + std::to_string(*options.ranks) + ") is fewer than --gpus (" +
                    std::to_string(*options.gpus) + "): every GPU needs a rank");
    if (options.ranks && options.nodes && *options.ranks % *options.nodes != 0)
        usage_error("--ranks (" + std::to_string(*options.ranks) + ") is not a multiple of --nodes (" +
                    std::to_string(*options.nodes) + ")");
    if (options.ranks && options.experts % *options.ranks != 0)
        usage_error("--experts (" + std::to_string(options.experts) + ") is not a multiple of --ranks (" +
                    std::to_string(*options.ranks) + ")");
    if (options.out) check_writable(*options.out);
    return options;
}

BenchOptions parse_command_line(int argc, char** argv) {
    return parse_command_line(std::vector<std::string>(argv, argv + argc));
}

std::string usage() {
    std::string text =
        "usage: switchyard-bench [SUBCOMMAND] [OPTIONS]\n\n"
        "Times Switchyard's HT and LL ops on the local GPUs (DeepSeek-V3 shape by default: hidden 7168,\n"
        "top-8 of 256 experts; HT 4096 tokens per rank, LL 128), with the references measured in the\n"
        "same run.\n\nsubcommands:\n";
    for (const SubcommandSpec& spec : kSubcommands)
        text += wrapped(std::string("  ") + (*spec.name ? spec.name : "(none)"), spec.doc, 14);
    text += "\noptions (in brackets: the subcommands that take it; default = no subcommand):\n";
    for (const OptionSpec& spec : kOptions) {
        const std::string head =
            "  " + std::string(spec.name) + (spec.value ? std::string(" ") + spec.value : "");
        text += wrapped(head, std::string(spec.doc) + " [" + subcommands_taking(spec.subcommands) + "]", 22);
    }
    text +=
        "  -h, --help          this text\n\n"
        "Exit status: 0 success; 1 error; 2 bad command line (one line says why); 77 a GPU subcommand\n"
        "on a machine without a CUDA GPU. Environment: SWITCHYARD_BENCH_NO_GATE=1 times without the\n"
        "stream gate (under ncu); the library's SWITCHYARD_* knobs (bench/README.md) are recorded in\n"
        "every results file. NCCL_NVLS_ENABLE defaults to 0.\n";
    return text;
}

}  // namespace switchyard::bench
