// High-throughput dispatch and combine across nodes (the hierarchical path), on emulated nodes of one
// GPU with ranks as threads: 2x2, 2x4, 4x2 and 4x1 (nodes x ranks per node), every layout, payload
// (bf16, fp8 with fp32 or UE8M0 scales, quantized in the kernel) and count mode, cached dispatch
// (same data, and new data with the same routing), every combine (rank-major with biases; flat and
// hierarchical expert-major, weighted with the dispatch's weights or the home's, with biases),
// bit for bit against the CPU reference (reference::combine with num_nodes = N), with the emulated
// network's adversarial modes on; the network bytes of every op against the prediction from the
// routing (predict_ht_network_bytes); CUDA-graph capture and replay with new routing; and a rank
// whose network deliveries are withheld: its rail peer raises TimeoutError naming the network phase
// and the node, nothing from that node lands, reset() recovers and the next ops are exact.
//
// The first case compiles every kernel the others use, in parallel, into the JIT cache. A watchdog
// (common/case_watchdog.hpp) ends a case whose rank stays in one step past its limit, printing
// every rank's step (case, op, and whether it is enqueueing, synchronizing or checking), its
// network's counters and its buffer's error record: a kernel that never ends cannot hang the suite
// silently.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/case_watchdog.hpp"
#include "common/gpu_harness.hpp"
#include "core/buffer_sizing.hpp"
#include "hier_test_support.hpp"
#include "jit/jit.hpp"
#include "launch/hier_launch.hpp"
#include "launch/kernel_catalog.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/hier/hier_layout.cuh"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::hier;

namespace {

constexpr auto kHostTimeout = std::chrono::seconds(60);
constexpr uint32_t kAdversarial = kNetworkReorderPuts | kNetworkLateSourceReads | kNetworkContextsOutOfOrder;

struct Shape {
    int nodes, per_node;
    int ranks() const { return nodes * per_node; }
    std::string name() const { return std::to_string(nodes) + "x" + std::to_string(per_node); }
};

// The running case's watchdog (one case at a time per process); null outside run_watched.
CaseWatchdog* watchdog = nullptr;

void step(const RankEnv& env, std::string what) {
    if (watchdog) watchdog->step(env.rank, std::move(what));
}

// What the watchdog prints of a rank's buffer: its network's counters and its error record (host
// memory only: the rank may be stuck in a CUDA call).
std::string describe_buffer(const Buffer& buffer) {
    const NetworkStats s = buffer.network_stats();
    std::ostringstream out;
    out << "network (" << s.backend << "): to each rank puts/bytes/signals";
    for (size_t q = 0; q < s.bytes_to_rank.size(); ++q)
        out << " " << q << ":" << (q < s.puts_to_rank.size() ? s.puts_to_rank[q] : 0) << "/" << s.bytes_to_rank[q]
            << "/" << (q < s.signals_to_rank.size() ? s.signals_to_rank[q] : 0);
    out << "; flushes " << s.flushes << ", refused " << s.invalid_requests << ", engine passes " << s.engine.passes
        << ", requests " << s.engine.requests << ", copy calls " << s.engine.copy_calls << ", write calls "
        << s.engine.write_calls << "; error record: ";
    try {
        buffer.check_errors();
        out << "none";
    } catch (const std::exception& error) {
        out << error.what();
    }
    return out.str();
}

// While it lives, the watchdog may describe `buffer` for this rank. Declare it after the Buffer:
// it is destroyed first, so the watchdog never reads a buffer being torn down.
struct DescribedBuffer {
    const RankEnv& env;
    DescribedBuffer(const RankEnv& e, const Buffer& buffer) : env(e) {
        if (watchdog) watchdog->describe(env.rank, [&buffer] { return describe_buffer(buffer); });
    }
    ~DescribedBuffer() {
        if (!watchdog) return;
        watchdog->describe(env.rank, nullptr);
        watchdog->step(env.rank, std::uncaught_exceptions() ? "failed; destroying its buffer (collective)"
                                                            : "destroying its buffer (collective)");
    }
};

// run_ranks under a watchdog: a rank may stay in one step at most `limit`, or three times the
// buffers' timeout and a minute more (a step holds at most a few bounded waits: the kernels'
// timeout, the forwarders' twice that, host barriers and the teardown's meeting).
void run_watched(const std::string& name, int ranks, double timeout_seconds,
                 const std::function<void(RankEnv&)>& body) {
    const auto limit = std::max(std::chrono::seconds(180),
                                std::chrono::seconds(int64_t(3 * timeout_seconds) + 60));
    CaseWatchdog guard(name, ranks, limit);
    watchdog = &guard;
    try {
        run_ranks(ranks, 1, [&](RankEnv& env) {
            body(env);
            guard.step(env.rank, "end of the case: the harness synchronizes its stream");
        });
    } catch (...) {
        watchdog = nullptr;
        throw;
    }
    watchdog = nullptr;
}

BufferConfig hier_config(const Shape& shape, int max_tokens = 48, uint32_t adversarial = kAdversarial) {
    BufferConfig config;
    config.max_tokens_per_rank = max_tokens;
    config.max_hidden = 256;
    config.max_topk = 4;
    config.max_experts = 64;
    config.timeout_seconds = 20;
    config.emulated_nodes = shape.nodes;
    config.network_adversarial = adversarial;
    return config;
}

// Every layout x payload x count mode at least once, and all tokens to one expert.
std::vector<Case> all_cases() {
    std::vector<Case> cases;
    const Payload payloads[] = {Payload::kBf16, Payload::kFp8Fp32, Payload::kQuantizeUe8m0, Payload::kFp8Ue8m0,
                                Payload::kQuantizeFp32};
    uint32_t seed = 11;
    for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous, RecvLayout::kExpertMasked})
        for (int p = 0; p < 5; ++p) {
            Case c;
            c.layout = layout;
            c.payload = payloads[p];
            c.counts = (p + int(layout)) % 2 ? CountMode::kDevice : CountMode::kHostSynced;
            c.weights = !(p == 4 && layout == RecvLayout::kRankMajor);
            if (layout == RecvLayout::kExpertContiguous) {
                c.alignment = p % 2 ? 4 : 1;
                c.zero_padding = p % 2 == 1;
            }
            c.seed = seed++;
            cases.push_back(c);
        }
    Case one;
    one.one_expert = true;
    one.counts = CountMode::kDevice;
    one.seed = 99;
    cases.push_back(one);
    return cases;
}

