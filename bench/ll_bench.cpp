// LL benchmark (see ll_bench.hpp).
#include "ll_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "event_timer.hpp"
#include "harness/cuda_raii.hpp"
#include "harness/rank_runner.hpp"
#include "stats.hpp"
#include "stream_gate.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"
#include "util/cuda_check.hpp"

namespace switchyard::bench {
namespace {

// The options of one LL run, resolved from the command line.
struct LlOptions {
    int iters, warmup, tokens, hidden, topk, experts;
    uint64_t seed;
    bool caller_stream;
    double timeout_seconds;
    int nodes;  // emulated nodes (1: one node, no network)
};

// One measured configuration.
struct Mode {
    int tokens;
    bool graph;
    bool hook;
    bool hierarchical = false;  // the dispatch carries the weights; partials per (token, rank) come back
};

// Per-op samples of one mode (the slowest rank of each iteration), and the byte counts.
struct ModeResult {
    std::vector<double> dispatch_us, combine_us, send_us, recv_us, combine_send_us, combine_recv_us;
    // Plain launches only: CPU time of rank 0's ll_dispatch / ll_combine calls (DESIGN.md §9).
    std::vector<double> host_dispatch_us, host_combine_us;
    double dispatch_bytes = 0, dispatch_nvlink_bytes = 0, combine_bytes = 0, combine_nvlink_bytes = 0;
    // Across nodes: the busiest rank's bytes put over the network by one dispatch / combine (the
    // emulated network's accounting), and the network's cap and latency.
    double dispatch_network_bytes = 0, combine_network_bytes = 0;
    double network_cap_gbps = 0, network_latency_us = 0;
    int64_t buffer_bytes = 0;
    int num_sms = 0;
};

// Bytes this rank's network requests carried so far (all rail peers).
double network_bytes(const Buffer& buffer) {
    double bytes = 0;
    for (uint64_t b : buffer.network_stats().bytes_requested_to_rank) bytes += double(b);
    return bytes;
}

void fill_routing(std::mt19937_64& rng, int tokens, int topk, int experts, std::vector<int64_t>& idx) {
    idx.assign(size_t(tokens) * topk, -1);
    for (int t = 0; t < tokens; ++t) {
        std::vector<int64_t> chosen;
        while (int(chosen.size()) < topk) {
            const int64_t e = int64_t(rng() % experts);
            if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
        }
        std::copy(chosen.begin(), chosen.end(), idx.begin() + size_t(t) * topk);
    }
}

// One mode on a fresh group of ranks. The ranks' streams come from the library's pool, so every
// mode runs on the same warmed-up streams (harness/rank_runner.hpp says why).
ModeResult measure(const LlOptions& options, int ranks, int gpus, const Mode& mode) {
    ModeResult result;
    const int L = options.experts / ranks, T_ll = std::max(options.tokens, 128);
    const int64_t rows = int64_t(ranks) * T_ll;
    std::vector<std::vector<double>> samples(6 * ranks, std::vector<double>(options.iters, 0.0));
    std::vector<double> network_dispatch(ranks, 0.0), network_combine(ranks, 0.0);
    harness::run_ranks(ranks, gpus, [&](harness::RankContext& context) {
        const int rank = context.rank, device = context.device;
        cudaStream_t stream = context.stream;
        BufferConfig config;
        config.enable_high_throughput = false;
        config.enable_low_latency = true;
        config.ll_max_tokens_per_rank = T_ll;
        config.max_hidden = options.hidden;
        config.max_topk = options.topk;
        config.max_experts = options.experts;
        config.launch_on_caller_stream = options.caller_stream;
        config.timeout_seconds = options.timeout_seconds;
        config.emulated_nodes = options.nodes > 1 ? options.nodes : 0;
        Buffer buffer(context.communicator, device, config);
        if (rank == 0 && options.nodes > 1) {
            result.network_cap_gbps = config.network_bandwidth_gbps;
            result.network_latency_us = config.network_latency_us;
        }

        // Inputs: random bf16 activations, uniform routing, weights; y = expert outputs.
        std::mt19937_64 rng(options.seed * 1000 + rank);
        std::vector<uint16_t> x(size_t(mode.tokens) * options.hidden);
        for (auto& v : x) v = reference::float_to_bf16(float(int(rng() % 2001) - 1000) / 250.0f);
        std::vector<int64_t> idx;
        fill_routing(rng, mode.tokens, options.topk, options.experts, idx);
        std::vector<float> weights(idx.size(), 1.0f / options.topk);
        harness::DeviceBuffer x_buffer(device, x.size() * 2 + 16), idx_buffer(device, idx.size() * 8 + 16),
            w_buffer(device, weights.size() * 4 + 16),
            y_buffer(device, size_t(L) * rows * options.hidden * 2);
        void *d_x = x_buffer.get(), *d_idx = idx_buffer.get(), *d_w = w_buffer.get(), *d_y = y_buffer.get();
        SY_CUDA_CHECK(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(d_idx, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(d_w, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemset(d_y, 0, size_t(L) * rows * options.hidden * 2));
        const Device dev = Device::cuda(device);
        LowLatencyDispatchArgs dispatch;
        dispatch.x = TensorView::contiguous(d_x, DType::kBFloat16, {mode.tokens, options.hidden}, dev);
        dispatch.topk_idx = TensorView::contiguous(d_idx, DType::kInt64, {mode.tokens, options.topk}, dev);
        dispatch.num_experts = options.experts;
        dispatch.use_fp8 = true;
        dispatch.scale_format = ScaleFormat::kFloat32;
        dispatch.return_recv_hook = mode.hook;
        const TensorView weights_view =
            TensorView::contiguous(d_w, DType::kFloat32, {mode.tokens, options.topk}, dev);
        LowLatencyCombineArgs combine;
        combine.y = TensorView::contiguous(d_y, DType::kBFloat16, {L, rows, options.hidden}, dev);
        combine.topk_idx = dispatch.topk_idx;
        combine.return_recv_hook = mode.hook;
        // The GPU barrier aligns the ranks (across nodes: rail peers over the network, then the node).
        auto align_ranks = [&] { buffer.barrier(stream); };
        if (mode.hierarchical) {
            dispatch.topk_weights = weights_view;
            combine.hierarchical = true;
        } else {
            combine.topk_weights = weights_view;
        }

        // Bytes: a token crosses once to every rank owning one of its experts (record =
        // fp8 payload + fp32 scales); combine returns one bf16 row per (token, k), or
        // (hierarchical) one per (token, rank).
        if (rank == 0) {
            const double record = options.hidden + 4.0 * ((options.hidden + 127) / 128);
            for (int t = 0; t < mode.tokens; ++t) {
                std::vector<int> dests;
                for (int k = 0; k < options.topk; ++k) {
                    const int q = int(idx[size_t(t) * options.topk + k] / L);
                    if (std::find(dests.begin(), dests.end(), q) == dests.end()) dests.push_back(q);
                    if (mode.hierarchical) continue;
                    result.combine_bytes += options.hidden * 2.0;
                    if (q != rank) result.combine_nvlink_bytes += options.hidden * 2.0;
                }
                for (int q : dests) {
                    result.dispatch_bytes += record;
                    if (q != rank) result.dispatch_nvlink_bytes += record;
                    if (!mode.hierarchical) continue;
                    result.combine_bytes += options.hidden * 2.0;
                    if (q != rank) result.combine_nvlink_bytes += options.hidden * 2.0;
                }
            }
            result.buffer_bytes = int64_t(buffer.buffer_bytes());
            result.num_sms = buffer.sm_budget();
        }

        // The kernels of every mode (Buffer::ll_load_kernels: required with co-located
        // ranks), then the allocations and copies above, may wait for the device: meet
        // only once every rank is done with them (DESIGN.md §4, rules 5 and 7).
        buffer.ll_load_kernels(dispatch);
        SY_CUDA_CHECK(cudaDeviceSynchronize());
        context.host_barrier();

        // Warm-up (compiles the kernels) and, in graph mode, the captured graphs.
        auto run_dispatch = [&] {
            auto r = buffer.ll_dispatch(dispatch, stream);
            if (mode.hook) r.receive();
            return r;
        };
        LowLatencyDispatchResult dispatched;
        for (int i = 0; i < std::max(1, options.warmup); ++i) {
            // The barrier too: the timed loop runs behind a gate, where a first use that
            // loads a kernel would wait for the gated stream.
            align_ranks();
            dispatched = run_dispatch();
            auto c = buffer.ll_combine(combine, dispatched.handle, stream);
            if (mode.hook) c.receive();
        }
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
        buffer.check_errors();
        if (options.nodes > 1) {
            // One op of each kind, alone, for the network's byte accounting.
            buffer.synchronize();
            const double start = network_bytes(buffer);
            dispatched = run_dispatch();
            buffer.synchronize();
            const double middle = network_bytes(buffer);
            auto c = buffer.ll_combine(combine, dispatched.handle, stream);
            if (mode.hook) c.receive();
            buffer.synchronize();
            network_dispatch[rank] = middle - start;
            network_combine[rank] = network_bytes(buffer) - middle;
            buffer.check_errors();
        }
        cudaGraphExec_t dispatch_graph = nullptr, combine_graph = nullptr;
        LowLatencyCombineResult captured_combine;
        if (mode.graph) {
            cudaGraph_t graph = nullptr;
            SY_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            dispatched = run_dispatch();
            SY_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&dispatch_graph, graph,
                                                        cudaGraphInstantiateFlagAutoFreeOnLaunch));
            SY_CUDA_CHECK(cudaGraphDestroy(graph));
            SY_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            captured_combine = buffer.ll_combine(combine, dispatched.handle, stream);
            if (mode.hook) captured_combine.receive();
            SY_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
            SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&combine_graph, graph,
                                                        cudaGraphInstantiateFlagAutoFreeOnLaunch));
            SY_CUDA_CHECK(cudaGraphDestroy(graph));
        }

        EventTimer t0(device), t1(device), t2(device), t3(device);
        StreamGate gate;
        for (int it = 0; it < options.iters; ++it) {
            // Align the ranks: host rendezvous, then a GPU barrier on the stream.
            SY_CUDA_CHECK(cudaStreamSynchronize(stream));
            context.host_barrier();
            gate.close(stream);  // the GPU starts once everything below is enqueued
            align_ranks();
            if (mode.graph) {
                t0.start(stream);
                SY_CUDA_CHECK(cudaGraphLaunch(dispatch_graph, stream));
                t0.stop(stream);
                t1.start(stream);
                SY_CUDA_CHECK(cudaGraphLaunch(combine_graph, stream));
                t1.stop(stream);
            } else if (!mode.hook) {
                // The calls alone are timed on the host (the previous result is released
                // outside the timed part).
                t0.start(stream);
                auto host_start = std::chrono::steady_clock::now();
                LowLatencyDispatchResult fresh = buffer.ll_dispatch(dispatch, stream);
                samples[rank * 6 + 4][it] =
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_start)
                        .count();
                t0.stop(stream);
                dispatched = std::move(fresh);
                t1.start(stream);
                host_start = std::chrono::steady_clock::now();
                auto c = buffer.ll_combine(combine, dispatched.handle, stream);
                samples[rank * 6 + 5][it] =
                    std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_start)
                        .count();
                t1.stop(stream);
            } else {
                t0.start(stream);
                dispatched = buffer.ll_dispatch(dispatch, stream);
                t0.stop(stream);
                t1.start(stream);
                dispatched.receive();
                t1.stop(stream);
                t2.start(stream);
                auto c = buffer.ll_combine(combine, dispatched.handle, stream);
                t2.stop(stream);
                t3.start(stream);
                c.receive();
                t3.stop(stream);
            }
            gate.open();
            SY_CUDA_CHECK(cudaStreamSynchronize(stream));
            samples[rank * 6 + 0][it] = t0.elapsed_us();
            samples[rank * 6 + 1][it] = t1.elapsed_us();
            if (mode.hook && !mode.graph) {
                samples[rank * 6 + 2][it] = t2.elapsed_us();
                samples[rank * 6 + 3][it] = t3.elapsed_us();
            }
        }
        buffer.synchronize();
        if (dispatch_graph) cudaGraphExecDestroy(dispatch_graph);
        if (combine_graph) cudaGraphExecDestroy(combine_graph);
        dispatched = {};
        captured_combine = {};
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
        // Freed before the last rendezvous, while no peer can be in an op or in its buffer's
        // teardown (DESIGN.md §4, rule 2).
        x_buffer.release();
        idx_buffer.release();
        w_buffer.release();
        y_buffer.release();
        context.host_barrier();
    });
    auto slowest = [&](int column) {
        std::vector<double> out(options.iters, 0.0);
        for (int it = 0; it < options.iters; ++it)
            for (int r = 0; r < ranks; ++r) out[it] = std::max(out[it], samples[r * 6 + column][it]);
        return out;
    };
    if (mode.hook && !mode.graph) {
        result.send_us = slowest(0);
        result.recv_us = slowest(1);
        result.combine_send_us = slowest(2);
        result.combine_recv_us = slowest(3);
    } else {
        result.dispatch_us = slowest(0);
        result.combine_us = slowest(1);
    }
    if (!mode.hook && !mode.graph) {
        result.host_dispatch_us = samples[4];
        result.host_combine_us = samples[5];
    }
    result.dispatch_network_bytes = *std::max_element(network_dispatch.begin(), network_dispatch.end());
    result.combine_network_bytes = *std::max_element(network_combine.begin(), network_combine.end());
    return result;
}

