// Low-latency ops under CUDA-graph capture and replay (plain and hook mode, new data in the same
// input buffers every replay; the masked layout, and the contiguous one with zero_padding and the
// hierarchical combine),
// masking of a rank that stops taking part, a timeout without masking (TimeoutError, then a
// collective reset), and a 1,000-iteration soak with routing that changes every iteration. Every
// output is compared with the CPU reference.
#include <cstdio>

#include "common/workspace_dump.hpp"
#include "ll_test_support.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::ll;

namespace {

// Dispatch + combine of the inputs currently in `inputs` (no checks).
struct Round {
    LowLatencyDispatchResult dispatched;
    LowLatencyCombineResult combined;
    bool hierarchical = false;
};

Round issue_round(Buffer& buffer, RankEnv& env, const RankInputs& inputs, bool hook,
                  bool hierarchical = false) {
    Round round;
    round.hierarchical = hierarchical;
    LowLatencyDispatchArgs dispatch =
        hierarchical ? inputs.hierarchical_dispatch_args() : inputs.dispatch_args();
    dispatch.return_recv_hook = hook;
    round.dispatched = buffer.ll_dispatch(dispatch, env.stream);
    if (hook) round.dispatched.receive();
    LowLatencyCombineArgs combine =
        hierarchical ? inputs.hierarchical_combine_args(env.num_ranks) : inputs.combine_args(env.num_ranks);
    combine.return_recv_hook = hook;
    round.combined = buffer.ll_combine(combine, round.dispatched.handle, env.stream);
    if (hook) round.combined.receive();
    return round;
}

void check_round(Buffer& buffer, RankEnv& env, const Scenario& sc, const Round& round,
                 const std::string& what) {
    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
    buffer.check_errors();
    check_dispatch(sc, env.rank, round.dispatched, env.stream, what);
    check_combine(sc, env.rank, round.combined.out, env.stream,
                  what + (round.hierarchical ? " (hierarchical)" : ""), round.hierarchical);
}

// Loads the LL kernels of every case variant in `cases` before any rank's first op: with ranks
// sharing a GPU, a kernel load while a peer's kernel waits for this rank stalls both until the
// timeout (DESIGN.md §4, rule 7). Leaves `inputs.c` as it found it.
void load_kernels(Buffer& buffer, RankInputs& inputs, const std::vector<Case>& cases) {
    const Case kept = inputs.c;
    for (const Case& c : cases) {
        inputs.c = c;
        buffer.ll_load_kernels(inputs.dispatch_args());
    }
    inputs.c = kept;
}

// Captures one round of `c`'s shape (plain and hook mode) and replays it with 4 new scenarios.
// Before each replay the captured outputs are set to 0xff: the replay must write every checked
// byte (valid rows and, with zero_padding, the contiguous padding) from device-side counts.
void check_graph_replay(Case c, bool hierarchical = false) {
    for (const RankConfig& rc : standard_rank_configs()) {
        if (rc.ranks == 1) continue;
        std::printf("  %s %s\n", rc.name().c_str(), describe(c).c_str());
        std::vector<Scenario> scenarios;
        for (int i = 0; i < 5; ++i) {
            c.seed = 31 + i;
            scenarios.push_back(make_scenario(c, rc.ranks));
        }
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, ll_config(c));
            RankInputs inputs(c, rc.ranks, env.device);
            load_kernels(buffer, inputs, {c});
            // Host calls that may synchronize the device (cudaMalloc above, graph instantiation and
            // destruction below) must not overlap a co-located rank's kernel that waits for this
            // rank: every rank finishes them before any rank launches (DESIGN.md §4, rule 2).
            env.communicator->barrier(std::chrono::seconds(60));
            dump_workspace_on_failure(buffer, [&] {
                for (bool hook : {false, true}) {
                    const std::string mode = hook ? "graph (hook)" : "graph";
                    inputs.load(scenarios[0], env.rank, env.stream);
                    // Warm-up outside the capture compiles and loads the kernels.
                    check_round(buffer, env, scenarios[0],
                                issue_round(buffer, env, inputs, hook, hierarchical), mode + " warm-up");

                    cudaGraph_t graph = nullptr;
                    cudaGraphExec_t exec = nullptr;
                    SY_CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
                    Round captured = issue_round(buffer, env, inputs, hook, hierarchical);
                    SY_CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
                    SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph,
                                                             cudaGraphInstantiateFlagAutoFreeOnLaunch));
                    env.communicator->barrier(std::chrono::seconds(60));
                    for (int i = 1; i < 5; ++i) {
                        inputs.load(scenarios[i], env.rank, env.stream);
                        poison_dispatch_outputs(captured.dispatched, env.stream);
                        SY_CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
                        check_round(buffer, env, scenarios[i], captured,
                                    mode + " replay " + std::to_string(i));
                    }
                    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                    env.communicator->barrier(std::chrono::seconds(60));
                    SY_CUDA_CHECK(cudaGraphExecDestroy(exec));
                    SY_CUDA_CHECK(cudaGraphDestroy(graph));
                    env.communicator->barrier(std::chrono::seconds(60));
                }
            });
        });
    }
}

}  // namespace