// A case's reference: inputs, the dispatch of them and of new data with the same routing, and the
// combine inputs (y and row weights of every rank, in its dispatch output's rows).
struct CaseReference {
    ref::Problem problem;
    std::vector<ref::DispatchInput> inputs, new_inputs;
    ref::GlobalDispatch expected, expected_new;
    std::vector<ref::CombineInput> combine_inputs;
    std::vector<std::vector<int64_t>> topk;  // every rank's ids (for the byte prediction)
};

int64_t output_rows(const Case& c, const ref::DispatchOutput& out) {
    return c.layout == RecvLayout::kExpertContiguous ? out.expert_offsets.back() : out.num_rows;
}

CaseReference make_reference(const Case& c, int ranks) {
    CaseReference r;
    r.problem = make_problem(c, ranks);
    r.inputs = make_inputs(c, r.problem);
    r.expected = ref::dispatch(r.problem, r.inputs, dispatch_options(c));
    r.new_inputs = with_new_data(c, r.inputs);
    r.expected_new = ref::dispatch(r.problem, r.new_inputs, dispatch_options(c));
    r.combine_inputs.resize(size_t(ranks));
    for (int q = 0; q < ranks; ++q) {
        const int64_t rows = output_rows(c, r.expected.outputs[size_t(q)]);
        std::mt19937 rng(c.seed * 7919u + uint32_t(q));
        auto& input = r.combine_inputs[size_t(q)];
        input.y.resize(size_t(rows) * c.hidden);
        for (auto& v : input.y) v = random_bf16(rng);
        input.row_weights.resize(size_t(rows) * (c.layout == RecvLayout::kRankMajor ? c.topk : 1));
        for (auto& w : input.row_weights) w = float(int(rng() % 100)) / 32.0f;
    }
    for (const auto& in : r.inputs) r.topk.push_back(in.topk_idx);
    return r;
}

HtNetworkShape network_shape(const Case& c, const Shape& shape) {
    HtNetworkShape s;
    s.num_ranks = shape.ranks();
    s.num_nodes = shape.nodes;
    s.num_experts = shape.ranks() * c.experts_per_rank;
    s.hidden = c.hidden;
    s.topk = c.topk;
    s.records = c.fp8_input() || c.quantize()
                    ? (c.scales() == ref::ScaleFormat::kUE8M0 ? ScaleFormat::kUE8M0 : ScaleFormat::kFloat32)
                    : ScaleFormat::kNone;
    return s;
}

// Runs `op` on this rank, waits for it and the network, and checks the bytes it put against the
// prediction for `kind`.
template <typename Op>
auto run_accounted(RankEnv& env, Buffer& buffer, const Case& c, const Shape& shape, const CaseReference& r,
                   HtNetworkOp kind, const std::string& what, Op op) {
    const NetworkStats before = buffer.network_stats();
    step(env, what + ": enqueueing");
    auto result = op();
    step(env, what + ": synchronize (the op's kernels and its network requests)");
    buffer.synchronize();  // the op, and what it asked of the network, are done
    step(env, what + ": checking");
    check_network_bytes(what, before, buffer.network_stats(),
                        predict_ht_network_bytes(network_shape(c, shape), r.topk, env.rank, kind));
    return result;
}

