#include "baseline.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "a2a_payload.hpp"
#include "comm/nccl_library.hpp"
#include "cuda_check.hpp"
#include "nccl_a2a_bench.hpp"
#include "p2p_copy_bench.hpp"
#include "record.hpp"
#include "results_table.hpp"
#include "run_info.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

// State shared by the parts of one baseline run.
struct BaselineRun {
    const BaselineOptions& options;
    RunInfo info;
    std::vector<BenchRecord> records;
    std::vector<std::string> skipped;             // reasons, printed and stored in meta
    std::optional<double> peer_bound_gbps;        // best one-direction copy
    std::optional<double> peer_bound_bidir_gbps;  // best per-direction copy with both directions busy
    std::optional<int> nccl_version;
    std::string nccl_path;

    void skip(const std::string& reason) {
        std::printf("skipped: %s\n", reason.c_str());
        skipped.push_back(reason);
    }

    BenchRecord new_record(const char* op) const {
        BenchRecord record;
        record.mode = "baseline";
        record.op = op;
        record.stamp(info);
        return record;
    }
};

void measure_peer_bound(BaselineRun& run) {
    P2pCopyOptions copy;
    copy.iters = run.options.iters;
    copy.warmup = run.options.warmup;
    std::vector<P2pCopyResult> results;
    try {
        results = measure_p2p_copy(copy);
    } catch (const UnsupportedError& e) {
        run.skip(std::string("copy-engine peer bound: ") + e.what());
        return;
    }
    for (const P2pCopyResult& result : results) {
        auto& best = result.bidirectional ? run.peer_bound_bidir_gbps : run.peer_bound_gbps;
        best = std::max(best.value_or(0.0), result.gbps_per_direction);
    }
    for (const P2pCopyResult& result : results) {
        BenchRecord record = run.new_record("p2p_copy");
        record.dtype = "n/a";  // raw bytes
        record.ranks = 2;
        record.gpus = 2;
        record.time_us = result.time_us;
        record.logical_gbps = result.gbps_per_direction;
        record.nvlink_gbps = result.gbps_per_direction;
        record.set_peer_bound(run.peer_bound_gbps);
        record.extra = {
            {"direction", result.bidirectional ? "bidirectional" : "unidirectional"},
            {"bytes", static_cast<int64_t>(result.bytes)},
            {"src_device", copy.src_device},
            {"dst_device", copy.dst_device},
            {"iters", copy.iters},
            {"warmup", copy.warmup},
        };
        run.records.push_back(std::move(record));
    }
}

JsonValue rows_matrix(const A2aPayload& payload) {
    JsonArray matrix;
    for (int src = 0; src < payload.ranks(); ++src) {
        JsonArray row;
        for (int dst = 0; dst < payload.ranks(); ++dst) row.emplace_back(payload.rows(src, dst));
        matrix.emplace_back(std::move(row));
    }
    return JsonValue(std::move(matrix));
}

void measure_nccl(BaselineRun& run, int ranks) {
    const BaselineOptions& o = run.options;
    const NcclLibrary* nccl = nullptr;
    try {
        nccl = &nccl_library();
    } catch (const UnsupportedError& e) {
        run.skip(std::string("NCCL all-to-all: ") + e.what());
        return;
    }
    run.nccl_version = nccl->version;
    run.nccl_path = nccl->path;

    NcclA2aOptions a2a;
    a2a.shape = A2aShape{ranks, o.tokens, o.hidden, o.topk, o.experts, o.dtype, o.seed};
    a2a.warmup = o.warmup;
    a2a.iters = o.iters;
    const A2aPayload payload(a2a.shape);
    for (const NcclA2aResult& result : measure_nccl_a2a(a2a, payload, *nccl)) {
        const bool dispatch = result.phase == A2aPhase::kDispatch;
        BenchRecord record = run.new_record("nccl_a2a");
        record.dtype = dispatch ? payload_name(o.dtype) : "bf16";
        record.ranks = ranks;
        record.gpus = ranks;
        record.tokens_per_rank = o.tokens;
        record.hidden = o.hidden;
        record.topk = o.topk;
        record.experts = o.experts;
        record.time_us = result.time_us;
        record.logical_gbps = gbps(static_cast<double>(result.max_bytes_received), result.time_us.median);
        record.nvlink_gbps = gbps(static_cast<double>(result.max_remote_bytes_sent), result.time_us.median);
        record.set_peer_bound(run.peer_bound_gbps);
        record.set_nccl_reference(result.time_us.median);  // speedup 1.0 by definition
        record.extra = {
            {"phase", dispatch ? "dispatch" : "combine"},
            {"bytes", result.max_bytes_received},
            {"remote_bytes", result.max_remote_bytes_sent},
            {"row_bytes", dispatch ? dispatch_row_bytes(o.dtype, o.hidden) : combine_row_bytes(o.hidden)},
            {"rows", rows_matrix(payload)},
            {"peer_bound_bidirectional_gbps",
             run.peer_bound_bidir_gbps ? JsonValue(*run.peer_bound_bidir_gbps) : JsonValue()},
            {"iters", a2a.iters},
            {"warmup", a2a.warmup},
            {"seed", static_cast<int64_t>(o.seed)},
            {"nccl_version", nccl->version},
        };
        run.records.push_back(std::move(record));
    }
}