SY_TEST(LowLatency, CudaGraphReplay) {
    require_gpus(1);
    Case c;
    c.hidden = 2560, c.topk = 8, c.experts = 32;
    check_graph_replay(c);
}

// The contiguous layout with zero_padding under capture: the padding's extent comes from the
// device-side counts of each replay (alignment 32: at EP2, more padding rows than real ones). Its
// combines are hierarchical: the per-record routing is read from device memory at each replay.
SY_TEST(LowLatency, CudaGraphReplayContiguousZeroPadding) {
    require_gpus(1);
    Case c;
    c.hidden = 2560, c.topk = 8, c.experts = 32, c.contiguous_alignment = 32, c.zero_padding = true;
    check_graph_replay(c, true);
}

SY_TEST(LowLatency, MasksUnresponsiveRank) {
    require_gpus(1);
    const int gpus = cuda_device_count() >= 2 ? 2 : 1;
    const int ranks = 4, absent = 3;
    Case c;
    c.hidden = 2048, c.topk = 4, c.experts = 16, c.seed = 41;
    const Scenario everyone = make_scenario(c, ranks);
    c.absent.assign(ranks, false);
    c.absent[absent] = true;
    c.seed = 42;
    const Scenario without_first = make_scenario(c, ranks);
    c.seed = 43;
    const Scenario without_second = make_scenario(c, ranks);
    run_ranks(ranks, gpus, [&](RankEnv& env) {
        {
            // Load every kernel this test uses (plain and hook mode) before the 0.5 s timeout
            // applies: a first use JIT-compiles, which takes far longer than 0.5 s, and a rank
            // still compiling looks unresponsive to its peers, which would mask a live rank (the
            // masked round runs hook mode on even ranks, kernels not used before in this test).
            Buffer warm(env.communicator, env.device, ll_config(c));
            RankInputs inputs(c, ranks, env.device);
            inputs.load(everyone, env.rank, env.stream);
            load_kernels(warm, inputs, {c});
            // Every rank's allocations (cudaMalloc may wait for the device) are done before any
            // rank's kernel waits for its peers (DESIGN.md §4, rule 2).
            env.communicator->barrier(std::chrono::seconds(60));
            for (bool hook : {false, true})
                check_round(warm, env, everyone, issue_round(warm, env, inputs, hook),
                            hook ? "warm-up (hook)" : "warm-up");
        }
        env.communicator->barrier(std::chrono::seconds(60));
        BufferConfig config = ll_config(c);
        config.ll_mask_unresponsive_ranks = true;
        config.timeout_seconds = 0.5;
        Buffer buffer(env.communicator, env.device, config);
        RankInputs inputs(c, ranks, env.device);
        inputs.load(everyone, env.rank, env.stream);
        env.communicator->barrier(std::chrono::seconds(60));  // as above: allocations first
        check_round(buffer, env, everyone, issue_round(buffer, env, inputs, false), "all ranks");
        SY_CHECK(buffer.ll_query_mask() == std::vector<int32_t>(ranks, 0));
        if (env.rank != absent) {
            // Rank `absent` stops taking part: the others mask it after the timeout and go on.
            inputs.load(without_first, env.rank, env.stream);
            DeviceArray<int64_t> wait_stats(ranks);
            wait_stats.fill_bytes(0);
            LowLatencyDispatchArgs dispatch = inputs.dispatch_args();
            dispatch.wait_time_stats =
                TensorView::contiguous(wait_stats.data(), DType::kInt64, {ranks}, Device::cuda(env.device));
            Round round;
            round.dispatched = buffer.ll_dispatch(dispatch, env.stream);
            round.combined =
                buffer.ll_combine(inputs.combine_args(ranks), round.dispatched.handle, env.stream);
            check_round(buffer, env, without_first, round, "rank 3 unresponsive");
            std::vector<int32_t> expected_mask(ranks, 0);
            expected_mask[absent] = 1;
            SY_CHECK(buffer.ll_query_mask() == expected_mask);
            SY_CHECK_MSG(wait_stats.download()[absent] >= 300000000,
                         "waited " << wait_stats.download()[absent] << " ns");
            // Later ops skip the masked rank without waiting.
            inputs.load(without_second, env.rank, env.stream);
            const auto start = std::chrono::steady_clock::now();
            // (Hierarchical combines: a masked rank's partials count as absent too.)
            check_round(buffer, env, without_second,
                        issue_round(buffer, env, inputs, env.rank % 2 == 0, /*hierarchical=*/true),
                        "rank 3 masked");
            SY_CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400));
            buffer.ll_set_mask(absent, false);
            SY_CHECK(buffer.ll_query_mask() == std::vector<int32_t>(ranks, 0));
            buffer.ll_set_mask(absent, true);
            SY_CHECK(buffer.ll_query_mask() == expected_mask);
            buffer.ll_clear_mask();
            SY_CHECK(buffer.ll_query_mask() == std::vector<int32_t>(ranks, 0));
        }
        env.communicator->barrier(std::chrono::seconds(60));
    });
}

