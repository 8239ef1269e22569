// LL benchmark (see ll_bench.hpp).
#include "ll_bench.hpp"

#include <algorithm>
#include <chrono>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check.hpp"
#include "cuda_resources.hpp"
#include "event_timer.hpp"
#include "stream_gate.hpp"
#include "record.hpp"
#include "run_info.hpp"
#include "stats.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

namespace switchyard::bench {
namespace {

struct LlOptions {
    std::optional<std::string> out;
    int iters = 50;
    int warmup = 5;
    int tokens = 128;
    int hidden = 7168;
    int topk = 8;
    int experts = 256;
    int ranks = 0;  // 0 = one per GPU (at least 2 when one GPU)
    int gpus = 2;
    uint64_t seed = 1;
    bool caller_stream = false;    // --caller-stream: BufferConfig::launch_on_caller_stream
    double timeout_seconds = 100;  // --timeout: BufferConfig::timeout_seconds
};

bool parse(int argc, char** argv, LlOptions& options) {
    for (int i = 0; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](const char* name) -> const char* {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "switchyard-bench ll: %s needs a value\n", name);
                return nullptr;
            }
            return argv[++i];
        };
        const char* v = nullptr;
        if (arg == "ll") continue;
        if (arg == "--caller-stream") {
            options.caller_stream = true;
        } else if (arg == "--out") {
            if (!(v = value("--out"))) return false;
            options.out = v;
        } else if (arg == "--iters" || arg == "--warmup" || arg == "--tokens" || arg == "--hidden" ||
                   arg == "--topk" || arg == "--experts" || arg == "--ranks" || arg == "--gpus" ||
                   arg == "--seed" || arg == "--timeout") {
            if (!(v = value(arg.c_str()))) return false;
            const long long number = std::atoll(v);
            if (arg == "--iters") options.iters = int(number);
            if (arg == "--warmup") options.warmup = int(number);
            if (arg == "--tokens") options.tokens = int(number);
            if (arg == "--hidden") options.hidden = int(number);
            if (arg == "--topk") options.topk = int(number);
            if (arg == "--experts") options.experts = int(number);
            if (arg == "--ranks") options.ranks = int(number);
            if (arg == "--gpus") options.gpus = int(number);
            if (arg == "--seed") options.seed = uint64_t(number);
            if (arg == "--timeout") options.timeout_seconds = std::atof(v);
        } else {
            std::fprintf(stderr, "switchyard-bench ll: unknown argument %s\n", arg.c_str());
            return false;
        }
    }
    return options.iters > 0 && options.tokens >= 1 && options.hidden % 16 == 0 && options.topk >= 1 &&
           options.experts >= options.topk;
}

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
    int64_t buffer_bytes = 0;
    int num_sms = 0;
};

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

