// `switchyard-bench ht` (DESIGN.md §9): EP = number of GPUs (ranks as threads, one per GPU),
// 4096 tokens per rank, hidden 7168, top-8 of 256 experts; FP8 and BF16 dispatch (rank-major,
// device counts: the graph-safe path), BF16 combine; at the SM count the analytical model picks
// and over a sweep of SM counts. Every timed iteration starts with an L2 flush, a host
// rendezvous and a GPU barrier so the ranks start together; the stream is gated until the op is
// enqueued, so the events time the GPU (host time per call is reported apart); an op's time is the
// slowest rank's.
#include "ht_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "a2a_payload.hpp"
#include "cuda_check.hpp"
#include "event_timer.hpp"
#include "l2_flush.hpp"
#include "nccl_a2a_bench.hpp"
#include "p2p_copy_bench.hpp"
#include "record.hpp"
#include "results_table.hpp"
#include "routing.hpp"
#include "stats.hpp"
#include "stream_gate.hpp"
#include "comm/nccl_library.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/sm_model.hpp"

namespace switchyard::bench {
namespace {

struct HtOptions {
    std::string out;
    int iters = 20, warmup = 3;
    int tokens = 4096, hidden = 7168, topk = 8, experts = 256;
    int gpus = 2;
    std::vector<int> sweep = {4, 8, 12, 16, 20, 24, 32};
    std::vector<bool> fp8_runs = {true, false};  // --dtypes: dispatch payloads to run (fp8, bf16)
    bool caller_stream = false;                  // --caller-stream: BufferConfig::launch_on_caller_stream
    uint64_t seed = 1;
};

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& list) {
    std::vector<std::string> items;
    for (size_t start = 0; start < list.size();) {
        const size_t comma = list.find(',', start);
        items.push_back(list.substr(start, comma - start));
        start = comma == std::string::npos ? list.size() : comma + 1;
    }
    return items;
}

HtOptions parse(int argc, char** argv) {
    HtOptions options;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) throw InvalidArgument("missing value after " + arg);
            return argv[++i];
        };
        if (arg == "--caller-stream")
            options.caller_stream = true;
        else if (arg == "--out")
            options.out = next();
        else if (arg == "--iters")
            options.iters = std::stoi(next());
        else if (arg == "--warmup")
            options.warmup = std::stoi(next());
        else if (arg == "--tokens")
            options.tokens = std::stoi(next());
        else if (arg == "--hidden")
            options.hidden = std::stoi(next());
        else if (arg == "--topk")
            options.topk = std::stoi(next());
        else if (arg == "--experts")
            options.experts = std::stoi(next());
        else if (arg == "--gpus")
            options.gpus = std::stoi(next());
        else if (arg == "--sweep") {
            options.sweep.clear();
            for (const std::string& item : split_commas(next())) options.sweep.push_back(std::stoi(item));
        } else if (arg == "--dtypes") {
            options.fp8_runs.clear();
            for (const std::string& name : split_commas(next())) {
                if (name != "fp8" && name != "bf16")
                    throw InvalidArgument("ht: --dtypes takes fp8 and/or bf16, got '" + name + "'");
                options.fp8_runs.push_back(name == "fp8");
            }
        } else
            throw InvalidArgument("ht: unknown option " + arg);
    }
    return options;
}

// Everything one rank needs for the whole run.
struct RankState {
    int rank = 0, device = 0;
    std::unique_ptr<Buffer> buffer;
    cudaStream_t stream = nullptr;
    void* x_bf16 = nullptr;
    void* x_fp8 = nullptr;
    void* scales = nullptr;
    void* idx = nullptr;
    void* y = nullptr;
    std::unique_ptr<L2Flusher> flusher;
    std::unique_ptr<EventTimer> timer;
    std::unique_ptr<StreamGate> gate;
};

}  // namespace