SY_TEST(LowLatency, TimeoutWithoutMaskingIsAnError) {
    require_gpus(1);
    Case c;
    c.hidden = 2048, c.topk = 2, c.experts = 8, c.seed = 51;
    const Scenario sc = make_scenario(c, 2);
    run_ranks(2, 1, [&](RankEnv& env) {
        BufferConfig config = ll_config(c);
        config.timeout_seconds = 0.5;
        Buffer buffer(env.communicator, env.device, config);
        RankInputs inputs(c, 2, env.device);
        inputs.load(sc, env.rank, env.stream);
        load_kernels(buffer, inputs, {c});
        if (env.rank == 0) {
            buffer.ll_dispatch(inputs.dispatch_args(), env.stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            bool thrown = false;
            try {
                buffer.check_errors();
            } catch (const TimeoutError& error) {
                thrown = true;
                SY_CHECK_EQ(error.peer(), 1);
                SY_CHECK_EQ(error.phase(), std::string("low-latency dispatch"));
            }
            SY_CHECK(thrown);
        }
        buffer.reset();
        check_round(buffer, env, sc, issue_round(buffer, env, inputs, false), "after reset");
    });
}

SY_TEST(LowLatency, Soak1000Iterations) {
    require_gpus(1);
    const int gpus = cuda_device_count() >= 2 ? 2 : 1;
    Case base;
    base.hidden = 1024, base.topk = 4, base.experts = 8, base.max_tokens = 16;
    run_ranks(2, gpus, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, ll_config(base));
        RankInputs inputs(base, 2, env.device);
        std::vector<Case> variants;  // every kernel shape the iterations below use
        for (ScaleFormat format : {ScaleFormat::kFloat32, ScaleFormat::kUE8M0})
            for (bool use_fp8 : {false, true})
                for (bool index_int64 : {false, true}) {
                    Case v = base;
                    v.format = format, v.use_fp8 = use_fp8, v.index_int64 = index_int64;
                    variants.push_back(v);
                }
        load_kernels(buffer, inputs, variants);
        env.communicator->barrier(std::chrono::seconds(60));  // allocations done on every rank
        for (int iteration = 0; iteration < 1000; ++iteration) {
            Case c = base;
            c.seed = 1000 + iteration;  // new routing and data every iteration
            c.tokens = {int(mix(c.seed) % 17), int(mix(c.seed + 1) % 17)};
            c.format = iteration % 3 == 0 ? ScaleFormat::kUE8M0 : ScaleFormat::kFloat32;
            c.use_fp8 = iteration % 5 != 0;
            c.index_int64 = iteration % 2 == 0;
            const Scenario sc = make_scenario(c, 2);
            inputs.c = c;
            inputs.load(sc, env.rank, env.stream);
            check_round(buffer, env, sc,
                        issue_round(buffer, env, inputs, iteration % 4 == 1, iteration % 3 == 2),
                        "soak iteration " + std::to_string(iteration));
        }
    });
}

SY_TEST_MAIN()