// `streams[r]`: rank r's stream, the same for every mode (cuda_resources.hpp says why).
ModeResult measure(const LlOptions& options, int ranks, int gpus, const Mode& mode,
                   const std::vector<Stream>& streams) {
    ModeResult result;
    auto communicators = make_in_process_communicators(ranks);
    const int L = options.experts / ranks, T_ll = std::max(options.tokens, 128);
    const int64_t rows = int64_t(ranks) * T_ll;
    std::vector<std::vector<double>> samples(6 * ranks, std::vector<double>(options.iters, 0.0));
    std::mutex mutex;
    std::string failure;
    std::vector<std::thread> threads;
    for (int rank = 0; rank < ranks; ++rank) {
        threads.emplace_back([&, rank] {
            try {
                const int device = rank * gpus / ranks;
                SWITCHYARD_BENCH_CUDA(cudaSetDevice(device));
                cudaStream_t stream = streams[rank].get();
                BufferConfig config;
                config.enable_high_throughput = false;
                config.enable_low_latency = true;
                config.ll_max_tokens_per_rank = T_ll;
                config.max_hidden = options.hidden;
                config.max_topk = options.topk;
                config.max_experts = options.experts;
                config.launch_on_caller_stream = options.caller_stream;
                config.timeout_seconds = options.timeout_seconds;
                Buffer buffer(communicators[rank], device, config);

                // Inputs: random bf16 activations, uniform routing, weights; y = expert outputs.
                std::mt19937_64 rng(options.seed * 1000 + rank);
                std::vector<uint16_t> x(size_t(mode.tokens) * options.hidden);
                for (auto& v : x) v = reference::float_to_bf16(float(int(rng() % 2001) - 1000) / 250.0f);
                std::vector<int64_t> idx;
                fill_routing(rng, mode.tokens, options.topk, options.experts, idx);
                std::vector<float> weights(idx.size(), 1.0f / options.topk);
                void *d_x, *d_idx, *d_w, *d_y;
                SWITCHYARD_BENCH_CUDA(cudaMalloc(&d_x, x.size() * 2 + 16));
                SWITCHYARD_BENCH_CUDA(cudaMalloc(&d_idx, idx.size() * 8 + 16));
                SWITCHYARD_BENCH_CUDA(cudaMalloc(&d_w, weights.size() * 4 + 16));
                SWITCHYARD_BENCH_CUDA(cudaMalloc(&d_y, size_t(L) * rows * options.hidden * 2));
                SWITCHYARD_BENCH_CUDA(cudaMemcpy(d_x, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
                SWITCHYARD_BENCH_CUDA(cudaMemcpy(d_idx, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
                SWITCHYARD_BENCH_CUDA(
                    cudaMemcpy(d_w, weights.data(), weights.size() * 4, cudaMemcpyHostToDevice));
                SWITCHYARD_BENCH_CUDA(cudaMemset(d_y, 0, size_t(L) * rows * options.hidden * 2));
                const Device dev = Device::cuda(device);
                LowLatencyDispatchArgs dispatch;
                dispatch.x =
                    TensorView::contiguous(d_x, DType::kBFloat16, {mode.tokens, options.hidden}, dev);
                dispatch.topk_idx =
                    TensorView::contiguous(d_idx, DType::kInt64, {mode.tokens, options.topk}, dev);
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
                // only once every rank is done with them (design notes §2, rules 5 and 9).
                buffer.ll_load_kernels(dispatch);
                SWITCHYARD_BENCH_CUDA(cudaDeviceSynchronize());
                communicators[rank]->barrier(std::chrono::seconds(60));

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
                    buffer.barrier(stream);
                    dispatched = run_dispatch();
                    auto c = buffer.ll_combine(combine, dispatched.handle, stream);
                    if (mode.hook) c.receive();
                }
                SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(stream));
                buffer.check_errors();
                cudaGraphExec_t dispatch_graph = nullptr, combine_graph = nullptr;
                LowLatencyCombineResult captured_combine;
                if (mode.graph) {
                    cudaGraph_t graph = nullptr;
                    SWITCHYARD_BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
                    dispatched = run_dispatch();
                    SWITCHYARD_BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
                    SWITCHYARD_BENCH_CUDA(cudaGraphInstantiateWithFlags(
                        &dispatch_graph, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
                    SWITCHYARD_BENCH_CUDA(cudaGraphDestroy(graph));
                    SWITCHYARD_BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
                    captured_combine = buffer.ll_combine(combine, dispatched.handle, stream);
                    if (mode.hook) captured_combine.receive();
                    SWITCHYARD_BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
                    SWITCHYARD_BENCH_CUDA(cudaGraphInstantiateWithFlags(
                        &combine_graph, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
                    SWITCHYARD_BENCH_CUDA(cudaGraphDestroy(graph));
                }

                EventTimer t0(device), t1(device), t2(device), t3(device);
                StreamGate gate;
                for (int it = 0; it < options.iters; ++it) {
                    // Align the ranks: host rendezvous, then a GPU barrier on the stream.
                    SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(stream));
                    communicators[rank]->barrier(std::chrono::seconds(60));
                    gate.close(stream);  // the GPU starts once everything below is enqueued
                    buffer.barrier(stream);
                    if (mode.graph) {
                        t0.start(stream);
                        SWITCHYARD_BENCH_CUDA(cudaGraphLaunch(dispatch_graph, stream));
                        t0.stop(stream);
                        t1.start(stream);
                        SWITCHYARD_BENCH_CUDA(cudaGraphLaunch(combine_graph, stream));
                        t1.stop(stream);
                    } else if (!mode.hook) {
                        // The calls alone are timed on the host (the previous result is released
                        // outside the timed part).
                        t0.start(stream);
                        auto host_start = std::chrono::steady_clock::now();
                        LowLatencyDispatchResult fresh = buffer.ll_dispatch(dispatch, stream);
                        samples[rank * 6 + 4][it] = std::chrono::duration<double, std::micro>(
                                                        std::chrono::steady_clock::now() - host_start)
                                                        .count();
                        t0.stop(stream);
                        dispatched = std::move(fresh);
                        t1.start(stream);
                        host_start = std::chrono::steady_clock::now();
                        auto c = buffer.ll_combine(combine, dispatched.handle, stream);
                        samples[rank * 6 + 5][it] = std::chrono::duration<double, std::micro>(
                                                        std::chrono::steady_clock::now() - host_start)
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
                    SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(stream));
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
                SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(stream));
                cudaFree(d_x);
                cudaFree(d_idx);
                cudaFree(d_w);
                cudaFree(d_y);
                communicators[rank]->barrier(std::chrono::seconds(60));
            } catch (const std::exception& error) {
                // Every rank's error: the first one to fail is often not the first to report.
                std::lock_guard<std::mutex> lock(mutex);
                failure +=
                    (failure.empty() ? "" : "\n") + ("rank " + std::to_string(rank) + ": " + error.what());
            }
        });
    }
    for (auto& thread : threads) thread.join();
    if (!failure.empty()) throw Error(failure);
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
    return result;
}

BenchRecord make_record(const LlOptions& options, const RunInfo& run, int ranks, int gpus, const Mode& mode,
                        const ModeResult& result, bool dispatch, const std::vector<double>& samples,
                        const char* phase) {
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
    record.nvlink_gbps =
        gbps(dispatch ? result.dispatch_nvlink_bytes : result.combine_nvlink_bytes, record.time_us.median);
    record.buffer_bytes = result.buffer_bytes;
    record.stamp(run);
    record.extra.push_back({"phase", JsonValue(phase)});
    record.extra.push_back({"hook", JsonValue(mode.hook)});
    record.extra.push_back({"combine_reduction", JsonValue(mode.hierarchical ? "hierarchical" : "flat")});
    record.extra.push_back({"launch_on_caller_stream", JsonValue(options.caller_stream)});
    const std::vector<double>& host = dispatch ? result.host_dispatch_us : result.host_combine_us;
    if (!host.empty()) record.extra.push_back({"host_us_median", JsonValue(summarize(host).median)});
    return record;
}

}  // namespace

int run_ll_bench(int argc, char** argv) {
    LlOptions options;
    if (!parse(argc, argv, options)) {
        std::fprintf(
            stderr,
            "usage: switchyard-bench ll [--out FILE.json] [--iters N] [--warmup N] [--tokens N] [--hidden "
            "H]\n"
            "                           [--topk K] [--experts E] [--ranks R] [--gpus G] [--seed S]\n"
            "                           [--caller-stream] [--timeout SECONDS]\n");
        return 2;
    }
    std::string why;
    const int available = usable_gpu_count(&why);
    if (available < 1) {
        std::printf("switchyard-bench ll: needs a CUDA GPU (%s)\n", why.c_str());
        return 77;
    }
    const int gpus = std::max(1, std::min(options.gpus, available));
    const int ranks = options.ranks > 0 ? options.ranks : std::max(2, gpus);
    if (options.experts % ranks != 0) {
        std::fprintf(stderr, "switchyard-bench ll: experts (%d) must be a multiple of ranks (%d)\n",
                     options.experts, ranks);
        return 2;
    }
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    const RunInfo run = collect_run_info(gpus);
    std::vector<BenchRecord> records;
    try {
        std::vector<Stream> streams;
        for (int rank = 0; rank < ranks; ++rank) streams.emplace_back(rank * gpus / ranks);
        for (int tokens : {options.tokens, 1}) {
            for (const Mode mode : {Mode{tokens, false, false}, Mode{tokens, true, false},
                                    Mode{tokens, false, true}, Mode{tokens, true, true},
                                    Mode{tokens, true, false, true}, Mode{tokens, false, true, true}}) {
                // Progress on stderr: a run cut short still says how far it got.
                std::fprintf(stderr, "switchyard-bench ll: %d token(s), %s, %s%s ...\n", tokens,
                             mode.graph ? "graph replay" : "plain launches", mode.hook ? "hook" : "one call",
                             mode.hierarchical ? ", hierarchical combine" : "");
                const ModeResult result = measure(options, ranks, gpus, mode, streams);
                if (mode.hook && !mode.graph) {
                    records.push_back(
                        make_record(options, run, ranks, gpus, mode, result, true, result.send_us, "send"));
                    records.push_back(
                        make_record(options, run, ranks, gpus, mode, result, true, result.recv_us, "recv"));
                    records.push_back(make_record(options, run, ranks, gpus, mode, result, false,
                                                  result.combine_send_us, "send"));
                    records.push_back(make_record(options, run, ranks, gpus, mode, result, false,
                                                  result.combine_recv_us, "recv"));
                } else {
                    const char* phase = mode.hook ? "send+recv (hook)" : "both";
                    records.push_back(make_record(options, run, ranks, gpus, mode, result, true,
                                                  result.dispatch_us, phase));
                    records.push_back(make_record(options, run, ranks, gpus, mode, result, false,
                                                  result.combine_us, phase));
                }
            }
        }
    } catch (const std::exception& error) {
        std::fprintf(stderr, "switchyard-bench ll: %s\n", error.what());
        return 1;
    }
    std::printf("%-9s %-6s %5s %5s %-18s %-14s %10s %10s %10s %10s %8s\n", "op", "tokens", "graph", "hook",
                "phase", "reduction", "median_us", "min_us", "max_us", "nvlink_GBs", "host_us");
    for (const BenchRecord& r : records) {
        std::string phase = "?", host = "-", reduction = "?";
        for (const auto& [key, value] : r.extra) {
            if (key == "phase") phase = value.dump(0);
            if (key == "host_us_median") host = value.dump(0);
            if (key == "combine_reduction") reduction = value.dump(0);
        }
        if (r.op == "dispatch" && reduction == "\"hierarchical\"") reduction = "\"(weights)\"";
        std::printf("%-9s %-6lld %5s %5s %-18s %-14s %10.2f %10.2f %10.2f %10.1f %8.8s\n", r.op.c_str(),
                    (long long)r.tokens_per_rank, r.graph_replay ? "yes" : "no",
                    phase.find("hook") != std::string::npos || phase == "\"send\"" || phase == "\"recv\""
                        ? "yes"
                        : "no",
                    phase.c_str(), reduction.c_str(), r.time_us.median, r.time_us.min, r.time_us.max,
                    r.nvlink_gbps.value_or(0.0), host.c_str());
    }
    if (options.out) {
        JsonObject meta{
            {"command", JsonValue("ll")},
            {"ranks", JsonValue(ranks)},
            {"gpus", JsonValue(gpus)},
            {"note", JsonValue("peer bound and NCCL all-to-all come from `switchyard-bench baseline`")}};
        write_results_file(*options.out, records, JsonValue(meta));
    }
    return 0;
}

}  // namespace switchyard::bench
