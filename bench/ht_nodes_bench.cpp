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
                    if (node * s.G + g != rank && s.routed(source, t, node * s.G + g)) bytes.dispatch_nvlink += record_bytes;
            if (!s.routed(source, t, rank)) continue;
            bytes.dispatch_received += record_bytes;
            bytes.combine_received += combine_bytes;
            // Combine: this rank's row of (source, t) goes to the forwarder of source's rail here.
            if (source % s.G != local) bytes.combine_nvlink += combine_bytes;
        }
    return bytes;
}

struct NodesSamples {
    explicit NodesSamples(int ranks) : dispatch(ranks), combine(ranks) {}
    std::vector<std::vector<double>> dispatch, combine;
};

// Network bytes of one dispatch and one combine on every rank (synchronized), against the
// prediction: {busiest rank's bytes, busiest predicted, every rank matches} per op.
struct Accounting {
    int64_t network[2] = {0, 0}, predicted[2] = {0, 0};
    bool match[2] = {true, true};
};

}  // namespace

void measure_ht_nodes(const BenchOptions& options, int R, int G, int nodes, const RunInfo& run,
                      std::vector<BenchRecord>& records, JsonObject& meta) {
    const ModeDefaults defaults = ht_defaults();
    const int iters = options.iters.value_or(defaults.iters), warmup = options.warmup.value_or(defaults.warmup);
    NodesShape shape{R, R / nodes, nodes, options.tokens.value_or(defaults.tokens), options.hidden, options.topk,
                     options.experts, {}};
    for (int r = 0; r < R; ++r)
        shape.idx.push_back(random_topk_routing(shape.T, shape.K, shape.E, rank_seed(options.seed, r)));
    std::printf("\nHT across %d emulated nodes: EP%d (%d per node) on %d GPU(s), %d tokens/rank, hidden %d, "
                "top-%d of %d experts, %d iters\n",
                nodes, R, shape.G, G, shape.T, shape.H, shape.K, shape.E, iters);
    harness::RankGroup group(R, G);
    std::vector<NodesRank> ranks(R);
    BufferConfig config;
    config.max_tokens_per_rank = shape.T;
    config.max_hidden = shape.H;
    config.max_topk = shape.K;
    config.max_experts = shape.E;
    config.timeout_seconds = options.timeout_seconds.value_or(defaults.timeout_seconds);
    config.launch_on_caller_stream = options.caller_stream;
    config.emulated_nodes = nodes;
    const int T = shape.T, H = shape.H, K = shape.K;
    const size_t scale_words = size_t((H + 127) / 128);
    group.run([&](harness::RankContext& rank) {
        NodesRank& state = ranks[rank.rank];
        state.buffer = std::make_unique<Buffer>(rank.communicator, rank.device, config);
        std::mt19937 rng(uint32_t(options.seed) * 77u + rank.rank);
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
        state.y = harness::DeviceBuffer(rank.device, size_t(R) * T * H * 2);
        SY_CUDA_CHECK(cudaMemcpy(state.x_bf16.get(), x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.x_fp8.get(), x8.data(), x8.size(), cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.scales.get(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemcpy(state.idx.get(), idx.data(), idx.size() * 8, cudaMemcpyHostToDevice));
        SY_CUDA_CHECK(cudaMemset(state.y.get(), 0x3c, state.y.size()));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        state.flusher = std::make_unique<L2Flusher>(rank.device);
        state.timer = std::make_unique<EventTimer>(rank.device);
        state.gate = std::make_unique<StreamGate>();
    });

    auto model_for = [&](SmModelOp op) {
        SmModelInput input;
        input.num_experts = shape.E;
        input.topk = K;
        input.num_ranks = R;
        input.num_nodes = nodes;
        input.num_device_sms = ranks[0].buffer->sm_budget();
        input.op = op;
        return model_num_sms(input).num_sms;
    };
    const int model_sms[2] = {model_for(SmModelOp::kDispatch), model_for(SmModelOp::kCombine)};
    std::vector<int> sms_list;
    for (int sms : options.sweep)
        if (sms <= ranks[0].buffer->sm_budget()) sms_list.push_back(sms);
    sms_list.insert(sms_list.end(), std::begin(model_sms), std::end(model_sms));
    std::sort(sms_list.begin(), sms_list.end());
    sms_list.erase(std::unique(sms_list.begin(), sms_list.end()), sms_list.end());
    const double cap = config.network_bandwidth_gbps;

    for (PayloadType dtype : options.dtypes) {
        const bool fp8 = dtype == PayloadType::kFP8;
        const auto dispatch_record = device::RecordLayout::dispatch(H, fp8 ? device::kPayloadFp8 : device::kPayloadBf16,
                                                                    fp8 ? device::kScaleFloat32 : device::kScaleNone, K);
        const int64_t combine_record = device::RecordLayout::combine(H, K).total_bytes;
        HtNetworkShape network_shape;
        network_shape.num_ranks = R;
        network_shape.num_nodes = nodes;
        network_shape.num_experts = shape.E;
        network_shape.hidden = H;
        network_shape.topk = K;
        network_shape.records = fp8 ? ScaleFormat::kFloat32 : ScaleFormat::kNone;
        std::vector<RankBytes> moved(R);
        for (int r = 0; r < R; ++r) moved[r] = rank_bytes(shape, r, dispatch_record.total_bytes, combine_record);
        for (int sms : sms_list) {
            NodesSamples samples(R);
            Accounting accounting;
            // Per rank and op: network bytes, predicted bytes, 1 where they differ for some peer.
            std::vector<std::array<int64_t, 6>> per_rank(R);
            group.run([&](harness::RankContext& rank) {
                NodesRank& state = ranks[rank.rank];
                cudaStream_t stream = rank.stream;
                const Device dev = Device::cuda(rank.device);
                DispatchArgs args;
                if (fp8) {
                    args.x = TensorView::contiguous(state.x_fp8.get(), DType::kFloat8E4M3, {T, H}, dev);
                    args.x_scales =
                        TensorView::contiguous(state.scales.get(), DType::kFloat32, {T, int64_t(scale_words)}, dev);
                } else {
                    args.x = TensorView::contiguous(state.x_bf16.get(), DType::kBFloat16, {T, H}, dev);
                }
                args.topk_idx = TensorView::contiguous(state.idx.get(), DType::kInt64, {T, K}, dev);
                args.num_experts = shape.E;
                args.counts = CountMode::kDevice;
                args.num_sms = sms;
                CombineArgs combine;
                combine.y = TensorView::contiguous(state.y.get(), DType::kBFloat16, {int64_t(R) * T, H}, dev);
                combine.num_sms = sms;
                state.buffer->ht_load_kernels(args);
                rank.host_barrier();
                // The accounting pass (untimed): one dispatch and its combine, each waited for with the
                // network, against the prediction.
                NetworkStats before = state.buffer->network_stats();
                DispatchResult result = state.buffer->dispatch(args, stream);
                state.buffer->synchronize();
                NetworkStats after = state.buffer->network_stats();
                std::array<int64_t, 6>& mine = per_rank[size_t(rank.rank)];
                auto account = [&](int op, HtNetworkOp kind) {
                    const auto predicted = predict_ht_network_bytes(network_shape, shape.idx, rank.rank, kind);
                    for (int q = 0; q < R; ++q) {
                        const int64_t sent = int64_t(after.bytes_to_rank[size_t(q)] - before.bytes_to_rank[size_t(q)]);
                        mine[size_t(op)] += sent;
                        mine[size_t(op + 2)] += int64_t(predicted[size_t(q)]);
                        if (sent != int64_t(predicted[size_t(q)])) mine[size_t(op + 4)] = 1;
                    }
                };
                account(0, HtNetworkOp::kDispatch);
                before = after;
                state.buffer->combine(combine, result.handle, stream);
                state.buffer->synchronize();
                after = state.buffer->network_stats();
                account(1, HtNetworkOp::kCombine);
                rank.host_barrier();
                for (int iter = 0; iter < warmup + iters; ++iter) {
                    double us[2] = {0, 0};
                    for (int op = 0; op < 2; ++op) {
                        state.flusher->flush(stream);
                        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
                        rank.host_barrier();
                        if (iter >= warmup) state.gate->close(stream);
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
                    if (iter < warmup) continue;
                    samples.dispatch[rank.rank].push_back(us[0]);
                    samples.combine[rank.rank].push_back(us[1]);
                }
                state.buffer->synchronize();
            });
            for (int op = 0; op < 2; ++op) {
                for (int r = 0; r < R; ++r) {
                    accounting.network[op] = std::max(accounting.network[op], per_rank[r][size_t(op)]);
                    accounting.predicted[op] = std::max(accounting.predicted[op], per_rank[r][size_t(op + 2)]);
                    accounting.match[op] = accounting.match[op] && per_rank[r][size_t(op + 4)] == 0;
                }
            }
            std::vector<double> times[2] = {std::vector<double>(iters), std::vector<double>(iters)};
            for (int i = 0; i < iters; ++i)
                for (int r = 0; r < R; ++r) {
                    times[0][i] = std::max(times[0][i], samples.dispatch[r][i]);
                    times[1][i] = std::max(times[1][i], samples.combine[r][i]);
                }
            for (int op = 0; op < 2; ++op) {
                int64_t nvlink = 0, received = 0;
                for (const RankBytes& b : moved) {
                    nvlink = std::max(nvlink, op == 0 ? b.dispatch_nvlink : b.combine_nvlink);
                    received = std::max(received, op == 0 ? b.dispatch_received : b.combine_received);
                }
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
                record.experts = shape.E;
                record.num_sms = sms;
                record.time_us = summarize(times[op]);
                record.logical_gbps = gbps(double(received), record.time_us.median);
                record.nvlink_gbps = gbps(double(nvlink), record.time_us.median);
                record.buffer_bytes = int64_t(ranks[0].buffer->buffer_bytes());
                record.stamp(run);
                const double network_gbps = gbps(double(accounting.network[op]), record.time_us.median).value_or(0.0);
                record.extra.emplace_back("nodes", JsonValue(int64_t(nodes)));
                record.extra.emplace_back("network_gbps", JsonValue(network_gbps));
                record.extra.emplace_back("fraction_of_network_cap", JsonValue(network_gbps / cap));
                record.extra.emplace_back("network_cap_gbps", JsonValue(cap));
                record.extra.emplace_back("network_bytes", JsonValue(accounting.network[op]));
                record.extra.emplace_back("predicted_network_bytes", JsonValue(accounting.predicted[op]));
                record.extra.emplace_back("network_bytes_match", JsonValue(accounting.match[op]));
                record.extra.emplace_back("dispatch_dtype", JsonValue(std::string(fp8 ? "fp8" : "bf16")));
                record.extra.emplace_back("count_mode", JsonValue(std::string("device")));
                record.extra.emplace_back("model_num_sms", JsonValue(int64_t(model_sms[op])));
                record.extra.emplace_back("is_model_choice", JsonValue(sms == model_sms[op]));
                records.push_back(record);
                std::printf("  %s sms=%2d: %s %8.1f us, network %6.2f GB/s = %.3f of the %.0f GB/s cap, bytes %s "
                            "prediction (%lld)\n",
                            fp8 ? "fp8 " : "bf16", sms, op == 0 ? "dispatch" : "combine ", record.time_us.median,
                            network_gbps, network_gbps / cap, cap, accounting.match[op] ? "==" : "!=",
                            (long long)accounting.network[op]);
            }
        }
    }
    meta.emplace_back("ht_nodes", JsonValue(int64_t(nodes)));
    meta.emplace_back("ht_nodes_model_num_sms_dispatch", JsonValue(int64_t(model_sms[0])));
    meta.emplace_back("ht_nodes_model_num_sms_combine", JsonValue(int64_t(model_sms[1])));
    group.run([&](harness::RankContext& rank) {
        rank.host_barrier();
        ranks[rank.rank] = NodesRank{};
        rank.host_barrier();
    });
}

}  // namespace switchyard::bench
