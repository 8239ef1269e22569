#include "baseline.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/nccl_library.hpp"
#include "launch_floor.hpp"
#include "nccl_a2a_bench.hpp"
#include "p2p_copy_bench.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

BenchRecord baseline_record(const char* op, const RunInfo& run) {
    BenchRecord record;
    record.mode = "baseline";
    record.op = op;
    record.dtype = "n/a";
    record.stamp(run);
    return record;
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

JsonValue optional_json(const std::optional<double>& value) {
    return value ? JsonValue(*value) : JsonValue();
}

}  // namespace

std::optional<double> Baselines::nccl(int tokens, PayloadType payload, A2aPhase phase) const {
    const auto found = nccl_us.find({tokens, payload, phase});
    if (found == nccl_us.end()) return std::nullopt;
    return found->second;
}

void Baselines::skip(const std::string& reason) {
    std::printf("  skipped: %s\n", reason.c_str());
    skipped.push_back(reason);
}

JsonObject Baselines::meta() const {
    return {
        {"peer_bound_gbps", optional_json(peer_bound_gbps)},
        {"peer_bound_bidirectional_gbps", optional_json(peer_bound_bidirectional_gbps)},
        {"peer_bound_kind", same_device ? "device_to_device" : "peer_to_peer"},
        {"launch_floor_us", optional_json(launch_floor_us)},
        {"nccl_version", nccl_version ? JsonValue(*nccl_version) : JsonValue()},
        {"nccl_library", nccl_library.empty() ? JsonValue() : JsonValue(nccl_library)},
        {"skipped", JsonValue(JsonArray(skipped.begin(), skipped.end()))},
    };
}

void measure_copy_bound(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines) {
    P2pCopyOptions copy;
    copy.iters = plan.copy_iters;
    copy.warmup = std::min(plan.warmup, 2);
    baselines.same_device = plan.gpus < 2;
    if (baselines.same_device) copy.dst_device = 0;
    std::vector<P2pCopyResult> results;
    try {
        results = measure_p2p_copy(copy);
    } catch (const UnsupportedError& e) {
        baselines.skip(std::string("copy-engine peer bound: ") + e.what());
        return;
    }
    for (const P2pCopyResult& result : results) {
        auto& best =
            result.bidirectional ? baselines.peer_bound_bidirectional_gbps : baselines.peer_bound_gbps;
        best = std::max(best.value_or(0.0), result.gbps_per_direction);
    }
    for (const P2pCopyResult& result : results) {
        BenchRecord record = baseline_record(baselines.same_device ? "d2d_copy" : "p2p_copy", run);
        record.ranks = baselines.same_device ? 1 : 2;
        record.gpus = record.ranks;
        record.time_us = result.time_us;
        record.logical_gbps = result.gbps_per_direction;
        record.nvlink_gbps =
            baselines.same_device ? std::nullopt : std::optional<double>(result.gbps_per_direction);
        record.set_peer_bound(baselines.peer_bound_gbps);
        if (baselines.same_device && baselines.peer_bound_gbps && *baselines.peer_bound_gbps > 0)
            record.fraction_of_peer_bound = result.gbps_per_direction / *baselines.peer_bound_gbps;
        record.extra = {
            {"direction", result.bidirectional ? "bidirectional" : "unidirectional"},
            {"bytes", static_cast<int64_t>(result.bytes)},
            {"src_device", copy.src_device},
            {"dst_device", copy.dst_device},
            {"iters", copy.iters},
            {"warmup", copy.warmup},
        };
        baselines.records.push_back(std::move(record));
    }
}

void measure_floor(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines) {
    BenchRecord record = baseline_record("launch_floor", run);
    record.ranks = 1;
    record.gpus = 1;
    record.time_us = measure_launch_floor(0, std::max(plan.iters, 50), std::max(plan.warmup, 5));
    baselines.launch_floor_us = record.time_us.median;
    record.extra = {{"kernel", "empty, 1 block of 1 thread, plain launch through the JIT"}};
    baselines.records.push_back(std::move(record));
}