// This rank's combine inputs on the device, at its dispatch output's rows (worst case in device
// mode), and two biases.
struct CombineData {
    harness::DeviceArray<uint8_t> y;
    harness::DeviceArray<float> row_weights;
    harness::DeviceArray<uint16_t> bias;  // [2][T, H]
    int64_t rows = 0;
};

std::vector<uint16_t> home_bias(const Case& c, int rank, int tokens) {
    std::vector<uint16_t> bias(size_t(2) * std::max(tokens, 1) * c.hidden);
    std::mt19937 rng(c.seed + 17u * uint32_t(rank));
    for (auto& b : bias) b = random_bf16(rng);
    return bias;
}

CombineData upload_combine(const Case& c, const CaseReference& r, int rank, int ranks) {
    CombineData data;
    const bool host = c.counts == CountMode::kHostSynced;
    const int64_t L = c.experts_per_rank, worst = int64_t(ranks) * c.max_tokens;
    const ref::DispatchOutput& mine = r.expected.outputs[size_t(rank)];
    data.rows = c.layout == RecvLayout::kRankMajor ? (host ? mine.num_rows : worst)
                : c.layout == RecvLayout::kExpertContiguous
                    ? (host ? output_rows(c, mine) : worst * std::min<int64_t>(c.topk, L) + L * (c.alignment - 1))
                    : mine.num_rows;
    const auto& input = r.combine_inputs[size_t(rank)];
    std::vector<uint8_t> y(size_t(std::max<int64_t>(data.rows, 1)) * c.hidden * 2, 0);
    std::memcpy(y.data(), input.y.data(), input.y.size() * 2);
    const int64_t columns = c.layout == RecvLayout::kRankMajor ? c.topk : 1;
    std::vector<float> weights(size_t(std::max<int64_t>(data.rows, 1)) * columns, 0.0f);
    std::memcpy(weights.data(), input.row_weights.data(), input.row_weights.size() * 4);
    data.y = harness::DeviceArray<uint8_t>(y);
    data.row_weights = harness::DeviceArray<float>(weights);
    data.bias = harness::DeviceArray<uint16_t>(home_bias(c, rank, r.inputs[size_t(rank)].num_tokens));
    return data;
}

struct CombineMode {
    bool weighted = false, hierarchical = false;
    int biases = 0;
    bool home_weights = false;  // the combine's own top-k weights (the new data's), not the dispatch's
    std::string name() const {
        return std::string(hierarchical ? "hierarchical" : "flat") + (weighted ? " weighted" : "") +
               (home_weights ? " (home weights)" : "") + " biases " + std::to_string(biases);
    }
};

std::vector<CombineMode> combine_modes(const Case& c) {
    if (c.layout == RecvLayout::kRankMajor) return {{false, false, 0}, {false, false, 2}};
    std::vector<CombineMode> modes = {{false, false, 1}, {false, true, 0}};
    if (c.weights) {
        modes.push_back({true, false, 0});
        modes.push_back({true, true, 2});
        modes.push_back({true, false, 1, true});
    }
    return modes;
}

// The reference combine of `mode` for every home, with num_nodes nodes.
std::vector<ref::CombineOutput> reference_combine(const Case& c, const CaseReference& r, const CombineMode& mode,
                                                  int nodes) {
    const int R = r.problem.num_ranks;
    std::vector<ref::CombineHomeInput> homes(static_cast<size_t>(R));
    for (int s = 0; s < R; ++s) {
        const int T = r.inputs[size_t(s)].num_tokens;
        const std::vector<uint16_t> bias = home_bias(c, s, T);
        const size_t stride = size_t(std::max(T, 1)) * c.hidden;
        if (mode.home_weights) homes[size_t(s)].topk_weights = r.new_inputs[size_t(s)].topk_weights;
        if (mode.biases >= 1) homes[size_t(s)].bias0.assign(bias.begin(), bias.begin() + size_t(T) * c.hidden);
        if (mode.biases >= 2)
            homes[size_t(s)].bias1.assign(bias.begin() + stride, bias.begin() + stride + size_t(T) * c.hidden);
    }
    ref::CombineOptions options;
    options.weighted = mode.weighted;
    options.hierarchical = mode.hierarchical;
    options.num_nodes = nodes;
    return ref::combine(r.expected.routing, r.combine_inputs, homes, options);
}

