// See ht_bench.hpp.
#include "ht_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "event_timer.hpp"
#include "harness/cuda_raii.hpp"
#include "harness/rank_runner.hpp"
#include "l2_flush.hpp"
#include "op_phases.hpp"
#include "routing.hpp"
#include "stats.hpp"
#include "stream_gate.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/common/record_layout.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/sm_model.hpp"

namespace switchyard::bench {
namespace {

// Everything one rank keeps for the whole run.
struct RankState {
    std::unique_ptr<Buffer> buffer;
    harness::DeviceBuffer x_bf16, x_fp8, scales, idx, y;
    std::unique_ptr<harness::PinnedBuffer<int32_t>> received;  // copy-out of num_recv_rows
    std::unique_ptr<L2Flusher> flusher;
    std::unique_ptr<EventTimer> timer;
    std::unique_ptr<StreamGate> gate;
};

// Samples of one (dtype, SM count): per rank, per timed iteration.
struct Samples {
    explicit Samples(int ranks)
        : dispatch(ranks),
          combine(ranks),
          host_dispatch(ranks),
          host_combine(ranks),
          bytes_out(ranks),
          bytes_in(ranks),
          combine_out(ranks),
          combine_in(ranks),
          rows_dispatch(ranks),
          rows_combine(ranks) {}
    std::vector<std::vector<double>> dispatch, combine, host_dispatch, host_combine;
    // The rows' span of each traced round (bench/op_phases.hpp; NaN: not in the timeline).
    std::vector<std::vector<double>> rows_dispatch, rows_combine;
    std::vector<int64_t> bytes_out, bytes_in, combine_out, combine_in;
};

// Traced rounds per (dtype, SM count), after the timed ones: the rows' span is their median.
constexpr int kTracedRounds = 3;

// The rows' span of an op (the slowest rank's in each traced round, the median over rounds), or
// empty when a round's timeline lacked it.
std::optional<double> rows_span_us(const std::vector<std::vector<double>>& per_rank) {
    std::vector<double> rounds(per_rank[0].size(), 0.0);
    for (const auto& spans : per_rank)
        for (size_t i = 0; i < rounds.size() && i < spans.size(); ++i) {
            if (std::isnan(spans[i])) return std::nullopt;
            rounds[i] = std::max(rounds[i], spans[i]);
        }
    if (rounds.empty()) return std::nullopt;
    return summarize(rounds).median;
}

double since_us(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void measure_ht(const BenchOptions& options, int R, int G, const Baselines& baselines, const RunInfo& run,
                std::vector<BenchRecord>& records, JsonObject& meta) {
    const ModeDefaults defaults = ht_defaults();
    const int iters = options.iters.value_or(defaults.iters),
              warmup = options.warmup.value_or(defaults.warmup);
    const int T = options.tokens.value_or(defaults.tokens), H = options.hidden, K = options.topk,
              E = options.experts;
    std::printf("\nHT: EP%d on %d GPU(s), %d tokens/rank, hidden %d, top-%d of %d experts, %d iters\n", R, G,
                T, H, K, E, iters);

    harness::RankGroup group(R, G);
    std::vector<RankState> ranks(R);
    BufferConfig config;
    config.max_tokens_per_rank = T;
    config.max_hidden = H;
    config.max_topk = K;
    config.max_experts = E;
    config.timeout_seconds = options.timeout_seconds.value_or(defaults.timeout_seconds);
    config.launch_on_caller_stream = options.caller_stream;
    const size_t scale_words = size_t((H + 127) / 128);
    group.run([&](harness::RankContext& rank) {
        RankState& state = ranks[rank.rank];
        state.buffer = std::make_unique<Buffer>(rank.communicator, rank.device, config);
        std::mt19937 rng(uint32_t(options.seed) * 77u + rank.rank);
        std::vector<uint16_t> x(size_t(T) * H);
        for (auto& v : x) v = uint16_t(0x3c00 + (rng() % 0x0800));  // bf16 in [1, 2) region and similar
        std::vector<uint8_t> x8(size_t(T) * H);
        for (auto& v : x8) v = uint8_t(rng() % 0x7e);
        std::vector<float> scales(size_t(T) * scale_words, 0.01f);
        const auto idx = random_topk_routing(T, K, E, rank_seed(options.seed, rank.rank));
        state.x_bf16 = harness::DeviceBuffer(rank.device, x.size() * 2);
        state.x_fp8 = harness::DeviceBuffer(rank.device, x8.size());
        state.scales = harness::DeviceBuffer(rank.device, scales.size() * 4);
        state.idx = harness::DeviceBuffer(rank.device, idx.size() * 8);
        state.y = harness::DeviceBuffer(rank.device, size_t(R) * T * H * 2);
        SY_CUDA_CHECK(cudaMemcpy(state.x_bf16.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.x_fp8.get(), x8.data(), x8.size(), cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(
            cudaMemcpy(state.scales.get(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.idx.get(), idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemset(state.y.get(), 0x3c, state.y.size()));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));  // the copies above have landed
        state.received = std::make_unique<harness::PinnedBuffer<int32_t>>(1);
        state.flusher = std::make_unique<L2Flusher>(rank.device);
        state.timer = std::make_unique<EventTimer>(rank.device);
        state.gate = std::make_unique<StreamGate>();
    });

    // The model's choice for this shape, per op (the library's defaults).
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
    std::vector<int> sms_list;
    for (int sms : options.sweep)
        if (sms <= ranks[0].buffer->sm_budget()) sms_list.push_back(sms);
    for (int sms : model_sms)
        if (std::find(sms_list.begin(), sms_list.end(), sms) == sms_list.end()) sms_list.push_back(sms);
    std::sort(sms_list.begin(), sms_list.end());
    sms_list.erase(std::unique(sms_list.begin(), sms_list.end()), sms_list.end());

    std::map<std::pair<bool, int>, double> dispatch_median;  // (fp8, sms) -> us
    std::map<std::pair<bool, int>, double> combine_median;
    std::vector<bool> fp8_runs;
    for (PayloadType dtype : options.dtypes) fp8_runs.push_back(dtype == PayloadType::kFP8);
    for (bool fp8 : fp8_runs) {
        for (int sms : sms_list) {
            Samples samples(R);
            group.run([&](harness::RankContext& rank) {
                RankState& state = ranks[rank.rank];
                cudaStream_t stream = rank.stream;
                DispatchArgs args;
                const Device dev = Device::cuda(rank.device);
                if (fp8) {
                    args.x = TensorView::contiguous(state.x_fp8.get(), DType::kFloat8E4M3, {T, H}, dev);
                    args.x_scales = TensorView::contiguous(state.scales.get(), DType::kFloat32,
                                                           {T, int64_t(scale_words)}, dev);
                } else {
                    args.x = TensorView::contiguous(state.x_bf16.get(), DType::kBFloat16, {T, H}, dev);
                }
                args.topk_idx = TensorView::contiguous(state.idx.get(), DType::kInt64, {T, K}, dev);
                args.num_experts = E;
                args.counts = CountMode::kDevice;
                args.num_sms = sms;
                CombineArgs combine;
                combine.y = TensorView::contiguous(state.y.get(), DType::kBFloat16, {int64_t(R) * T, H}, dev);
                combine.num_sms = sms;
                // This shape's kernels, loaded before any op (required with co-located ranks: a
                // module load waits for a peer's kernel that may be waiting for this rank).
                state.buffer->ht_load_kernels(args);
                rank.host_barrier();
                // One dispatch and one combine (same handle), each behind a host rendezvous and a GPU
                // barrier; gated (the GPU starts once all is enqueued) except while kernels may still
                // be loading.
                struct Round {
                    double dispatch_us, combine_us, host_dispatch, host_combine;
                    DispatchResult result;
                };
                auto round = [&](bool gated) {
                    Round r;
                    // Dispatch
                    state.flusher->flush(stream);
                    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
                    rank.host_barrier();
                    if (gated) state.gate->close(stream);
                    state.buffer->barrier(stream);
                    state.timer->start(stream);
                    const auto host_start = std::chrono::steady_clock::now();
                    r.result = state.buffer->dispatch(args, stream);
                    r.host_dispatch = since_us(host_start);
                    state.timer->stop(stream);
                    if (gated) state.gate->open();
                    r.dispatch_us = state.timer->elapsed_us();
                    // Combine (same handle)
                    state.flusher->flush(stream);
                    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
                    rank.host_barrier();
                    if (gated) state.gate->close(stream);
                    state.buffer->barrier(stream);
                    state.timer->start(stream);
                    const auto host_combine_start = std::chrono::steady_clock::now();
                    CombineResult combined = state.buffer->combine(combine, r.result.handle, stream);
                    r.host_combine = since_us(host_combine_start);
                    state.timer->stop(stream);
                    if (gated) state.gate->open();
                    r.combine_us = state.timer->elapsed_us();
                    state.buffer->check_errors();
                    return r;
                };
                for (int iter = 0; iter < warmup + iters; ++iter) {
                    // Warm-up runs ungated: a first use loads kernels, which may wait for the stream.
                    const Round r = round(iter >= warmup);
                    const DispatchResult& result = r.result;
                    if (iter >= warmup) {
                        samples.dispatch[rank.rank].push_back(r.dispatch_us);
                        samples.combine[rank.rank].push_back(r.combine_us);
                        samples.host_dispatch[rank.rank].push_back(r.host_dispatch);
                        samples.host_combine[rank.rank].push_back(r.host_combine);
                    }
                    if (iter != 0) continue;
                    // Bytes this rank moved: record bytes per row (payload + scales + metadata).
                    const auto record =
                        device::RecordLayout::dispatch(H, fp8 ? device::kPayloadFp8 : device::kPayloadBf16,
                                                       fp8 ? device::kScaleFloat32 : device::kScaleNone, K);
                    const int64_t row_bytes =
                        record.meta_offset + 4 * device::RecordLayout::dispatch_meta_words(K);
                    const int64_t combine_row_bytes = int64_t(H) * 2 + 4 * K;
                    std::vector<int32_t> per_rank(R);
                    const auto idx_host = random_topk_routing(T, K, E, rank_seed(options.seed, rank.rank));
                    for (int t = 0; t < T; ++t) {
                        std::vector<bool> hit(R, false);
                        for (int k = 0; k < K; ++k) hit[idx_host[size_t(t) * K + k] / (E / R)] = true;
                        for (int q = 0; q < R; ++q) per_rank[q] += hit[q];
                    }
                    for (int q = 0; q < R; ++q)
                        if (q != rank.rank) {
                            samples.bytes_out[rank.rank] += per_rank[q] * row_bytes;
                            samples.combine_in[rank.rank] += per_rank[q] * combine_row_bytes;
                        }
                    // Copied out through pinned memory on the rank's stream (no pageable copy behind
                    // an op: DESIGN.md §4, rule 6).
                    SY_CUDA_CHECK(cudaMemcpyAsync(state.received->data(), result.num_recv_rows.view().ptr(),
                                                  4, cudaMemcpyDeviceToHost, stream));
                    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
                    const int32_t received = (*state.received)[0];
                    samples.bytes_in[rank.rank] = int64_t(received) * row_bytes;
                    samples.combine_out[rank.rank] = int64_t(received) * combine_row_bytes;
                }
                // Where the time goes: the rows' span of traced runs (timelines add block barriers, so
                // the timed runs above are untraced).
                state.buffer->set_op_tracing(true);
                for (int iter = 0; iter < kTracedRounds; ++iter) {
                    round(true);
                    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
                    samples.rows_dispatch[rank.rank].push_back(
                        ht_rows_us(state.buffer->op_timeline(OpTimelineKind::kHtDispatch)).value_or(NAN));
                    samples.rows_combine[rank.rank].push_back(
                        ht_rows_us(state.buffer->op_timeline(OpTimelineKind::kHtCombine)).value_or(NAN));
                }
                state.buffer->set_op_tracing(false);
            });
            std::vector<double> dispatch_us(iters), combine_us(iters);
            for (int i = 0; i < iters; ++i)
                for (int r = 0; r < R; ++r) {
                    dispatch_us[i] = std::max(dispatch_us[i], samples.dispatch[r][i]);
                    combine_us[i] = std::max(combine_us[i], samples.combine[r][i]);
                }
            auto largest = [](const std::vector<int64_t>& values) {
                return *std::max_element(values.begin(), values.end());
            };
            const int64_t max_out = largest(samples.bytes_out), max_in = largest(samples.bytes_in);
            const int64_t max_combine_out = largest(samples.combine_in),
                          max_combine_in = largest(samples.combine_out);
            const PayloadType payload = fp8 ? PayloadType::kFP8 : PayloadType::kBF16;
            for (int op = 0; op < 2; ++op) {
                BenchRecord record;
                record.mode = "ht";
                record.op = op == 0 ? "dispatch" : "combine";
                record.dtype = op == 0 ? (fp8 ? "fp8" : "bf16") : "bf16";
                record.layout = "rank_major";
                record.ranks = R;
                record.gpus = G;
                record.tokens_per_rank = T;
                record.hidden = H;
                record.topk = K;
                record.experts = E;
                record.num_sms = sms;
                record.time_us = summarize(op == 0 ? dispatch_us : combine_us);
                record.logical_gbps = gbps(double(op == 0 ? max_in : max_combine_in), record.time_us.median);
                record.nvlink_gbps = gbps(double(op == 0 ? max_out : max_combine_out), record.time_us.median);
                record.set_peer_bound(baselines.peer_bound_gbps);
                record.set_nccl_reference(
                    baselines.nccl(T, payload, op == 0 ? A2aPhase::kDispatch : A2aPhase::kCombine));
                record.buffer_bytes = int64_t(ranks[0].buffer->buffer_bytes());
                record.stamp(run);
                record.extra.emplace_back("nodes", JsonValue(int64_t(1)));
                record.extra.emplace_back("dispatch_dtype", JsonValue(std::string(fp8 ? "fp8" : "bf16")));
                // CPU time of the call itself (rank 0), the host-overhead figure of DESIGN.md §9.
                record.extra.emplace_back(
                    "host_us_median",
                    JsonValue(
                        summarize(op == 0 ? samples.host_dispatch[0] : samples.host_combine[0]).median));
                record.extra.emplace_back("count_mode", JsonValue(std::string("device")));
                record.extra.emplace_back("launch_on_caller_stream", JsonValue(options.caller_stream));
                record.extra.emplace_back("model_num_sms", JsonValue(int64_t(model_sms[op])));
                record.extra.emplace_back("is_model_choice", JsonValue(sms == model_sms[op]));
                record.extra.emplace_back(
                    "peer_bound_kind",
                    JsonValue(baselines.same_device ? "device_to_device" : "peer_to_peer"));
                const double bidirectional = baselines.peer_bound_bidirectional_gbps.value_or(0.0);
                record.extra.emplace_back("peer_bound_bidirectional_gbps", JsonValue(bidirectional));
                record.extra.emplace_back(
                    "fraction_of_bidirectional_bound",
                    JsonValue(record.nvlink_gbps && bidirectional > 0 ? *record.nvlink_gbps / bidirectional
                                                                      : 0.0));
                // The floor: the busiest rank's bytes sent to its peers at the run's copy rate.
                baselines.add_floor(record, double(op == 0 ? max_out : max_combine_out));
                // Where the time goes (bench/op_phases.hpp): the rows' span of the traced rounds, the
                // rate the peers' rows move at in it, and the rest of the op's time.
                if (const auto rows = rows_span_us(op == 0 ? samples.rows_dispatch : samples.rows_combine)) {
                    record.extra.emplace_back("rows_us", JsonValue(*rows));
                    record.extra.emplace_back("fixed_us", JsonValue(record.time_us.median - *rows));
                    record.extra.emplace_back(
                        "rows_gbps", JsonValue(double(op == 0 ? max_out : max_combine_out) / (*rows * 1e3)));
                }
                records.push_back(record);
                (op == 0 ? dispatch_median : combine_median)[{fp8, sms}] = record.time_us.median;
            }
            std::printf("  %s sms=%2d: dispatch %8.1f us (host %.1f us), combine %8.1f us (host %.1f us)\n",
                        fp8 ? "fp8 " : "bf16", sms, dispatch_median[{fp8, sms}],
                        summarize(samples.host_dispatch[0]).median, combine_median[{fp8, sms}],
                        summarize(samples.host_combine[0]).median);
        }
    }

    // Model check: is the model's choice within 5% of the sweep's best?
    meta.emplace_back("ht_model_num_sms_dispatch", JsonValue(int64_t(model_sms[0])));
    meta.emplace_back("ht_model_num_sms_combine", JsonValue(int64_t(model_sms[1])));
    bool model_ok = true;
    for (bool fp8 : fp8_runs)
        for (int op = 0; op < 2; ++op) {
            auto& medians = op == 0 ? dispatch_median : combine_median;
            double best = 1e30;
            int best_sms = 0;
            for (int sms : sms_list)
                if (medians[{fp8, sms}] < best) best = medians[{fp8, sms}], best_sms = sms;
            const double at_model = medians[{fp8, model_sms[op]}];
            const std::string key =
                std::string("ht_") + (op == 0 ? "dispatch_" : "combine_") + (fp8 ? "fp8" : "bf16");
            const bool within = at_model <= 1.05 * best;
            model_ok = model_ok && within;
            meta.emplace_back(key + "_best_sms", JsonValue(int64_t(best_sms)));
            meta.emplace_back(key + "_model_over_best", JsonValue(at_model / best));
            meta.emplace_back(key + "_model_within_5pct", JsonValue(within));
            std::printf("  %s: best %d SMs (%.1f us); model's %d SMs: %.1f us (%.3f of best time): %s\n",
                        key.c_str(), best_sms, best, model_sms[op], at_model, at_model / best,
                        within ? "within 5%" : "MORE THAN 5% SLOWER");
        }
    meta.emplace_back("ht_model_within_5pct", JsonValue(model_ok));
    std::printf("  model check: %s\n", model_ok ? "PASS" : "FAIL");

    // Teardown: every rank is past its last op (run() waited for all); the buffers and the device
    // memory go between host barriers.
    group.run([&](harness::RankContext& rank) {
        rank.host_barrier();
        ranks[rank.rank] = RankState{};
        rank.host_barrier();
    });
}

}  // namespace switchyard::bench
