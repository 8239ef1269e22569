// High-throughput dispatch + combine under CUDA-graph capture and replay (device counts), a
// 1,000-iteration soak with routing that changes every iteration, and run-to-run determinism.
// The check needs no reference: combining the unmodified rank-major dispatch output (y = recv_x)
// must give x times the number of ranks each token reached, exactly (small integer values).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/gpu_harness.hpp"
#include "common/workspace_dump.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard;
using namespace switchyard::testing;

namespace {

constexpr int kTokens = 32, kHidden = 128, kTopk = 4, kExpertsPerRank = 4;

BufferConfig soak_config(bool caller_stream = false) {
    BufferConfig config;
    config.launch_on_caller_stream = caller_stream;
    config.max_tokens_per_rank = kTokens;
    config.max_hidden = kHidden;
    config.max_topk = kTopk;
    config.max_experts = 64;
    config.timeout_seconds = 20;
    return config;
}

// Routing and payload of one iteration on one rank (every rank can rebuild any rank's).
struct Iteration {
    std::vector<int64_t> idx;
    std::vector<uint16_t> x;
    std::vector<int> ranks_hit;
};

Iteration make_iteration(int rank, int num_ranks, int iteration) {
    std::mt19937 rng(uint32_t(iteration) * 131u + uint32_t(rank));
    const int experts = num_ranks * kExpertsPerRank;
    Iteration it;
    it.idx.assign(size_t(kTokens) * kTopk, -1);
    it.x.resize(size_t(kTokens) * kHidden);
    it.ranks_hit.assign(kTokens, 0);
    for (int t = 0; t < kTokens; ++t) {
        std::vector<bool> hit(num_ranks, false);
        for (int k = 0; k < kTopk; ++k) {
            if (rng() % 5 == 0) continue;
            int64_t expert;
            bool duplicate;
            do {
                expert = int64_t(rng() % experts);
                duplicate = false;
                for (int j = 0; j < k; ++j) duplicate |= it.idx[size_t(t) * kTopk + j] == expert;
            } while (duplicate);
            it.idx[size_t(t) * kTopk + k] = expert;
            hit[expert / kExpertsPerRank] = true;
        }
        for (bool h : hit) it.ranks_hit[t] += h;
        for (int c = 0; c < kHidden; ++c)
            it.x[size_t(t) * kHidden + c] = reference::float_to_bf16(float(int(rng() % 9) - 4));
    }
    return it;
}

void check_round_trip(const Iteration& it, const std::vector<uint16_t>& out, const char* what,
                      int iteration) {
    for (int t = 0; t < kTokens; ++t)
        for (int c = 0; c < kHidden; ++c) {
            const float want =
                reference::bf16_to_float(it.x[size_t(t) * kHidden + c]) * float(it.ranks_hit[t]);
            const float got = reference::bf16_to_float(out[size_t(t) * kHidden + c]);
            SY_CHECK_MSG(got == want, what << " iteration " << iteration << ": token " << t << " channel "
                                           << c << ": " << got << " vs " << want);
        }
}

// Device inputs that stay at fixed addresses (so a captured graph can be replayed on new data).
struct Inputs {
    DeviceArray<int64_t> idx{size_t(kTokens) * kTopk};
    DeviceArray<uint16_t> x{size_t(kTokens) * kHidden};
    DeviceArray<uint16_t> out{size_t(kTokens) * kHidden};
    uint16_t* pinned_x = nullptr;
    int64_t* pinned_idx = nullptr;
    uint16_t* pinned_out = nullptr;
    Inputs() {
        SY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_x), sizeof(uint16_t) * kTokens * kHidden));
        SY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&pinned_idx), sizeof(int64_t) * kTokens * kTopk));
        SY_CUDA_CHECK(
            cudaMallocHost(reinterpret_cast<void**>(&pinned_out), sizeof(uint16_t) * kTokens * kHidden));
    }
    ~Inputs() {
        cudaFreeHost(pinned_x);
        cudaFreeHost(pinned_idx);
        cudaFreeHost(pinned_out);
    }
    // Copies `out` to the host after the work queued on `stream`. Through pinned memory: a copy
    // into pageable memory goes through the driver's staging buffers, and while one rank's copy
    // waits there for its stream (behind a kernel that waits for a co-located peer), another
    // rank's pageable copy cannot start: the peer never gets to its next op (rule 6 of the rules
    // for ranks that share a GPU, DESIGN.md §4).
    void copy_out(std::vector<uint16_t>& host, cudaStream_t stream) const {
        SY_CUDA_CHECK(cudaMemcpyAsync(pinned_out, out.data(), host.size() * 2, cudaMemcpyDeviceToHost, stream));
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::memcpy(host.data(), pinned_out, host.size() * 2);
    }
    void load(const Iteration& it, cudaStream_t stream) {
        SY_CUDA_CHECK(cudaStreamSynchronize(stream));
        std::memcpy(pinned_x, it.x.data(), it.x.size() * 2);
        std::memcpy(pinned_idx, it.idx.data(), it.idx.size() * 8);
        SY_CUDA_CHECK(cudaMemcpyAsync(x.data(), pinned_x, it.x.size() * 2, cudaMemcpyHostToDevice, stream));
        SY_CUDA_CHECK(
            cudaMemcpyAsync(idx.data(), pinned_idx, it.idx.size() * 8, cudaMemcpyHostToDevice, stream));
    }
    DispatchArgs dispatch_args(int device, int experts) const {
        DispatchArgs args;
        const Device dev = Device::cuda(device);
        args.x = TensorView::contiguous(x.data(), DType::kBFloat16, {kTokens, kHidden}, dev);
        args.topk_idx = TensorView::contiguous(idx.data(), DType::kInt64, {kTokens, kTopk}, dev);
        args.num_experts = experts;
        args.counts = CountMode::kDevice;
        return args;
    }
};

