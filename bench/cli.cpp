#include "cli.hpp"

#include <charconv>

#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

template <typename Int>
Int parse_int(const std::string& flag, const std::string& text, Int min_value) {
    Int value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || value < min_value) {
        throw InvalidArgument(flag + " expects an integer >= " + std::to_string(min_value) + ", got '" +
                              text + "'");
    }
    return value;
}

PayloadType parse_dtype(const std::string& text) {
    if (text == "fp8") return PayloadType::kFP8;
    if (text == "bf16") return PayloadType::kBF16;
    throw InvalidArgument("--dtype expects fp8 or bf16, got '" + text + "'");
}

void parse_baseline_flag(BaselineOptions& options, const std::string& flag, const std::string& value) {
    if (flag == "--out") {
        options.out = value;
    } else if (flag == "--iters") {
        options.iters = parse_int<int>(flag, value, 1);
    } else if (flag == "--warmup") {
        options.warmup = parse_int<int>(flag, value, 0);
    } else if (flag == "--tokens") {
        options.tokens = parse_int<int>(flag, value, 1);
    } else if (flag == "--hidden") {
        options.hidden = parse_int<int>(flag, value, 1);
    } else if (flag == "--topk") {
        options.topk = parse_int<int>(flag, value, 1);
    } else if (flag == "--experts") {
        options.experts = parse_int<int>(flag, value, 1);
    } else if (flag == "--dtype") {
        options.dtype = parse_dtype(value);
    } else if (flag == "--gpus") {
        options.gpus = parse_int<int>(flag, value, 2);
    } else if (flag == "--seed") {
        options.seed = parse_int<uint64_t>(flag, value, 0);
    } else {
        throw InvalidArgument("unknown option '" + flag + "'");
    }
}

}  // namespace

CommandLine parse_command_line(int argc, char** argv) {
    CommandLine command;
    for (int i = 0; i < argc; ++i) command.argv.emplace_back(argv[i]);

    int i = 1;
    if (i < argc && argv[i][0] != '-') command.subcommand = argv[i++];
    if (command.subcommand != "" && command.subcommand != "cpu" && command.subcommand != "baseline") {
        throw InvalidArgument("unknown subcommand '" + command.subcommand + "' (expected cpu or baseline)");
    }
    for (; i < argc; ++i) {
        std::string flag = argv[i];
        if (flag == "-h" || flag == "--help") {
            command.subcommand = "help";
            return command;
        }
        if (flag.rfind("--", 0) != 0) throw InvalidArgument("unexpected argument '" + flag + "'");
        std::string value;
        if (const size_t eq = flag.find('='); eq != std::string::npos) {  // --flag=value
            value = flag.substr(eq + 1);
            flag.resize(eq);
        } else if (i + 1 < argc) {  // --flag value
            value = argv[++i];
        } else {
            throw InvalidArgument(flag + " needs a value");
        }
        if (command.subcommand == "cpu") throw InvalidArgument("the cpu subcommand takes no options");
        parse_baseline_flag(command.baseline, flag, value);
    }
    if (command.baseline.topk > command.baseline.experts) {
        throw InvalidArgument("--topk (" + std::to_string(command.baseline.topk) + ") exceeds --experts (" +
                              std::to_string(command.baseline.experts) + ")");
    }
    return command;
}

std::string usage() {
    return R"(usage: switchyard-bench [cpu | baseline [options]]

  (no subcommand)  with a CUDA GPU: run `baseline`; without one: run `cpu`
  cpu              CPU reference round trip (dispatch + combine, EP4) showing what the library does
  baseline         copy-engine peer-to-peer bound (GPU0 <-> GPU1) and NCCL all-to-all on the
                   MoE dispatch/combine payload, measured in one run (needs >= 2 GPUs)

baseline options:
  --out FILE.json   write {"records": [...], "meta": {...}} to FILE.json (default: no file)
  --iters N         timed iterations per measurement (default 20)
  --warmup N        untimed iterations first (default 3)
  --tokens N        tokens per rank (default 4096)
  --hidden N        hidden size (default 7168)
  --topk N          experts per token (default 8)
  --experts N       total experts, a multiple of --gpus (default 256)
  --dtype fp8|bf16  dispatch payload (default fp8: e4m3 + fp32 scale per 128 channels);
                    the combine payload is always bf16
  --gpus N          ranks of the NCCL all-to-all, one per GPU 0..N-1 (default 2)
  --seed N          routing seed (default 1)

Exit status: 0 success, 1 error, 2 bad command line, 77 baseline asked for but no CUDA GPU.
NCCL_NVLS_ENABLE defaults to 0 (set it to override).
)";
}

}  // namespace switchyard::bench