void measure_nccl(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines) {
    if (plan.gpus < 2 || plan.ranks != plan.gpus) {
        baselines.skip("NCCL all-to-all: needs one rank per GPU on at least 2 GPUs (this run: " +
                       std::to_string(plan.ranks) + " rank(s) on " + std::to_string(plan.gpus) + " GPU(s))");
        return;
    }
    if (plan.shape.experts % plan.gpus != 0) {
        baselines.skip("NCCL all-to-all: experts (" + std::to_string(plan.shape.experts) +
                       ") is not a multiple of the GPUs (" + std::to_string(plan.gpus) + ")");
        return;
    }
    const NcclLibrary* nccl = nullptr;
    try {
        disable_nvls_unless_set();  // before anything initializes NCCL
        nccl = &nccl_library();
    } catch (const UnsupportedError& e) {
        baselines.skip(std::string("NCCL all-to-all: ") + e.what());
        return;
    }
    baselines.nccl_version = nccl->version;
    baselines.nccl_library = nccl->path;
    for (const PayloadType dtype : plan.dtypes) {
        NcclA2aOptions a2a;
        a2a.shape = plan.shape;
        a2a.shape.ranks = plan.gpus;
        a2a.shape.dispatch_type = dtype;
        a2a.warmup = plan.warmup;
        a2a.iters = plan.iters;
        const A2aPayload payload(a2a.shape);
        const auto& s = a2a.shape;
        for (const NcclA2aResult& result : measure_nccl_a2a(a2a, payload, *nccl)) {
            const bool dispatch = result.phase == A2aPhase::kDispatch;
            baselines.nccl_us[{s.tokens_per_rank, dtype, result.phase}] = result.time_us.median;
            BenchRecord record = baseline_record("nccl_a2a", run);
            record.dtype = dispatch ? payload_name(dtype) : "bf16";
            record.ranks = s.ranks;
            record.gpus = s.ranks;
            record.tokens_per_rank = s.tokens_per_rank;
            record.hidden = s.hidden;
            record.topk = s.topk;
            record.experts = s.experts;
            record.time_us = result.time_us;
            record.logical_gbps = gbps(static_cast<double>(result.max_bytes_received), result.time_us.median);
            record.nvlink_gbps =
                gbps(static_cast<double>(result.max_remote_bytes_sent), result.time_us.median);
            record.set_peer_bound(baselines.peer_bound_gbps);
            record.set_nccl_reference(result.time_us.median);  // speedup 1.0 by definition
            record.extra = {
                {"phase", dispatch ? "dispatch" : "combine"},
                {"bytes", result.max_bytes_received},
                {"remote_bytes", result.max_remote_bytes_sent},
                {"row_bytes", dispatch ? dispatch_row_bytes(dtype, s.hidden) : combine_row_bytes(s.hidden)},
                {"rows", rows_matrix(payload)},
                {"iters", a2a.iters},
                {"warmup", a2a.warmup},
                {"seed", static_cast<int64_t>(s.seed)},
                {"nccl_version", nccl->version},
            };
            baselines.records.push_back(std::move(record));
        }
    }
}

void measure_baselines(const BaselinePlan& plan, const RunInfo& run, Baselines& baselines) {
    measure_copy_bound(plan, run, baselines);
    measure_floor(plan, run, baselines);
    measure_nccl(plan, run, baselines);
}

std::optional<double> Baselines::op_floor_us(double crossing_bytes, double network_us) const {
    if (!launch_floor_us || !peer_bound_gbps || *peer_bound_gbps <= 0) return std::nullopt;
    const double transfer_us = std::max(crossing_bytes / (*peer_bound_gbps * 1e3), network_us);
    return *launch_floor_us + transfer_us;
}

void Baselines::add_floor(BenchRecord& record, double crossing_bytes, double network_us) const {
    const std::optional<double> floor = op_floor_us(crossing_bytes, network_us);
    if (!floor || *floor <= 0) return;
    record.extra.push_back({"floor_us", JsonValue(*floor)});
    record.extra.push_back({"fraction_of_floor", JsonValue(record.time_us.median / *floor)});
}

}  // namespace switchyard::bench
