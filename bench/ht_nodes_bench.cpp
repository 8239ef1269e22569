// See ht_nodes_bench.hpp.
#include "ht_nodes_bench.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "event_timer.hpp"
#include "harness/cuda_raii.hpp"
#include "harness/rank_runner.hpp"
#include "l2_flush.hpp"
#include "routing.hpp"
#include "stats.hpp"
#include "stream_alignment.hpp"
#include "stream_gate.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/network.hpp"
#include "switchyard/sm_model.hpp"

namespace switchyard::bench {
namespace {

struct NodesRank {
    std::unique_ptr<Buffer> buffer;
    harness::DeviceBuffer x_bf16, x_fp8, scales, idx, y;
    std::unique_ptr<L2Flusher> flusher;
    std::unique_ptr<EventTimer> timer;
    std::unique_ptr<StreamGate> gate;
};

// The run's shape and routing, which every rank can see.
struct NodesShape {
    int R, G, N, T, H, K, E;
    std::vector<std::vector<int64_t>> idx;  // [R][T * K]
    bool routed(int source, int t, int rank) const {
        const int L = E / R;
        for (int k = 0; k < K; ++k) {
            const int64_t expert = idx[size_t(source)][size_t(t) * K + k];
            if (expert >= 0 && expert / L == rank) return true;
        }
        return false;
    }
};

// Bytes one rank moves inside its node per op (NVLink between GPUs of a node): the forwarder's rows
// to the node's other ranks (dispatch), the contributor's rows to the node's other forwarders
// (combine); and the bytes of the rows it receives (logical).
struct RankBytes {
    int64_t dispatch_nvlink = 0, combine_nvlink = 0, dispatch_received = 0, combine_received = 0;
};

RankBytes rank_bytes(const NodesShape& s, int rank, int64_t record_bytes, int64_t combine_bytes) {
    RankBytes bytes;
    const int node = rank / s.G, local = rank % s.G;
    for (int source = 0; source < s.R; ++source)
        for (int t = 0; t < s.T; ++t) {
            // Dispatch: this rank forwards the tokens of its rail's sources that go to its node.
            if (source % s.G == local)
                for (int g = 0; g < s.G; ++g)
                    if (node * s.G + g != rank && s.routed(source, t, node * s.G + g))
                        bytes.dispatch_nvlink += record_bytes;
            if (!s.routed(source, t, rank)) continue;
            bytes.dispatch_received += record_bytes;
            bytes.combine_received += combine_bytes;
            // Combine: this rank's row of (source, t) goes to the forwarder of source's rail here.
            if (source % s.G != local) bytes.combine_nvlink += combine_bytes;
        }
    return bytes;
}

// One measurement point (payload, SM count): per rank and timed iteration, the two ops' times, and
// the network bytes of one untimed dispatch and its combine against the prediction.
struct PointResult {
    explicit PointResult(int ranks)
        : dispatch(ranks), combine(ranks), sent(ranks), predicted(ranks), differs(ranks) {}
    std::vector<std::vector<double>> dispatch, combine;
    std::vector<std::array<int64_t, 2>> sent, predicted;  // per rank, per op
    std::vector<std::array<bool, 2>> differs;             // a peer's bytes differ from the prediction
};

struct Run {
    const BenchOptions& options;
    NodesShape shape;
    int iters, warmup;
    BufferConfig config;
    std::vector<NodesRank> ranks;
    std::unique_ptr<StreamAligner> aligner;  // the ranks' streams meet before each timed op
};

void set_up(harness::RankGroup& group, Run& run) {
    const NodesShape& shape = run.shape;
    const int T = shape.T, H = shape.H;
    const size_t scale_words = size_t((H + 127) / 128);
    group.run([&](harness::RankContext& rank) {
        NodesRank& state = run.ranks[size_t(rank.rank)];
        state.buffer = std::make_unique<Buffer>(rank.communicator, rank.device, run.config);
        std::mt19937 rng(uint32_t(run.options.seed) * 77u + uint32_t(rank.rank));
        std::vector<uint16_t> x(size_t(T) * H);
        for (auto& v : x) v = uint16_t(0x3c00 + (rng() % 0x0800));
        std::vector<uint8_t> x8(size_t(T) * H);
        for (auto& v : x8) v = uint8_t(rng() % 0x7e);
        const std::vector<float> scales(size_t(T) * scale_words, 0.01f);
        const std::vector<int64_t>& idx = shape.idx[size_t(rank.rank)];
        state.x_bf16 = harness::DeviceBuffer(rank.device, x.size() * 2);
        state.x_fp8 = harness::DeviceBuffer(rank.device, x8.size());
        state.scales = harness::DeviceBuffer(rank.device, scales.size() * 4);
        state.idx = harness::DeviceBuffer(rank.device, idx.size() * 8);
        state.y = harness::DeviceBuffer(rank.device, size_t(shape.R) * T * H * 2);
        SY_CUDA_CHECK(cudaMemcpy(state.x_bf16.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.x_fp8.get(), x8.data(), x8.size(), cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(
            cudaMemcpy(state.scales.get(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.idx.get(), idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemset(state.y.get(), 0x3c, state.y.size()));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        state.flusher = std::make_unique<L2Flusher>(rank.device);
        state.timer = std::make_unique<EventTimer>(rank.device);
        state.gate = std::make_unique<StreamGate>();
    });
}

HtNetworkShape network_shape(const NodesShape& shape, bool fp8) {
    HtNetworkShape network;
    network.num_ranks = shape.R;
    network.num_nodes = shape.N;
    network.num_experts = shape.E;
    network.hidden = shape.H;
    network.topk = shape.K;
    network.records = fp8 ? ScaleFormat::kFloat32 : ScaleFormat::kNone;
    return network;
}

// The engine's counts between two snapshots (the largest values stay those of `after`).
NetworkEngineStats engine_since(const NetworkEngineStats& before, NetworkEngineStats after) {
    for (auto field : {&NetworkEngineStats::passes,         &NetworkEngineStats::requests,
                       &NetworkEngineStats::full_takes,     &NetworkEngineStats::batches,
                       &NetworkEngineStats::coalesce_waits, &NetworkEngineStats::copy_calls,
                       &NetworkEngineStats::copy_call_ns,   &NetworkEngineStats::copies,
                       &NetworkEngineStats::copy_bytes,     &NetworkEngineStats::write_calls,
                       &NetworkEngineStats::words,          &NetworkEngineStats::write_call_ns,
                       &NetworkEngineStats::signal_adds,    &NetworkEngineStats::busy_ns,
                       &NetworkEngineStats::waiting_ns,     &NetworkEngineStats::idle_ns,
                       &NetworkEngineStats::wire_ns,        &NetworkEngineStats::late_ns,
                       &NetworkEngineStats::queued_ns,      &NetworkEngineStats::ring_lag_samples,
                       &NetworkEngineStats::ring_lag_ns,    &NetworkEngineStats::stream_lag_samples,
                       &NetworkEngineStats::stream_lag_ns,  &NetworkEngineStats::bursts,
                       &NetworkEngineStats::burst_gaps,     &NetworkEngineStats::burst_idle_ns})
        after.*field -= before.*field;
    return after;
}

// One rank's part of a measurement point.
void measure_rank(harness::RankContext& rank, Run& run, bool fp8, int sms, PointResult& point) {
    const NodesShape& shape = run.shape;
    NodesRank& state = run.ranks[size_t(rank.rank)];
    const int T = shape.T, H = shape.H, K = shape.K;
    cudaStream_t stream = rank.stream;
    const Device dev = Device::cuda(rank.device);
    DispatchArgs args;
    if (fp8) {
        args.x = TensorView::contiguous(state.x_fp8.get(), DType::kFloat8E4M3, {T, H}, dev);
        args.x_scales =
            TensorView::contiguous(state.scales.get(), DType::kFloat32, {T, int64_t((H + 127) / 128)}, dev);
    } else {
        args.x = TensorView::contiguous(state.x_bf16.get(), DType::kBFloat16, {T, H}, dev);
    }
    args.topk_idx = TensorView::contiguous(state.idx.get(), DType::kInt64, {T, K}, dev);
    args.num_experts = shape.E;
    args.counts = CountMode::kDevice;
    args.num_sms = sms;
    CombineArgs combine;
    combine.y = TensorView::contiguous(state.y.get(), DType::kBFloat16, {int64_t(shape.R) * T, H}, dev);
    combine.num_sms = sms;
    state.buffer->ht_load_kernels(args);
    const NetworkEngineStats engine_before = state.buffer->network_stats().engine;
    rank.host_barrier();
    // The accounting pass (untimed): each op waited for with the network, then its bytes.
    DispatchResult result;
    for (int op = 0; op < 2; ++op) {
        const NetworkStats before = state.buffer->network_stats();
        if (op == 0)
            result = state.buffer->dispatch(args, stream);
        else
            state.buffer->combine(combine, result.handle, stream);
        state.buffer->synchronize();
        const NetworkStats after = state.buffer->network_stats();
        const auto predicted =
            predict_ht_network_bytes(network_shape(shape, fp8), shape.idx, rank.rank,
                                     op == 0 ? HtNetworkOp::kDispatch : HtNetworkOp::kCombine);
        for (int q = 0; q < shape.R; ++q) {
            const int64_t sent = int64_t(after.bytes_to_rank[size_t(q)] - before.bytes_to_rank[size_t(q)]);
            point.sent[size_t(rank.rank)][size_t(op)] += sent;
            point.predicted[size_t(rank.rank)][size_t(op)] += int64_t(predicted[size_t(q)]);
            if (sent != int64_t(predicted[size_t(q)])) point.differs[size_t(rank.rank)][size_t(op)] = true;
        }
    }
    rank.host_barrier();
    for (int iter = 0; iter < run.warmup + run.iters; ++iter) {
        double us[2] = {0, 0};
        for (int op = 0; op < 2; ++op) {
            state.flusher->flush(stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(stream));
            rank.host_barrier();
            if (iter >= run.warmup) state.gate->close(stream);
            // The GPU barrier: every rank's earlier work is done and the network quiet. Its release
            // differs between the ranks by how late the emulated network delivers its signals (up to
            // ~13 us between nodes, traced 2026-12-02), and an op's time is its slowest rank's, whose
            // data come from a rank that left the barrier last; so the streams then meet on events, as
            // the benches on one node meet on the GPU, and every timed op starts together.
            state.buffer->barrier(stream);
            run.aligner->mark(size_t(rank.rank), stream);
            rank.host_barrier();  // every rank's mark is recorded before any stream waits for it
            run.aligner->wait_for_others(size_t(rank.rank), stream);
            state.timer->start(stream);
            if (op == 0)
                result = state.buffer->dispatch(args, stream);
            else
                state.buffer->combine(combine, result.handle, stream);
            state.timer->stop(stream);
            rank.host_barrier();  // every rank has enqueued: the gates open together
            state.gate->open();
            us[op] = state.timer->elapsed_us();
        }
        state.buffer->check_errors();
        if (iter < run.warmup) continue;
        point.dispatch[size_t(rank.rank)].push_back(us[0]);
        point.combine[size_t(rank.rank)].push_back(us[1]);
    }
    state.buffer->synchronize();
    if (run.options.engine_stats) {
        const std::string line = engine_since(engine_before, state.buffer->network_stats().engine).summary();
        rank.host_barrier();
        for (int r = 0; r < shape.R; ++r) {
            if (r == rank.rank) std::printf("    rank %d %s\n", r, line.c_str());
            std::fflush(stdout);
            rank.host_barrier();
        }
    }
}

// The record of op `op` (0 dispatch, 1 combine) at a measurement point.
BenchRecord make_record(const Run& run, const RunInfo& info, int gpus, bool fp8, int sms, int op,
                        const PointResult& point, const std::vector<RankBytes>& moved, int model_sms) {
    const NodesShape& shape = run.shape;
    std::vector<double> times(size_t(run.iters), 0.0);
    int64_t network = 0, predicted = 0, nvlink = 0, received = 0;
    bool match = true;
    for (int r = 0; r < shape.R; ++r) {
        const auto& samples = op == 0 ? point.dispatch[size_t(r)] : point.combine[size_t(r)];
        for (int i = 0; i < run.iters; ++i) times[size_t(i)] = std::max(times[size_t(i)], samples[size_t(i)]);
        network = std::max(network, point.sent[size_t(r)][size_t(op)]);
        predicted = std::max(predicted, point.predicted[size_t(r)][size_t(op)]);
        match = match && !point.differs[size_t(r)][size_t(op)];
        nvlink =
            std::max(nvlink, op == 0 ? moved[size_t(r)].dispatch_nvlink : moved[size_t(r)].combine_nvlink);
        received = std::max(received,
                            op == 0 ? moved[size_t(r)].dispatch_received : moved[size_t(r)].combine_received);
    }
    BenchRecord record;
    record.mode = "ht";
    record.op = op == 0 ? "dispatch" : "combine";
    record.dtype = op == 0 ? (fp8 ? "fp8" : "bf16") : "bf16";
    record.layout = "rank_major";
    record.ranks = shape.R;
    record.gpus = gpus;
    record.tokens_per_rank = shape.T;
    record.hidden = shape.H;
    record.topk = shape.K;
    record.experts = shape.E;
    record.num_sms = sms;
    record.time_us = summarize(times);
    record.logical_gbps = gbps(double(received), record.time_us.median);
    record.nvlink_gbps = gbps(double(nvlink), record.time_us.median);
    record.buffer_bytes = int64_t(run.ranks[0].buffer->buffer_bytes());
    record.stamp(info);
    const double cap = run.config.network_bandwidth_gbps;
    const double network_gbps = gbps(double(network), record.time_us.median).value_or(0.0);
    record.extra.emplace_back("nodes", JsonValue(int64_t(shape.N)));
    record.extra.emplace_back("network_gbps", JsonValue(network_gbps));
    // An unlimited network (cap 0) has no fraction: null.
    record.extra.emplace_back("fraction_of_network_cap",
                              cap > 0 ? JsonValue(network_gbps / cap) : JsonValue());
    record.extra.emplace_back("network_cap_gbps", JsonValue(cap));
    record.extra.emplace_back("network_bytes", JsonValue(network));
    record.extra.emplace_back("predicted_network_bytes", JsonValue(predicted));
    record.extra.emplace_back("network_bytes_match", JsonValue(match));
    record.extra.emplace_back("dispatch_dtype", JsonValue(std::string(fp8 ? "fp8" : "bf16")));
    record.extra.emplace_back("count_mode", JsonValue(std::string("device")));
    record.extra.emplace_back("model_num_sms", JsonValue(int64_t(model_sms)));
    record.extra.emplace_back("is_model_choice", JsonValue(sms == model_sms));
    char of_cap[64] = "(no cap)";
    if (cap > 0) std::snprintf(of_cap, sizeof of_cap, "= %.3f of the %.0f GB/s cap", network_gbps / cap, cap);
    std::printf("  %s sms=%2d: %s %8.1f us, network %6.2f GB/s %s, bytes %s prediction\n",
                fp8 ? "fp8 " : "bf16", sms, op == 0 ? "dispatch" : "combine ", record.time_us.median,
                network_gbps, of_cap, match ? "==" : "!=");
    return record;
}

// The SM counts of the sweep within the budget, and the model's choices.
std::vector<int> sm_counts(const Run& run, const int (&model_sms)[2]) {
    std::vector<int> counts;
    const int budget = run.ranks[0].buffer->sm_budget();
    for (int sms : run.options.sweep)
        if (sms <= budget) counts.push_back(sms);
    counts.insert(counts.end(), std::begin(model_sms), std::end(model_sms));
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    return counts;
}

}  // namespace

void measure_ht_nodes(const BenchOptions& options, int R, int G, int nodes, const RunInfo& info,
                      std::vector<BenchRecord>& records, JsonObject& meta) {
    const ModeDefaults defaults = ht_defaults();
    Run run{options,
            {R,
             R / nodes,
             nodes,
             options.tokens.value_or(defaults.tokens),
             options.hidden,
             options.topk,
             options.experts,
             {}},
            options.iters.value_or(defaults.iters),
            options.warmup.value_or(defaults.warmup),
            {},
            {}};
    NodesShape& shape = run.shape;
    for (int r = 0; r < R; ++r)
        shape.idx.push_back(random_topk_routing(shape.T, shape.K, shape.E, rank_seed(options.seed, r)));
    std::printf(
        "\nHT across %d emulated nodes: EP%d (%d per node) on %d GPU(s), %d tokens/rank, hidden %d, "
        "top-%d of %d experts, %d iters\n",
        nodes, R, shape.G, G, shape.T, shape.H, shape.K, shape.E, run.iters);
    run.config.max_tokens_per_rank = shape.T;
    run.config.max_hidden = shape.H;
    run.config.max_topk = shape.K;
    run.config.max_experts = shape.E;
    run.config.timeout_seconds = options.timeout_seconds.value_or(defaults.timeout_seconds);
    run.config.launch_on_caller_stream = options.caller_stream;
    run.config.emulated_nodes = nodes;
    if (options.network_gbps) run.config.network_bandwidth_gbps = *options.network_gbps;
    run.ranks.resize(size_t(R));
    harness::RankGroup group(R, G);
    set_up(group, run);
    std::vector<int> devices;
    for (int r = 0; r < R; ++r) devices.push_back(harness::device_of_rank(r, R, G));
    run.aligner = std::make_unique<StreamAligner>(devices);
    auto model_for = [&](SmModelOp op) {
        SmModelInput input;
        input.num_experts = shape.E;
        input.topk = shape.K;
        input.num_ranks = R;
        input.num_nodes = nodes;
        input.num_device_sms = run.ranks[0].buffer->sm_budget();
        input.op = op;
        return model_num_sms(input).num_sms;
    };
    const int model_sms[2] = {model_for(SmModelOp::kDispatch), model_for(SmModelOp::kCombine)};
    for (PayloadType dtype : options.dtypes) {
        const bool fp8 = dtype == PayloadType::kFP8;
        const auto record_bytes =
            device::RecordLayout::dispatch(shape.H, fp8 ? device::kPayloadFp8 : device::kPayloadBf16,
                                           fp8 ? device::kScaleFloat32 : device::kScaleNone, shape.K)
                .total_bytes;
        std::vector<RankBytes> moved;
        for (int r = 0; r < R; ++r)
            moved.push_back(rank_bytes(shape, r, record_bytes,
                                       device::RecordLayout::combine(shape.H, shape.K).total_bytes));
        for (int sms : sm_counts(run, model_sms)) {
            PointResult point(R);
            group.run([&](harness::RankContext& rank) { measure_rank(rank, run, fp8, sms, point); });
            for (int op = 0; op < 2; ++op)
                records.push_back(make_record(run, info, G, fp8, sms, op, point, moved, model_sms[op]));
        }
    }
    meta.emplace_back("ht_nodes", JsonValue(int64_t(nodes)));
    meta.emplace_back("ht_nodes_model_num_sms_dispatch", JsonValue(int64_t(model_sms[0])));
    meta.emplace_back("ht_nodes_model_num_sms_combine", JsonValue(int64_t(model_sms[1])));
    group.run([&](harness::RankContext& rank) {
        rank.host_barrier();
        run.ranks[size_t(rank.rank)] = NodesRank{};
        rank.host_barrier();
    });
}

}  // namespace switchyard::bench