BenchRecord make_record(const LlOptions& options, const RunInfo& run, const Baselines& baselines, int ranks,
                        int gpus, const Mode& mode, const ModeResult& result, bool dispatch,
                        const std::vector<double>& samples, const char* phase) {
    BenchRecord record;
    record.mode = "ll";
    record.op = dispatch ? "dispatch" : "combine";
    record.dtype = dispatch ? "fp8" : "bf16";
    record.layout = "expert_masked";
    record.graph_replay = mode.graph;
    record.ranks = ranks;
    record.gpus = gpus;
    record.tokens_per_rank = mode.tokens;
    record.hidden = options.hidden;
    record.topk = options.topk;
    record.experts = options.experts;
    record.num_sms = result.num_sms;
    record.time_us = summarize(samples);
    record.logical_gbps =
        gbps(dispatch ? result.dispatch_bytes : result.combine_bytes, record.time_us.median);
    const double crossing = dispatch ? result.dispatch_nvlink_bytes : result.combine_nvlink_bytes;
    record.nvlink_gbps = gbps(crossing, record.time_us.median);
    record.set_peer_bound(baselines.peer_bound_gbps);
    // NCCL's all-to-all of the same tokens (rank-major: one row per (token, rank) both ways).
    record.set_nccl_reference(
        baselines.nccl(mode.tokens, PayloadType::kFP8, dispatch ? A2aPhase::kDispatch : A2aPhase::kCombine));
    record.buffer_bytes = result.buffer_bytes;
    record.stamp(run);
    record.extra.push_back({"phase", JsonValue(phase)});
    record.extra.push_back({"hook", JsonValue(mode.hook)});
    record.extra.push_back({"combine_reduction", JsonValue(mode.hierarchical ? "hierarchical" : "flat")});
    record.extra.push_back({"launch_on_caller_stream", JsonValue(options.caller_stream)});
    const std::vector<double>& host = dispatch ? result.host_dispatch_us : result.host_combine_us;
    if (!host.empty()) record.extra.push_back({"host_us_median", JsonValue(summarize(host).median)});
    // Across nodes: the busiest rank's network bytes per op, their rate and its fraction of the cap.
    const bool across_nodes = options.nodes > 1;
    const double network = dispatch ? result.dispatch_network_bytes : result.combine_network_bytes;
    if (across_nodes) {
        record.extra.push_back({"nodes", JsonValue(options.nodes)});
        record.extra.push_back({"network_bytes_per_rank", JsonValue(network)});
        const std::optional<double> rate = gbps(network, record.time_us.median);
        record.extra.push_back({"network_gbps", rate ? JsonValue(*rate) : JsonValue()});
        record.extra.push_back({"network_cap_gbps", JsonValue(result.network_cap_gbps)});
        record.extra.push_back(
            {"fraction_of_network_cap", rate ? JsonValue(*rate / result.network_cap_gbps) : JsonValue()});
    }
    // The op's floor (Baselines::op_floor_us); across nodes, the network's part where it is longer:
    // its bytes at the cap plus its latency (what one message in flight costs).
    baselines.add_floor(
        record, crossing,
        across_nodes ? network / (result.network_cap_gbps * 1e3) + result.network_latency_us : 0.0);
    return record;
}

}  // namespace