int run_ht_bench(int argc, char** argv) {
    const HtOptions options = parse(argc, argv);
    const int gpus = usable_gpu_count();
    if (gpus < options.gpus) {
        std::printf("ht: needs %d GPUs, found %d\n", options.gpus, gpus);
        return 77;
    }
    const int R = options.gpus, T = options.tokens, H = options.hidden, K = options.topk, E = options.experts;
    const RunInfo run = collect_run_info(R);
    std::printf("switchyard-bench ht on %d x %s (commit %s): EP%d, %d tokens/rank, hidden %d, top-%d of %d\n",
                R, run.gpu.c_str(), run.commit.c_str(), R, T, H, K, E);

    // Baselines first, in the same run. The copy-engine bound needs two GPUs; with one (EP1, e.g.
    // for host-time or ncu runs) it is skipped and the records carry no fraction of it.
    P2pCopyOptions p2p;
    p2p.iters = 10;
    std::vector<P2pCopyResult> copies;
    if (R >= 2)
        copies = measure_p2p_copy(p2p);
    else
        std::printf("  copy-engine peer bound skipped: EP1 moves nothing between GPUs\n");
    double peer_bound = 0, peer_bound_bidirectional = 0;
    for (const auto& copy : copies) {
        if (copy.bidirectional)
            peer_bound_bidirectional = std::max(peer_bound_bidirectional, copy.gbps_per_direction);
        else
            peer_bound = std::max(peer_bound, copy.gbps_per_direction);
    }
    std::map<std::pair<bool, int>, double> nccl_us;  // (fp8, phase) -> median us
    disable_nvls_unless_set();
    for (bool fp8 : {true, false}) {
        NcclA2aOptions nccl_options;
        nccl_options.shape = {R, T, H, K, E, fp8 ? PayloadType::kFP8 : PayloadType::kBF16, options.seed};
        nccl_options.iters = options.iters;
        const A2aPayload payload(nccl_options.shape);
        for (const auto& result : measure_nccl_a2a(nccl_options, payload, nccl_library()))
            nccl_us[{fp8, int(result.phase)}] = result.time_us.median;
    }

    // Ranks as threads, one per GPU.
    auto communicators = make_in_process_communicators(R);
    std::vector<RankState> ranks(R);
    BufferConfig config;
    config.max_tokens_per_rank = T;
    config.max_hidden = H;
    config.max_topk = K;
    config.max_experts = E;
    config.timeout_seconds = 30;
    config.launch_on_caller_stream = options.caller_stream;
    auto for_all_ranks = [&](const std::function<void(RankState&)>& body) {
        std::vector<std::thread> threads;
        std::vector<std::string> errors(R);
        for (int r = 0; r < R; ++r)
            threads.emplace_back([&, r] {
                try {
                    SWITCHYARD_BENCH_CUDA(cudaSetDevice(ranks[r].device));
                    body(ranks[r]);
                } catch (const std::exception& e) {
                    errors[r] = e.what();
                }
            });
        for (auto& thread : threads) thread.join();
        for (int r = 0; r < R; ++r)
            if (!errors[r].empty()) throw Error("rank " + std::to_string(r) + ": " + errors[r]);
    };
    for (int r = 0; r < R; ++r) {
        ranks[r].rank = r;
        ranks[r].device = r;
    }
    const size_t scale_words = size_t((H + 127) / 128);
    for_all_ranks([&](RankState& state) {
        state.buffer = std::make_unique<Buffer>(communicators[state.rank], state.device, config);
        SWITCHYARD_BENCH_CUDA(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking));
        std::mt19937 rng(uint32_t(options.seed) * 77u + state.rank);
        std::vector<uint16_t> x(size_t(T) * H);
        for (auto& v : x) v = uint16_t(0x3c00 + (rng() % 0x0800));  // bf16 in [1, 2) region and similar
        std::vector<uint8_t> x8(size_t(T) * H);
        for (auto& v : x8) v = uint8_t(rng() % 0x7e);
        std::vector<float> scales(size_t(T) * scale_words, 0.01f);
        const auto idx = random_topk_routing(T, K, E, rank_seed(options.seed, state.rank));
        SWITCHYARD_BENCH_CUDA(cudaMalloc(&state.x_bf16, x.size() * 2));
        SWITCHYARD_BENCH_CUDA(cudaMalloc(&state.x_fp8, x8.size()));
        SWITCHYARD_BENCH_CUDA(cudaMalloc(&state.scales, scales.size() * 4));
        SWITCHYARD_BENCH_CUDA(cudaMalloc(&state.idx, idx.size() * 8));
        SWITCHYARD_BENCH_CUDA(cudaMalloc(&state.y, size_t(R) * T * H * 2));
        SWITCHYARD_BENCH_CUDA(cudaMemcpy(state.x_bf16, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        SWITCHYARD_BENCH_CUDA(cudaMemcpy(state.x_fp8, x8.data(), x8.size(), cudaMemcpyHostToDevice));
        SWITCHYARD_BENCH_CUDA(
            cudaMemcpy(state.scales, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
        SWITCHYARD_BENCH_CUDA(cudaMemcpy(state.idx, idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
        SWITCHYARD_BENCH_CUDA(cudaMemset(state.y, 0x3c, size_t(R) * T * H * 2));
        state.flusher = std::make_unique<L2Flusher>(state.device);
        state.timer = std::make_unique<EventTimer>(state.device);
        state.gate = std::make_unique<StreamGate>();
        SWITCHYARD_BENCH_CUDA(cudaDeviceSynchronize());
    });

    // The model's choice for this shape, per op (the library's defaults: H200 constants, the
    // combine's default share of sending warps).
    auto model_for = [&](SmModelOp op) {
        SmModelInput model_input;
        model_input.num_experts = E;
        model_input.topk = K;
        model_input.num_ranks = R;
        model_input.num_device_sms = ranks[0].buffer->sm_budget();
        model_input.op = op;
        return model_num_sms(model_input).num_sms;
    };
    const int model_sms[2] = {model_for(SmModelOp::kDispatch), model_for(SmModelOp::kCombine)};
    std::vector<int> sms_list = options.sweep;
    for (int sms : model_sms)
        if (std::find(sms_list.begin(), sms_list.end(), sms) == sms_list.end()) sms_list.push_back(sms);
    std::sort(sms_list.begin(), sms_list.end());

    std::vector<BenchRecord> records;
    std::map<std::pair<bool, int>, double> dispatch_median;  // (fp8, sms) -> us
    std::map<std::pair<bool, int>, double> combine_median;
    for (bool fp8 : options.fp8_runs) {
        for (int sms : sms_list) {
            std::vector<std::vector<double>> dispatch_samples(R), combine_samples(R), host_dispatch_us(R),
                host_combine_us(R);
            std::vector<int64_t> bytes_out(R), bytes_in(R), combine_out(R), combine_in(R);
            for_all_ranks([&](RankState& state) {
                DispatchArgs args;
                const Device dev = Device::cuda(state.device);
                if (fp8) {
                    args.x = TensorView::contiguous(state.x_fp8, DType::kFloat8E4M3, {T, H}, dev);
                    args.x_scales =
                        TensorView::contiguous(state.scales, DType::kFloat32, {T, int64_t(scale_words)}, dev);
                } else {
                    args.x = TensorView::contiguous(state.x_bf16, DType::kBFloat16, {T, H}, dev);
                }
                args.topk_idx = TensorView::contiguous(state.idx, DType::kInt64, {T, K}, dev);
                args.num_experts = E;
                args.counts = CountMode::kDevice;
                args.num_sms = sms;
                CombineArgs combine;
                combine.y = TensorView::contiguous(state.y, DType::kBFloat16, {int64_t(R) * T, H}, dev);
                combine.num_sms = sms;
                Communicator& comm = state.buffer->communicator();
                for (int iter = 0; iter < options.warmup + options.iters; ++iter) {
                    // Dispatch
                    state.flusher->flush(state.stream);
                    SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(state.stream));
                    comm.barrier(std::chrono::seconds(60));
                    // Warm-up runs ungated: a first use loads kernels, which may wait for the stream.
                    if (iter >= options.warmup) state.gate->close(state.stream);
                    state.buffer->barrier(state.stream);
                    state.timer->start(state.stream);
                    const auto host_start = std::chrono::steady_clock::now();
                    DispatchResult result = state.buffer->dispatch(args, state.stream);
                    const double host_dispatch = std::chrono::duration<double, std::micro>(
                                                     std::chrono::steady_clock::now() - host_start)
                                                     .count();
                    state.timer->stop(state.stream);
                    state.gate->open();
                    const double dispatch_us = state.timer->elapsed_us();
                    // Combine (same handle)
                    state.flusher->flush(state.stream);
                    SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(state.stream));
                    comm.barrier(std::chrono::seconds(60));
                    // Warm-up runs ungated: a first use loads kernels, which may wait for the stream.
                    if (iter >= options.warmup) state.gate->close(state.stream);
                    state.buffer->barrier(state.stream);
                    state.timer->start(state.stream);
                    const auto host_combine_start = std::chrono::steady_clock::now();
                    CombineResult combined = state.buffer->combine(combine, result.handle, state.stream);
                    const double host_combine = std::chrono::duration<double, std::micro>(
                                                    std::chrono::steady_clock::now() - host_combine_start)
                                                    .count();
                    state.timer->stop(state.stream);
                    state.gate->open();
                    const double combine_us = state.timer->elapsed_us();
                    state.buffer->check_errors();
                    if (iter >= options.warmup) {
                        dispatch_samples[state.rank].push_back(dispatch_us);
                        combine_samples[state.rank].push_back(combine_us);
                        host_dispatch_us[state.rank].push_back(host_dispatch);
                        host_combine_us[state.rank].push_back(host_combine);
                    }
                    if (iter == 0) {
                        // Bytes this rank moved: record bytes per row (payload + scales + metadata).
                        const auto record = device::RecordLayout::dispatch(
                            H, fp8 ? device::kPayloadFp8 : device::kPayloadBf16,
                            fp8 ? device::kScaleFloat32 : device::kScaleNone, K);
                        const int64_t row_bytes =
                            record.meta_offset + 4 * device::RecordLayout::dispatch_meta_words(K);
                        const int64_t combine_row_bytes = int64_t(H) * 2 + 4 * K;
                        std::vector<int32_t> per_rank(R);
                        const auto idx_host =
                            random_topk_routing(T, K, E, rank_seed(options.seed, state.rank));
                        for (int t = 0; t < T; ++t) {
                            std::vector<bool> hit(R, false);
                            for (int k = 0; k < K; ++k) hit[idx_host[size_t(t) * K + k] / (E / R)] = true;
                            for (int q = 0; q < R; ++q) per_rank[q] += hit[q];
                        }
                        for (int q = 0; q < R; ++q)
                            if (q != state.rank) {
                                bytes_out[state.rank] += per_rank[q] * row_bytes;
                                combine_in[state.rank] += per_rank[q] * combine_row_bytes;
                            }
                        int32_t received = 0;
                        SWITCHYARD_BENCH_CUDA(cudaMemcpy(&received, result.num_recv_rows.view().ptr(), 4,
                                                         cudaMemcpyDeviceToHost));
                        bytes_in[state.rank] = int64_t(received) * row_bytes;
                        combine_out[state.rank] = int64_t(received) * combine_row_bytes;
                    }
                }
            });
            std::vector<double> dispatch_us(options.iters), combine_us(options.iters);
            for (int i = 0; i < options.iters; ++i)
                for (int r = 0; r < R; ++r) {
                    dispatch_us[i] = std::max(dispatch_us[i], dispatch_samples[r][i]);
                    combine_us[i] = std::max(combine_us[i], combine_samples[r][i]);
                }
            const int64_t max_out = *std::max_element(bytes_out.begin(), bytes_out.end());
            const int64_t max_in = *std::max_element(bytes_in.begin(), bytes_in.end());
            const int64_t max_combine_out = *std::max_element(combine_in.begin(), combine_in.end());
            const int64_t max_combine_in = *std::max_element(combine_out.begin(), combine_out.end());
            for (int op = 0; op < 2; ++op) {
                BenchRecord record;
                record.mode = "ht";
                record.op = op == 0 ? "dispatch" : "combine";
                record.dtype = op == 0 ? (fp8 ? "fp8" : "bf16") : "bf16";
                record.layout = "rank_major";
                record.ranks = R;
                record.gpus = R;
                record.tokens_per_rank = T;
                record.hidden = H;
                record.topk = K;
                record.experts = E;
                record.num_sms = sms;
                record.time_us = summarize(op == 0 ? dispatch_us : combine_us);
                record.logical_gbps = gbps(double(op == 0 ? max_in : max_combine_in), record.time_us.median);
                record.nvlink_gbps = gbps(double(op == 0 ? max_out : max_combine_out), record.time_us.median);
                record.set_peer_bound(peer_bound > 0 ? std::optional<double>(peer_bound) : std::nullopt);
                record.set_nccl_reference(nccl_us[{fp8, op}]);
                record.buffer_bytes = int64_t(ranks[0].buffer->buffer_bytes());
                record.stamp(run);
                record.extra.emplace_back("dispatch_dtype", JsonValue(std::string(fp8 ? "fp8" : "bf16")));
                // CPU time of the call itself (rank 0), the host-overhead figure of DESIGN.md §9.
                record.extra.emplace_back(
                    "host_us_median",
                    JsonValue(summarize(op == 0 ? host_dispatch_us[0] : host_combine_us[0]).median));
                record.extra.emplace_back("count_mode", JsonValue(std::string("device")));
                record.extra.emplace_back("launch_on_caller_stream", JsonValue(options.caller_stream));
                record.extra.emplace_back("model_num_sms", JsonValue(int64_t(model_sms[op])));
                record.extra.emplace_back("is_model_choice", JsonValue(sms == model_sms[op]));
                record.extra.emplace_back("peer_bound_bidirectional_gbps",
                                          JsonValue(peer_bound_bidirectional));
                record.extra.emplace_back("fraction_of_bidirectional_bound",
                                          JsonValue(record.nvlink_gbps && peer_bound_bidirectional > 0
                                                        ? *record.nvlink_gbps / peer_bound_bidirectional
                                                        : 0.0));
                records.push_back(record);
                (op == 0 ? dispatch_median : combine_median)[{fp8, sms}] = record.time_us.median;
            }
            std::printf("  %s sms=%2d: dispatch %8.1f us (host %.1f us), combine %8.1f us (host %.1f us)\n",
                        fp8 ? "fp8 " : "bf16", sms, dispatch_median[{fp8, sms}],
                        summarize(host_dispatch_us[0]).median, combine_median[{fp8, sms}],
                        summarize(host_combine_us[0]).median);
        }
    }
    // Model check: is the model's choice within 5% of the sweep's best?
    JsonObject meta;
    meta.emplace_back("tool", JsonValue(std::string("switchyard-bench ht")));
    meta.emplace_back("model_num_sms_dispatch", JsonValue(int64_t(model_sms[0])));
    meta.emplace_back("model_num_sms_combine", JsonValue(int64_t(model_sms[1])));
    bool model_ok = true;
    for (bool fp8 : options.fp8_runs)
        for (int op = 0; op < 2; ++op) {
            auto& medians = op == 0 ? dispatch_median : combine_median;
            double best = 1e30;
            int best_sms = 0;
            for (int sms : sms_list)
                if (medians[{fp8, sms}] < best) best = medians[{fp8, sms}], best_sms = sms;
            const double at_model = medians[{fp8, model_sms[op]}];
            const std::string key = std::string(op == 0 ? "dispatch_" : "combine_") + (fp8 ? "fp8" : "bf16");
            const bool within = at_model <= 1.05 * best;
            model_ok = model_ok && within;
            meta.emplace_back(key + "_best_sms", JsonValue(int64_t(best_sms)));
            meta.emplace_back(key + "_model_over_best", JsonValue(at_model / best));
            meta.emplace_back(key + "_model_within_5pct", JsonValue(within));
            std::printf("  %s: best %d SMs (%.1f us); model's %d SMs: %.1f us (%.3f of best time): %s\n",
                        key.c_str(), best_sms, best, model_sms[op], at_model, at_model / best,
                        within ? "PASS (within 5%)" : "FAIL (more than 5% slower)");
        }
    meta.emplace_back("model_within_5pct", JsonValue(model_ok));
    std::printf("model check: %s\n", model_ok ? "PASS" : "FAIL");
    print_results_table(records);
    if (!options.out.empty()) {
        write_results_file(options.out, records, JsonValue(meta));
        std::printf("wrote %zu records to %s\n", records.size(), options.out.c_str());
    }
    for_all_ranks([&](RankState& state) {
        SWITCHYARD_BENCH_CUDA(cudaStreamSynchronize(state.stream));
        state.buffer.reset();
    });
    return 0;
}

}  // namespace switchyard::bench