// The combine of `mode` on the device (bytes accounted) against the reference, bit for bit.
void check_combine(RankEnv& env, Buffer& buffer, const Case& c, const Shape& shape, const CaseReference& r,
                   const CombineData& data, const DispatchResult& dispatched, const DispatchArgs& new_args,
                   const CombineMode& mode) {
    const int T = r.inputs[size_t(env.rank)].num_tokens;
    const Device dev = Device::cuda(env.device);
    CombineArgs args;
    args.y = TensorView::contiguous(data.y.data(), DType::kBFloat16, {data.rows, c.hidden}, dev);
    args.row_weights =
        c.layout == RecvLayout::kRankMajor
            ? TensorView::contiguous(data.row_weights.data(), DType::kFloat32, {data.rows, c.topk}, dev)
            : TensorView::contiguous(data.row_weights.data(), DType::kFloat32, {data.rows}, dev);
    args.weighted = mode.weighted;
    args.hierarchical = mode.hierarchical;
    args.num_sms = c.num_sms;
    if (mode.home_weights) args.topk_weights = new_args.topk_weights;
    if (mode.biases >= 1) args.bias0 = TensorView::contiguous(data.bias.data(), DType::kBFloat16, {T, c.hidden}, dev);
    if (mode.biases >= 2)
        args.bias1 = TensorView::contiguous(data.bias.data() + size_t(std::max(T, 1)) * c.hidden, DType::kBFloat16,
                                            {T, c.hidden}, dev);
    const std::string what = c.name() + " combine " + mode.name() + " on rank " + std::to_string(env.rank);
    const bool weights_travel = mode.weighted && !mode.hierarchical && c.layout != RecvLayout::kRankMajor;
    const CombineResult combined = run_accounted(
        env, buffer, c, shape, r, weights_travel ? HtNetworkOp::kCombineWithHomeWeights : HtNetworkOp::kCombine, what,
        [&] { return buffer.combine(args, dispatched.handle, env.stream); });
    const ref::CombineOutput want = reference_combine(c, r, mode, shape.nodes)[size_t(env.rank)];
    std::vector<uint16_t> got(size_t(T) * c.hidden);
    if (T) SY_CUDA_CHECK(cudaMemcpy(got.data(), combined.out.view().ptr(), got.size() * 2, cudaMemcpyDeviceToHost));
    size_t differing = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want.out[i] && differing++ == 0) first = i;
    SY_CHECK_MSG(differing == 0, what << ": " << differing << " of " << got.size() << " values differ, first token "
                                      << first / c.hidden << " channel " << first % c.hidden << ": " << got[first]
                                      << " vs " << want.out[first]);
    std::vector<float> got_w(size_t(T) * c.topk);
    if (T)
        SY_CUDA_CHECK(cudaMemcpy(got_w.data(), combined.combined_topk_weights.view().ptr(), got_w.size() * 4,
                                 cudaMemcpyDeviceToHost));
    SY_CHECK_MSG(std::memcmp(got_w.data(), want.combined_topk_weights.data(), got_w.size() * 4) == 0,
                 what << ": combined_topk_weights differ");
}

// One case on one buffer: dispatch, cached dispatch (same data, new data), every combine.
void run_case(RankEnv& env, Buffer& buffer, const Shape& shape, const Case& c) {
    step(env, c.name() + ": reference");
    const CaseReference r = make_reference(c, env.num_ranks);
    const std::string rank = " on rank " + std::to_string(env.rank);
    step(env, c.name() + ": host barrier before the uploads");
    env.communicator->barrier(kHostTimeout);
    {
        step(env, c.name() + ": uploads and kernel loads");
        RankData data, new_data;
        const DispatchArgs args = upload(c, r.inputs[size_t(env.rank)], r.problem.num_experts, data, env.device);
        const DispatchArgs new_args =
            upload(c, r.new_inputs[size_t(env.rank)], r.problem.num_experts, new_data, env.device);
        const CombineData combine_data = upload_combine(c, r, env.rank, env.num_ranks);
        buffer.ht_load_kernels(args);
        step(env, c.name() + ": host barrier after the uploads");
        env.communicator->barrier(kHostTimeout);  // allocations done, kernels loaded: no device syncs now

        const DispatchResult result = run_accounted(env, buffer, c, shape, r, HtNetworkOp::kDispatch,
                                                    c.name() + " dispatch" + rank,
                                                    [&] { return buffer.dispatch(args, env.stream); });
        check_dispatch(c.name() + " dispatch" + rank, c, r.expected.outputs[size_t(env.rank)], result);
        const DispatchResult cached = run_accounted(env, buffer, c, shape, r, HtNetworkOp::kDispatch,
                                                    c.name() + " cached dispatch" + rank,
                                                    [&] { return buffer.cached_dispatch(args, result.handle, env.stream); });
        check_dispatch(c.name() + " cached dispatch" + rank, c, r.expected.outputs[size_t(env.rank)], cached);
        const DispatchResult cached_new = run_accounted(
            env, buffer, c, shape, r, HtNetworkOp::kDispatch, c.name() + " cached dispatch of new data" + rank,
            [&] { return buffer.cached_dispatch(new_args, result.handle, env.stream); });
        check_dispatch(c.name() + " cached dispatch of new data" + rank, c, r.expected_new.outputs[size_t(env.rank)],
                       cached_new);
        for (const CombineMode& mode : combine_modes(c))
            check_combine(env, buffer, c, shape, r, combine_data, result, new_args, mode);
        step(env, c.name() + ": host barrier after the ops");
        env.communicator->barrier(kHostTimeout);
        step(env, c.name() + ": freeing the case's inputs");
    }
    step(env, c.name() + ": host barrier after freeing");
    env.communicator->barrier(kHostTimeout);
}