// combine(y = the dispatch's recv_x) into inputs.out, on `stream`.
CombineResult combine_into_out(Buffer& buffer, Inputs& inputs, const DispatchResult& dispatched, int device,
                               cudaStream_t stream) {
    CombineArgs combine;
    combine.y = dispatched.recv_x.view();
    combine.out =
        TensorView::contiguous(inputs.out.data(), DType::kBFloat16, {kTokens, kHidden}, Device::cuda(device));
    return buffer.combine(combine, dispatched.handle, stream);
}

// dispatch -> combine(y = recv_x) into inputs.out, all on `stream`.
std::pair<DispatchResult, CombineResult> round_trip(Buffer& buffer, Inputs& inputs, int device, int experts,
                                                    cudaStream_t stream) {
    DispatchResult dispatched = buffer.dispatch(inputs.dispatch_args(device, experts), stream);
    CombineResult combined = combine_into_out(buffer, inputs, dispatched, device, stream);
    return {std::move(dispatched), std::move(combined)};
}

}  // namespace

// Both stream modes: ops on the buffer's communication stream (default) and on the caller's.
SY_TEST(HighThroughputGraph, CaptureAndReplay) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs())
        for (const bool caller_stream : {false, true}) {
            if (rc.ranks < 2) continue;
            run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
                Buffer buffer(env.communicator, env.device, soak_config(caller_stream));
                dump_workspace_on_failure(buffer, [&] {
                    Inputs inputs;
                    const int experts = rc.ranks * kExpertsPerRank;
                    buffer.ht_load_kernels(inputs.dispatch_args(env.device, experts));
                    env.communicator->barrier(std::chrono::seconds(30));
                    // Warm up outside the capture (the kernels were loaded above).
                    Iteration it = make_iteration(env.rank, rc.ranks, 0);
                    inputs.load(it, env.stream);
                    round_trip(buffer, inputs, env.device, experts, env.stream);
                    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                    buffer.check_errors();

                    cudaGraph_t graph = nullptr;
                    SY_CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
                    auto captured = round_trip(buffer, inputs, env.device, experts, env.stream);
                    SY_CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
                    cudaGraphExec_t exec = nullptr;
                    SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph,
                                                             cudaGraphInstantiateFlagAutoFreeOnLaunch));
                    // Instantiation may synchronize the device: no rank replays before all are done.
                    env.communicator->barrier(std::chrono::seconds(30));
                    std::vector<uint16_t> out(size_t(kTokens) * kHidden);
                    for (int replay = 1; replay <= 20; ++replay) {
                        it = make_iteration(env.rank, rc.ranks, replay);
                        inputs.load(it, env.stream);
                        SY_CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
                        inputs.copy_out(out, env.stream);
                        buffer.check_errors();
                        check_round_trip(it, out, "graph replay", replay);
                    }
                    env.communicator->barrier(std::chrono::seconds(30));
                    SY_CUDA_CHECK(cudaGraphExecDestroy(exec));
                    SY_CUDA_CHECK(cudaGraphDestroy(graph));
                    if (env.rank == 0)
                        std::printf("  %s%s: 20 graph replays with new routing, all exact\n",
                                    rc.name().c_str(), caller_stream ? " (ops on the caller's stream)" : "");
                });
            });
        }
}