JsonValue make_meta(const BaselineRun& run, const std::vector<std::string>& argv) {
    int runtime_version = 0, driver_version = 0;
    cudaRuntimeGetVersion(&runtime_version);
    cudaDriverGetVersion(&driver_version);
    JsonArray args(argv.begin(), argv.end());
    JsonArray skipped(run.skipped.begin(), run.skipped.end());
    const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
    return JsonValue(JsonObject{
        {"tool", "switchyard-bench"},
        {"subcommand", "baseline"},
        {"argv", JsonValue(std::move(args))},
        {"gpu", run.info.gpu},
        {"num_gpus", run.info.num_gpus},
        {"commit", run.info.commit},
        {"date", run.info.date},
        {"cuda_runtime_version", runtime_version},
        {"cuda_driver_version", driver_version},
        {"nccl_version", run.nccl_version ? JsonValue(*run.nccl_version) : JsonValue()},
        {"nccl_library", run.nccl_path.empty() ? JsonValue() : JsonValue(run.nccl_path)},
        {"NCCL_NVLS_ENABLE", nvls ? JsonValue(nvls) : JsonValue()},
        {"peer_bound_gbps", run.peer_bound_gbps ? JsonValue(*run.peer_bound_gbps) : JsonValue()},
        {"skipped", JsonValue(std::move(skipped))},
    });
}

}  // namespace

int run_baseline(const BaselineOptions& options, const std::vector<std::string>& argv) {
    std::string why;
    const int num_gpus = usable_gpu_count(&why);
    if (num_gpus == 0) {
        std::printf(
            "switchyard-bench baseline: no CUDA GPU found (%s); the baseline needs 2 GPUs. "
            "Run `switchyard-bench cpu` for the CPU reference round trip.\n",
            why.c_str());
        return 77;
    }
    // Before anything can initialize NCCL: NVLink multicast is forbidden on the GPU machine.
    disable_nvls_unless_set();

    BaselineRun run{options, collect_run_info(num_gpus)};
    std::printf("switchyard-bench baseline on %d x %s (commit %s, %s)\n", num_gpus, run.info.gpu.c_str(),
                run.info.commit.c_str(), run.info.date.c_str());
    std::printf(
        "payload: %d tokens/rank, hidden %d, top-%d of %d experts, dispatch %s, combine bf16; %d iters\n\n",
        options.tokens, options.hidden, options.topk, options.experts, payload_name(options.dtype),
        options.iters);

    if (num_gpus < 2) {
        run.skip("only 1 GPU visible: the copy-engine peer bound and the NCCL all-to-all need 2 GPUs");
    } else if (options.gpus > num_gpus) {
        throw InvalidArgument("--gpus " + std::to_string(options.gpus) + " but only " +
                              std::to_string(num_gpus) + " GPUs are visible");
    } else if (options.experts % options.gpus != 0) {
        throw InvalidArgument("--experts " + std::to_string(options.experts) +
                              " is not a multiple of --gpus " + std::to_string(options.gpus));
    } else {
        measure_peer_bound(run);
        measure_nccl(run, options.gpus);
    }

    std::printf("\n");
    print_results_table(run.records);
    if (options.out) {
        write_results_file(*options.out, run.records, make_meta(run, argv));
        std::printf("\nwrote %zu records to %s\n", run.records.size(), options.out->c_str());
    }
    return 0;
}

}  // namespace switchyard::bench