void run_shape(const Shape& shape, uint32_t adversarial) {
    require_gpus(1);
    const std::vector<Case> cases = all_cases();
    const BufferConfig config = hier_config(shape, 48, adversarial);
    run_watched("HierHt " + shape.name(), shape.ranks(), config.timeout_seconds, [&](RankEnv& env) {
        step(env, "creating its buffer (collective)");
        Buffer buffer(env.communicator, env.device, config);
        const DescribedBuffer described(env, buffer);
        SY_CHECK_EQ(buffer.network_stats().backend, std::string("emulated"));
        for (const Case& c : cases) run_case(env, buffer, shape, c);
        step(env, "final synchronize");
        buffer.synchronize();
        if (env.rank == 0)
            std::printf("  %s (%s network): %zu cases bit-exact, bytes as predicted\n", shape.name().c_str(),
                        adversarial ? "adversarial" : "plain", cases.size());
    });
}

}  // namespace

// Compiles every kernel the cases below use into the JIT cache, on every core (the cases then load
// them from the cache; without this each case process would compile them one at a time).
SY_TEST(HierHt, CompileKernels) {
    require_gpus(1);
    std::vector<jit::KernelSource> sources;
    const launch::CatalogShape shape{256, 4};
    for (auto family : {launch::routing_catalog(), launch::ht_catalog(shape), launch::hier_catalog(shape)})
        for (const auto& source : family)
            if (source.family != "ht_dispatch" && source.family != "ht_combine") sources.push_back(source);
    int major = 0, minor = 0;
    SY_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    SY_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    jit::CompileOptions options;
    options.arch = jit::arch_for_compute_capability(major, minor);
    std::atomic<size_t> next{0};
    std::mutex mutex;
    std::vector<std::string> failures;
    std::vector<std::thread> workers;
    for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w)
        workers.emplace_back([&] {
            for (size_t i = next++; i < sources.size(); i = next++) {
                try {
                    jit::compile(sources[i], options);
                } catch (const std::exception& error) {
                    std::lock_guard<std::mutex> lock(mutex);
                    failures.push_back(sources[i].kernel + ": " + error.what());
                }
            }
        });
    for (auto& worker : workers) worker.join();
    for (const auto& failure : failures) std::printf("  FAILED %s\n", failure.c_str());
    SY_CHECK_MSG(failures.empty(), failures.size() << " of " << sources.size() << " kernels failed to compile");
    std::printf("  %zu kernels compiled for %s\n", sources.size(), options.arch.c_str());
}

SY_TEST(HierHt, TwoNodesOfTwo) {
    run_shape({2, 2}, kAdversarial);
}
SY_TEST(HierHt, TwoNodesOfFour) {
    run_shape({2, 4}, kAdversarial);
}
SY_TEST(HierHt, FourNodesOfTwo) {
    run_shape({4, 2}, kAdversarial);
}
SY_TEST(HierHt, FourNodesOfOne) {
    run_shape({4, 1}, kAdversarial);
}
SY_TEST(HierHt, TwoNodesOfTwoPlainNetwork) {
    run_shape({2, 2}, 0);
}

// Larger ops: 640 tokens (many batches per stream, several runs per sender warp), on one SM and on
// the SM model's choice.
SY_TEST(HierHt, ManyTokens) {
    require_gpus(1);
    const Shape shape{2, 2};
    std::vector<Case> cases;
    for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous}) {
        Case c;
        c.max_tokens = 640;
        c.layout = layout;
        c.counts = CountMode::kDevice;
        c.payload = layout == RecvLayout::kRankMajor ? Payload::kBf16 : Payload::kQuantizeFp32;
        // Alignment and zero padding belong to the expert-major contiguous layout (the op refuses them
        // elsewhere).
        c.alignment = layout == RecvLayout::kRankMajor ? 1 : 4;
        c.zero_padding = layout != RecvLayout::kRankMajor;
        c.num_sms = layout == RecvLayout::kRankMajor ? 1 : 0;
        c.seed = 4242 + uint32_t(layout);
        cases.push_back(c);
    }
    const BufferConfig config = hier_config(shape, 640);
    run_watched("HierHt.ManyTokens", shape.ranks(), config.timeout_seconds, [&](RankEnv& env) {
        step(env, "creating its buffer (collective)");
        Buffer buffer(env.communicator, env.device, config);
        const DescribedBuffer described(env, buffer);
        for (const Case& c : cases) run_case(env, buffer, shape, c);
        step(env, "final synchronize");
        buffer.synchronize();
        if (env.rank == 0) std::printf("  2x2: %zu cases of 640 tokens bit-exact\n", cases.size());
    });
}