SY_TEST(HighThroughputSoak, ThousandIterationsWithChangingRouting) {
    require_gpus(1);
    const int max_gpus = std::min(2, cuda_device_count());
    for (int gpus = 1; gpus <= max_gpus; ++gpus) {
        run_ranks(4, gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, soak_config());
            dump_workspace_on_failure(buffer, [&] {
                Inputs inputs;
                buffer.ht_load_kernels(inputs.dispatch_args(env.device, 4 * kExpertsPerRank));
                env.communicator->barrier(std::chrono::seconds(30));
                std::vector<uint16_t> out(size_t(kTokens) * kHidden);
                // A host step that takes over a second is reported: with co-located ranks a step
                // that waits for the whole device holds back this rank's next op while its peers'
                // kernels wait for it (DESIGN.md §4, rule 2 for ranks that share a GPU).
                auto timed = [&](const char* step, int iteration, auto&& body) {
                    const auto start = std::chrono::steady_clock::now();
                    body();
                    const double seconds =
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                    if (seconds > 1.0)
                        std::printf("  rank %d iteration %d: host step '%s' took %.1f s\n", env.rank,
                                    iteration, step, seconds);
                };
                for (int iteration = 0; iteration < 1000; ++iteration) {
                    const Iteration it = make_iteration(env.rank, 4, 1000 + iteration);
                    timed("load inputs", iteration, [&] { inputs.load(it, env.stream); });
                    DispatchResult dispatched;
                    timed("dispatch", iteration, [&] {
                        dispatched = buffer.dispatch(inputs.dispatch_args(env.device, 4 * kExpertsPerRank),
                                                     env.stream);
                    });
                    CombineResult combined;
                    timed("combine", iteration, [&] {
                        combined = combine_into_out(buffer, inputs, dispatched, env.device, env.stream);
                    });
                    timed("copy out and synchronize", iteration, [&] { inputs.copy_out(out, env.stream); });
                    timed("release outputs", iteration, [&] {
                        dispatched = DispatchResult();
                        combined = CombineResult();
                    });
                    buffer.check_errors();  // a recorded error explains wrong data: raise it first
                    check_round_trip(it, out, "soak", iteration);
                }
                buffer.synchronize();
                if (env.rank == 0)
                    std::printf("  EP4 on %d GPU(s): 1000 dispatch+combine iterations exact\n", gpus);
            });
        });
    }
}

SY_TEST(HighThroughputDeterminism, TwoRunsBitIdentical) {
    require_gpus(1);
    run_ranks(4, std::min(2, cuda_device_count()), [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, soak_config());
        Inputs inputs;
        const auto contiguous_args = [&] {
            DispatchArgs args = inputs.dispatch_args(env.device, 4 * kExpertsPerRank);
            args.layout = RecvLayout::kExpertContiguous;
            args.expert_alignment = 8;
            args.zero_padding = true;
            return args;
        };
        buffer.ht_load_kernels(contiguous_args());
        env.communicator->barrier(std::chrono::seconds(30));
        const Iteration it = make_iteration(env.rank, 4, 7);
        std::vector<uint8_t> runs[2];
        for (int run = 0; run < 2; ++run) {
            inputs.load(it, env.stream);
            DispatchResult dispatched = buffer.dispatch(contiguous_args(), env.stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            const TensorView& x = dispatched.recv_x.view();
            std::vector<uint8_t> bytes(size_t(x.numel()) * 2);
            SY_CUDA_CHECK(cudaMemcpy(bytes.data(), x.ptr(), bytes.size(), cudaMemcpyDeviceToHost));
            runs[run] = bytes;
            buffer.check_errors();
            env.communicator->barrier(std::chrono::seconds(30));
        }
        SY_CHECK(runs[0] == runs[1]);
    });
}

// A small EP2 case for compute-sanitizer (memcheck / racecheck): `gpu_test_ht_graph_soak Sanitizer`.
SY_TEST(HighThroughputSanitizer, SmallEp2RoundTrip) {
    require_gpus(1);
    run_ranks(2, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, soak_config());
        Inputs inputs;
        buffer.ht_load_kernels(inputs.dispatch_args(env.device, 2 * kExpertsPerRank));
        env.communicator->barrier(std::chrono::seconds(30));
        std::vector<uint16_t> out(size_t(kTokens) * kHidden);
        for (int iteration = 0; iteration < 3; ++iteration) {
            const Iteration it = make_iteration(env.rank, 2, 50 + iteration);
            inputs.load(it, env.stream);
            auto results = round_trip(buffer, inputs, env.device, 2 * kExpertsPerRank, env.stream);
            inputs.copy_out(out, env.stream);
            buffer.check_errors();  // a recorded error explains wrong data: raise it first
            check_round_trip(it, out, "sanitizer case", iteration);
        }
    });
}

SY_TEST_MAIN()