void measure_ll(const BenchOptions& command, int ranks, int gpus, const Baselines& baselines,
                const RunInfo& run, std::vector<BenchRecord>& records) {
    const ModeDefaults defaults = ll_defaults();
    LlOptions options{};
    options.iters = command.iters.value_or(defaults.iters);
    options.warmup = command.warmup.value_or(defaults.warmup);
    options.tokens = command.tokens.value_or(defaults.tokens);
    options.hidden = command.hidden;
    options.topk = command.topk;
    options.experts = command.experts;
    options.seed = command.seed;
    options.caller_stream = command.caller_stream;
    options.timeout_seconds = command.timeout_seconds.value_or(defaults.timeout_seconds);
    options.nodes = command.nodes.value_or(1);
    if (ranks % options.nodes != 0)
        throw UsageError("--nodes " + std::to_string(options.nodes) + " does not divide the " +
                         std::to_string(ranks) + " ranks");
    std::printf(
        "\nLL: EP%d on %d GPU(s)%s, %d tokens/rank (and 1), hidden %d, top-%d of %d experts, %d iters\n",
        ranks, gpus,
        options.nodes > 1 ? (" as " + std::to_string(options.nodes) + " emulated nodes").c_str() : "",
        options.tokens, options.hidden, options.topk, options.experts, options.iters);
    for (int tokens : {options.tokens, 1}) {
        for (const Mode mode :
             {Mode{tokens, false, false}, Mode{tokens, true, false}, Mode{tokens, false, true},
              Mode{tokens, true, true}, Mode{tokens, true, false, true}, Mode{tokens, false, true, true}}) {
            // Progress on stderr: a run cut short still says how far it got.
            std::fprintf(stderr, "switchyard-bench ll: %d token(s), %s, %s%s ...\n", tokens,
                         mode.graph ? "graph replay" : "plain launches", mode.hook ? "hook" : "one call",
                         mode.hierarchical ? ", hierarchical combine" : "");
            const ModeResult result = measure(options, ranks, gpus, mode);
            auto add = [&](bool dispatch, const std::vector<double>& samples, const char* phase) {
                records.push_back(make_record(options, run, baselines, ranks, gpus, mode, result, dispatch,
                                              samples, phase));
            };
            if (mode.hook && !mode.graph) {
                add(true, result.send_us, "send");
                add(true, result.recv_us, "recv");
                add(false, result.combine_send_us, "send");
                add(false, result.combine_recv_us, "recv");
            } else {
                const char* phase = mode.hook ? "send+recv (hook)" : "both";
                add(true, result.dispatch_us, phase);
                add(false, result.combine_us, phase);
            }
        }
    }
}

}  // namespace switchyard::bench