namespace {

// The inputs a captured graph reads, at fixed addresses, refilled before each replay through pinned
// memory on the rank's stream (no device-wide synchronization while peers' kernels wait).
struct GraphInputs {
    harness::DeviceArray<uint16_t> x, y, out;
    harness::DeviceArray<int64_t> idx;
    harness::DeviceArray<float> weights;
    harness::PinnedBuffer<uint8_t> staging;
    int64_t y_rows;
    GraphInputs(const Case& c, int ranks)
        : x(size_t(c.max_tokens) * c.hidden + 8),
          y(size_t(ranks) * c.max_tokens * c.hidden + 8),
          out(size_t(c.max_tokens) * c.hidden + 8),
          idx(size_t(c.max_tokens) * c.topk + 1),
          weights(size_t(c.max_tokens) * c.topk + 1),
          staging(size_t(ranks) * c.max_tokens * c.hidden * 2 + 4096),
          y_rows(int64_t(ranks) * c.max_tokens) {}
    template <typename T>
    void load(T* device, const std::vector<T>& values, cudaStream_t stream) {
        if (values.empty()) return;
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));  // the staging buffer's last copy is done
        std::memcpy(staging.data(), values.data(), values.size() * sizeof(T));
        SY_CUDA_CHECK(cudaMemcpyAsync(device, staging.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    }
    void load(const CaseReference& r, int rank, cudaStream_t stream) {
        load(x.data(), r.inputs[size_t(rank)].x_bf16, stream);
        load(idx.data(), r.inputs[size_t(rank)].topk_idx, stream);
        load(weights.data(), r.inputs[size_t(rank)].topk_weights, stream);
        load(y.data(), r.combine_inputs[size_t(rank)].y, stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
};

// dispatch (device counts) and combine of its rows, on `stream`: what the graph captures.
std::pair<DispatchResult, CombineResult> round_trip(Buffer& buffer, GraphInputs& inputs, const Case& c, int tokens,
                                                    int experts, int device, cudaStream_t stream) {
    const Device dev = Device::cuda(device);
    DispatchArgs args;
    args.x = TensorView::contiguous(inputs.x.data(), DType::kBFloat16, {tokens, c.hidden}, dev);
    args.topk_idx = TensorView::contiguous(inputs.idx.data(), DType::kInt64, {tokens, c.topk}, dev);
    args.topk_weights = TensorView::contiguous(inputs.weights.data(), DType::kFloat32, {tokens, c.topk}, dev);
    args.num_experts = experts;
    args.counts = CountMode::kDevice;
    DispatchResult dispatched = buffer.dispatch(args, stream);
    CombineArgs combine;
    combine.y = TensorView::contiguous(inputs.y.data(), DType::kBFloat16, {inputs.y_rows, c.hidden}, dev);
    combine.out = TensorView::contiguous(inputs.out.data(), DType::kBFloat16, {tokens, c.hidden}, dev);
    CombineResult combined = buffer.combine(combine, dispatched.handle, stream);
    return {std::move(dispatched), std::move(combined)};
}

}  // namespace

// A dispatch (device counts) and its combine captured in a CUDA graph and replayed with new routing
// and data each time, 2 x 2 nodes with the adversarial network: outputs and network bytes exact.
SY_TEST(HierHt, GraphReplay) {
    require_gpus(1);
    const Shape shape{2, 2};
    const BufferConfig config = hier_config(shape);
    run_watched("HierHt.GraphReplay", shape.ranks(), config.timeout_seconds, [&](RankEnv& env) {
        step(env, "creating its buffer (collective)");
        Buffer buffer(env.communicator, env.device, config);
        const DescribedBuffer described(env, buffer);
        Case c;
        c.counts = CountMode::kDevice;
        c.seed = 700;
        CaseReference r = make_reference(c, env.num_ranks);
        const int tokens = r.inputs[size_t(env.rank)].num_tokens, experts = r.problem.num_experts;
        GraphInputs inputs(c, env.num_ranks);
        {
            RankData data;
            buffer.ht_load_kernels(upload(c, r.inputs[size_t(env.rank)], experts, data, env.device));
        }
        env.communicator->barrier(kHostTimeout);
        inputs.load(r, env.rank, env.stream);
        step(env, "warm-up round trip");
        round_trip(buffer, inputs, c, tokens, experts, env.device, env.stream);  // warm-up, outside the capture
        buffer.synchronize();
        step(env, "capture and instantiation");
        cudaGraph_t graph = nullptr;
        SY_CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
        auto captured = round_trip(buffer, inputs, c, tokens, experts, env.device, env.stream);
        SY_CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
        cudaGraphExec_t exec = nullptr;
        SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
        env.communicator->barrier(kHostTimeout);  // instantiation may synchronize the device
        for (int replay = 1; replay <= 6; ++replay) {
            c.seed = 700 + uint32_t(replay);
            r = make_reference(c, env.num_ranks);
            inputs.load(r, env.rank, env.stream);
            const std::string what = "graph replay " + std::to_string(replay) + " on rank " + std::to_string(env.rank);
            const NetworkStats before = buffer.network_stats();
            step(env, what + ": launch and synchronize");
            SY_CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            buffer.synchronize();
            step(env, what + ": checking");
            std::vector<uint64_t> predicted =
                predict_ht_network_bytes(network_shape(c, shape), r.topk, env.rank, HtNetworkOp::kDispatch);
            const auto combine_bytes =
                predict_ht_network_bytes(network_shape(c, shape), r.topk, env.rank, HtNetworkOp::kCombine);
            for (size_t q = 0; q < predicted.size(); ++q) predicted[q] += combine_bytes[q];
            check_network_bytes(what, before, buffer.network_stats(), predicted);
            check_dispatch(what + " dispatch", c, r.expected.outputs[size_t(env.rank)], captured.first);
            const ref::CombineOutput want = reference_combine(c, r, CombineMode{}, shape.nodes)[size_t(env.rank)];
            std::vector<uint16_t> got(size_t(tokens) * c.hidden);
            if (tokens) SY_CUDA_CHECK(cudaMemcpy(got.data(), inputs.out.data(), got.size() * 2, cudaMemcpyDeviceToHost));
            SY_CHECK_MSG(got == want.out, what << ": the combine's output differs from the reference");
        }
        env.communicator->barrier(kHostTimeout);
        SY_CUDA_CHECK(cudaGraphExecDestroy(exec));
        SY_CUDA_CHECK(cudaGraphDestroy(graph));
        env.communicator->barrier(kHostTimeout);
        if (env.rank == 0) std::printf("  2x2: 6 graph replays with new routing, exact, bytes as predicted\n");
    });
}

namespace {

// Rank 1's copies of the network receive region that node 1 writes (both parities), in its buffer.
std::vector<std::pair<size_t, size_t>> node_one_regions(const BufferConfig& config, const Case& c, const Shape& shape) {
    // The layout the Buffer makes of this configuration.
    const device::BufferLayout layout =
        device::BufferLayout::make(core::buffer_capacity(config, shape.ranks(), shape.nodes));
    const int64_t record =
        device::hier_forward_record(c.hidden, device::kPayloadBf16, device::kScaleNone, c.topk, shape.per_node).total_bytes;
    std::vector<std::pair<size_t, size_t>> regions;
    for (int parity = 0; parity < 2; ++parity)
        regions.push_back({size_t(layout.hier.net_recv(parity, 1, 0, record)), size_t(config.max_tokens_per_rank * record)});
    return regions;
}

}  // namespace

// 2 x 2 with rank 3's deliveries withheld (a failed NIC until the first reset): rank 1, its rail peer
// on node 0, times out waiting for rank 3's counts over the network, naming the network phase and
// node 1; rank 0 times out waiting for rank 1 (which relays node 1's counts of rail 1 inside node 0);
// node 1's ranks, which need nothing from rank 3 over the network, complete exactly. Nothing from
// node 1 lands in rank 1's network receive region. After reset() on every rank the ops are exact.
SY_TEST(HierHt, WithheldRankTimesOutNamingTheNodeAndResetRecovers) {
    require_gpus(1);
    const Shape shape{2, 2};
    const double timeout = 2.0;
    run_watched("HierHt.WithheldRank", shape.ranks(), timeout, [&](RankEnv& env) {
        BufferConfig config = hier_config(shape, 48, 0);
        config.timeout_seconds = timeout;
        config.network_withhold_rank = 3;
        step(env, "creating its buffer (collective)");
        Buffer buffer(env.communicator, env.device, config);
        const DescribedBuffer described(env, buffer);
        Case c;
        c.counts = CountMode::kDevice;
        c.seed = 31;
        const CaseReference r = make_reference(c, env.num_ranks);
        RankData data;
        const DispatchArgs args = upload(c, r.inputs[size_t(env.rank)], r.problem.num_experts, data, env.device);
        const CombineData combine_data = upload_combine(c, r, env.rank, env.num_ranks);
        buffer.ht_load_kernels(args);
        const auto regions = node_one_regions(config, c, shape);
        if (env.rank == 1)
            for (const auto& [offset, bytes] : regions) SY_CUDA_CHECK(cudaMemset(buffer.local_memory() + offset, 0xA5, bytes));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        env.communicator->barrier(kHostTimeout);

        const auto start = std::chrono::steady_clock::now();
        std::string outcome = "completed";
        try {
            step(env, "dispatch with rank 3 withheld (a timeout expected on ranks 0 and 1)");
            const DispatchResult result = buffer.dispatch(args, env.stream);
            buffer.synchronize();
            check_dispatch("dispatch with rank 3 withheld, on rank " + std::to_string(env.rank), c,
                           r.expected.outputs[size_t(env.rank)], result);
        } catch (const TimeoutError& error) {
            const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            outcome = "TimeoutError naming rank " + std::to_string(error.peer()) + " in phase '" + error.phase() + "'";
            std::printf("  rank %d after %.2f s: %s\n", env.rank, waited, error.what());
            SY_CHECK_MSG(waited < timeout + 5.0, "rank " << env.rank << " raised its TimeoutError after " << waited << " s");
            if (env.rank == 1)
                SY_CHECK_MSG(std::string(error.what()).find("on node 1 over the network") != std::string::npos,
                             "rank 1's TimeoutError does not name node 1: " << error.what());
        }
        std::printf("  rank %d: %s\n", env.rank, outcome.c_str());
        if (env.rank == 0) SY_CHECK_EQ(outcome, std::string("TimeoutError naming rank 1 in phase 'high-throughput notify'"));
        if (env.rank == 1)
            SY_CHECK_EQ(outcome, std::string("TimeoutError naming rank 3 in phase 'high-throughput network counts'"));
        if (env.rank >= 2) SY_CHECK_EQ(outcome, std::string("completed"));
        if (env.rank == 1)
            for (const auto& [offset, bytes] : regions) {
                std::vector<uint8_t> got(bytes);
                SY_CUDA_CHECK(cudaMemcpy(got.data(), buffer.local_memory() + offset, bytes, cudaMemcpyDeviceToHost));
                const size_t landed = size_t(std::count_if(got.begin(), got.end(), [](uint8_t b) { return b != 0xA5; }));
                SY_CHECK_MSG(landed == 0, landed << " bytes from node 1 landed in rank 1's network receive region");
            }

        step(env, "host barrier, then reset() (collective)");
        env.communicator->barrier(kHostTimeout);
        buffer.reset();
        const DispatchResult result = run_accounted(env, buffer, c, shape, r, HtNetworkOp::kDispatch, "dispatch after reset",
                                                    [&] { return buffer.dispatch(args, env.stream); });
        check_dispatch("dispatch after reset on rank " + std::to_string(env.rank), c, r.expected.outputs[size_t(env.rank)],
                       result);
        check_combine(env, buffer, c, shape, r, combine_data, result, args, CombineMode{false, false, 2});
        SY_CHECK_EQ(buffer.network_stats().bytes_withheld > 0, env.rank == 3);
        env.communicator->barrier(kHostTimeout);
        if (env.rank == 0) std::printf("  after reset: dispatch and combine exact, bytes as predicted\n");
    });
}

// A small case for compute-sanitizer (memcheck / racecheck): `gpu_test_hier_ht Sanitizer`. Two
// nodes of one rank (the network alone) with a generous timeout (the tools slow the kernels): a
// rank-major and an expert-major case, each dispatch with its combines, checked as above.
SY_TEST(HierHtSanitizer, SmallTwoNodeRoundTrip) {
    require_gpus(1);
    const Shape shape{2, 1};
    std::vector<Case> cases(2);
    cases[0].max_tokens = cases[1].max_tokens = 16;
    cases[1].layout = RecvLayout::kExpertContiguous;
    cases[1].payload = Payload::kQuantizeFp32;
    cases[1].counts = CountMode::kDevice;
    cases[1].seed = 77;
    run_watched("HierHtSanitizer.SmallTwoNodeRoundTrip", shape.ranks(), 120, [&](RankEnv& env) {
        BufferConfig config = hier_config(shape, 16, 0);
        config.timeout_seconds = 120;
        step(env, "creating its buffer (collective)");
        Buffer buffer(env.communicator, env.device, config);
        const DescribedBuffer described(env, buffer);
        for (const Case& c : cases) run_case(env, buffer, shape, c);
        buffer.synchronize();
    });
}

SY_TEST_MAIN()
