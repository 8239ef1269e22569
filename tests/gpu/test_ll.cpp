// Low-latency dispatch and combine against the CPU reference (weighted combine, flat and
// hierarchical), bit for bit, for
// EP 1/2/4/8: hidden 2048..8192 (incl. 2560, 7168), top-k 1..9, tokens 0, 1, odd and T_ll, all
// tokens to one expert, -1 slots, fp8 with fp32 or UE8M0 scales and bf16, int32 and int64 ids, the
// masked and the expert-major contiguous layout (alignments 1, 8, 16, 128; padding rows zeroed
// or not), hook mode, caller-provided out, zero-copy combine input, the statistics, and
// asynchronous ops (OpOrder::async) waited for through their OpEvents.
#include <cstdio>
#include <functional>
#include <stdexcept>

#include "ll_test_support.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::ll;

namespace {

// How a round runs (the case says its layout). Hook rounds set every output byte to 0xff between
// the send and the receive half (poison_dispatch_outputs): the receive must write what is checked.
struct Options {
    bool hook = false;
    bool caller_out = false;
    bool zero_copy = false;
    bool stats = false;
    bool hierarchical = false;  // weights given to the dispatch, partials per (token, rank)
    bool async = false;         // OpOrder::async: the stream waits on the ops' `done` events instead
};

// Per-rank device scratch of the rounds, allocated once before the first op. Nothing may be
// cudaMalloc'ed or cudaFree'd between ops: with several ranks per GPU (one process, one context),
// cudaFree waits for every kernel on the device, including a peer's LL kernel that already waits
// for this rank's next op, so the two ranks deadlock until the LL timeout fires.
struct RoundScratch {
    DeviceArray<int32_t> expert_stats;
    DeviceArray<int64_t> wait_stats;
    DeviceArray<uint16_t> out;
    RoundScratch(int max_local_experts, int num_ranks, size_t out_elements)
        : expert_stats(max_local_experts), wait_stats(num_ranks), out(out_elements) {}
};

// One rank of a two-rank case: its buffer, inputs and round scratch, all allocated before the
// ranks meet on the host (no rank's first op may wait for a peer that is still allocating).
struct TwoRankSetup {
    Buffer buffer;
    RankInputs inputs;
    RoundScratch scratch;
    TwoRankSetup(const Case& c, RankEnv& env)
        : buffer(env.communicator, env.device, ll_config(c)),
          inputs(c, 2, env.device),
          scratch(c.experts / 2, 2, size_t(c.max_tokens) * c.hidden) {
        // Kernels loaded before either rank's first op (DESIGN.md §4, rule 7): a load while the
        // co-located peer's kernel waits for this rank stalls until the timeout.
        buffer.ll_load_kernels(inputs.dispatch_args());
        SY_CUDA_CHECK(cudaDeviceSynchronize());
        env.communicator->barrier(std::chrono::seconds(60));
    }
};

// One dispatch + combine round on one rank, checked against the scenario.

void run_round(Buffer& buffer, RankEnv& env, const Scenario& sc, RankInputs& inputs, RoundScratch& scratch,
               const Options& options, const std::string& what) {
    const int R = env.num_ranks, L = sc.local_experts();
    inputs.load(sc, env.rank, env.stream);
    DeviceArray<int32_t>& expert_stats = scratch.expert_stats;
    DeviceArray<int64_t>& wait_stats = scratch.wait_stats;
    SY_CUDA_CHECK(cudaMemsetAsync(expert_stats.data(), 0, sizeof(int32_t) * L, env.stream));
    SY_CUDA_CHECK(cudaMemsetAsync(wait_stats.data(), 0, sizeof(int64_t) * R, env.stream));

    LowLatencyDispatchArgs dispatch =
        options.hierarchical ? inputs.hierarchical_dispatch_args() : inputs.dispatch_args();
    dispatch.return_recv_hook = options.hook;
    if (options.stats) {
        dispatch.cumulative_local_expert_recv_stats =
            TensorView::contiguous(expert_stats.data(), DType::kInt32, {L}, Device::cuda(env.device));
        dispatch.wait_time_stats =
            TensorView::contiguous(wait_stats.data(), DType::kInt64, {R}, Device::cuda(env.device));
    }
    dispatch.order.async = options.async;
    LowLatencyDispatchResult dispatched = buffer.ll_dispatch(dispatch, env.stream);
    SY_CHECK_EQ(bool(dispatched.receive), options.hook);
    SY_CHECK(dispatched.done.valid());
    // Asynchronous: the stream did not wait for the op; it does now, through the op's event (the
    // checks below read the outputs on this stream).
    if (options.async) dispatched.done.wait(env.stream);
    if (options.hook) {
        poison_dispatch_outputs(dispatched, env.stream);
        const OpEvent received = dispatched.receive();
        SY_CHECK(received.valid());
        if (options.async) received.wait(env.stream);
    }
    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
    buffer.check_errors();
    check_dispatch(sc, env.rank, dispatched, env.stream, what + " dispatch");
    if (options.stats) {
        const auto stats = download<int32_t>(expert_stats.data(), L, env.stream);
        for (int e = 0; e < L; ++e)
            SY_CHECK_EQ(stats[e], sc.dispatched.outputs[env.rank].num_tokens_per_expert[e]);
        for (int64_t ns : download<int64_t>(wait_stats.data(), R, env.stream)) SY_CHECK(ns >= 0);
    }

    LowLatencyCombineArgs combine =
        options.hierarchical ? inputs.hierarchical_combine_args(R) : inputs.combine_args(R);
    combine.return_recv_hook = options.hook;
    DeviceArray<uint16_t>& out = scratch.out;
    SY_CHECK(out.size() >= size_t(inputs.tokens) * sc.c.hidden);
    if (options.caller_out)
        combine.out = TensorView::contiguous(out.data(), DType::kBFloat16, {inputs.tokens, sc.c.hidden},
                                             Device::cuda(env.device));
    if (options.zero_copy) {
        const TensorView area = buffer.ll_combine_input(*dispatched.handle);
        SY_CUDA_CHECK(cudaMemcpyAsync(area.ptr(), inputs.y.data(), inputs.y.size() * 2,
                                      cudaMemcpyDeviceToDevice, env.stream));
        combine.y = TensorView();
        combine.zero_copy = true;
    }
    combine.order.async = options.async;
    LowLatencyCombineResult combined = buffer.ll_combine(combine, dispatched.handle, env.stream);
    if (options.async) combined.done.wait(env.stream);
    if (options.hook) {
        const OpEvent received = combined.receive();
        if (options.async) received.wait(env.stream);
    }
    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
    buffer.check_errors();
    if (options.caller_out) SY_CHECK(combined.out.view().ptr() == out.data());
    check_combine(sc, env.rank, combined.out, env.stream, what + " combine", options.hierarchical);
}

std::vector<Case> main_cases() {
    std::vector<Case> cases;
    Case a;  // DeepSeek-like hidden, fp32 scales, T_ll tokens everywhere
    a.hidden = 7168, a.topk = 8, a.experts = 32, a.seed = 11;
    cases.push_back(a);
    Case b;  // 2560, top-9, UE8M0, int32 ids, tokens 1 / 0 / odd / T_ll; contiguous, padding unchecked
    b.hidden = 2560, b.topk = 9, b.experts = 32, b.format = ScaleFormat::kUE8M0, b.index_int64 = false,
    b.tokens = {1, 0, 17, 32}, b.seed = 12, b.contiguous_alignment = 16;
    cases.push_back(b);
    Case c;  // bf16 passthrough, top-1
    c.hidden = 2048, c.topk = 1, c.experts = 16, c.use_fp8 = false, c.tokens = {32, 5, 0, 1}, c.seed = 13;
    cases.push_back(c);
    Case d;  // all tokens to one expert, 8192; contiguous without padding
    d.hidden = 8192, d.topk = 4, d.experts = 32, d.routing = Routing::kOneExpert, d.seed = 14,
    d.contiguous_alignment = 1;
    cases.push_back(d);
    Case e;  // many -1 slots, UE8M0 at 4096, top-2; contiguous, padding unchecked
    e.hidden = 4096, e.topk = 2, e.experts = 64, e.format = ScaleFormat::kUE8M0, e.empty_slot_per_mille = 500,
    e.seed = 15, e.contiguous_alignment = 8;
    cases.push_back(e);
    Case f;  // no tokens anywhere
    f.hidden = 2048, f.topk = 3, f.experts = 16, f.tokens = {0}, f.seed = 16;
    cases.push_back(f);
    return cases;
}

// The contiguous layout with zero_padding: alignments 128 (more padding than rows), 16, 8, 64 and
// 32, top-k 7, 9, 1, 6, 3 and 5 (5 to 7 run nowhere else), fp8 with fp32 and UE8M0 scales and
// bf16, a hidden size with a partial scale block, tokens 0 / 1 / odd / T_ll, all tokens to one
// expert, no tokens anywhere.
std::vector<Case> zero_padding_cases() {
    std::vector<Case> cases;
    Case a;  // DeepSeek-like hidden, fp32 scales, top-7
    a.hidden = 7168, a.topk = 7, a.experts = 32, a.seed = 51, a.contiguous_alignment = 128;
    cases.push_back(a);
    Case b;  // UE8M0, top-9, int32 ids, uneven tokens
    b.hidden = 2560, b.topk = 9, b.experts = 32, b.format = ScaleFormat::kUE8M0, b.index_int64 = false,
    b.tokens = {1, 0, 17, 32}, b.seed = 52, b.contiguous_alignment = 16;
    cases.push_back(b);
    Case c;  // bf16 passthrough, top-1
    c.hidden = 2048, c.topk = 1, c.experts = 16, c.use_fp8 = false, c.tokens = {32, 5, 0, 1}, c.seed = 53,
    c.contiguous_alignment = 8;
    cases.push_back(c);
    Case d;  // all tokens to one expert; 17 fp32 scale words (a partial block); top-6
    d.hidden = 2064, d.topk = 6, d.experts = 32, d.routing = Routing::kOneExpert, d.seed = 54,
    d.contiguous_alignment = 64;
    cases.push_back(d);
    Case e;  // no tokens anywhere: no rows, no padding
    e.hidden = 2048, e.topk = 3, e.experts = 16, e.tokens = {0}, e.seed = 55, e.contiguous_alignment = 16;
    cases.push_back(e);
    Case f;  // top-5, UE8M0
    f.hidden = 4096, f.topk = 5, f.experts = 16, f.format = ScaleFormat::kUE8M0, f.seed = 56,
    f.contiguous_alignment = 32;
    cases.push_back(f);
    for (Case& z : cases) z.zero_padding = true;
    return cases;
}

// One round per case, in order, on every standard rank configuration, with options_of(case
// index). All device memory and every case's kernels are set up before any rank's first op. The
// cases share one buffer, so they share its T_ll (Case::max_tokens).
void run_cases(const std::vector<Case>& cases, const std::function<Options(size_t)>& options_of) {
    for (const Case& c : cases)
        if (c.max_tokens != cases.front().max_tokens)
            throw std::logic_error("run_cases: the cases of one buffer must share max_tokens");
    for (const RankConfig& rc : standard_rank_configs()) {
        std::printf("  %s\n", rc.name().c_str());
        std::vector<Scenario> scenarios;
        for (const Case& c : cases) scenarios.push_back(make_scenario(c, rc.ranks));
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Case buffer_case;
            buffer_case.max_tokens = cases.front().max_tokens;
            BufferConfig config = ll_config(buffer_case);
            config.max_hidden = 8192;
            config.ll_zero_copy_combine = true;
            Buffer buffer(env.communicator, env.device, config);
            // All device memory of the test is allocated before the first op (see RoundScratch).
            std::vector<RankInputs> all_inputs;
            all_inputs.reserve(cases.size());
            int max_local_experts = 1, max_tokens = 1;
            for (const Case& c : cases) {
                all_inputs.emplace_back(c, rc.ranks, env.device);
                max_local_experts = std::max(max_local_experts, c.experts / rc.ranks);
                max_tokens = std::max(max_tokens, c.max_tokens);
            }
            RoundScratch scratch(max_local_experts, rc.ranks, size_t(max_tokens) * config.max_hidden);
            // Every case's kernels (both halves and each half) are loaded before any rank's first
            // op: with co-located ranks a load while a peer's kernel waits stalls (DESIGN.md §4,
            // rule 7).
            for (const RankInputs& inputs : all_inputs) buffer.ll_load_kernels(inputs.dispatch_args());
            SY_CUDA_CHECK(cudaDeviceSynchronize());
            env.communicator->barrier(std::chrono::seconds(60));
            for (size_t i = 0; i < cases.size(); ++i) {
                const Options options = options_of(i);
                run_round(buffer, env, scenarios[i], all_inputs[i], scratch, options,
                          rc.name() + " " + describe(cases[i]) + (options.hook ? " hook" : "") +
                              (options.hierarchical ? " hierarchical" : "") +
                              (options.async ? " async" : ""));
            }
        });
    }
}

}  // namespace

SY_TEST(LowLatency, DispatchCombineMatchReference) {
    require_gpus(1);
    // Cases 1, 3 and 4 are contiguous (not zero-copy: that needs the masked layout).
    run_cases(main_cases(), [](size_t i) {
        Options options;
        options.hook = i % 2 == 1;
        options.caller_out = i % 3 == 1;
        options.zero_copy = i % 3 == 2;
        options.stats = i == 0;
        options.async = i == 2 || i == 3;  // one round without hook, one with
        return options;
    });
}

// The hierarchical combine (partials per (token, rank), weights carried by the dispatch) over the
// same cases: top-k 1 to 9, -1 slots, all tokens to one expert, both layouts, hook mode, zero-copy
// input and caller-provided out. Then the bench's shape on its own buffer (T_ll 128, hidden 7168,
// top-8, 1 and 128 tokens): at 128 tokens the partials outnumber the grid's warps and the send
// takes its seven-step items (one-step ones at 1 token and in most main cases).
SY_TEST(LowLatency, HierarchicalCombineMatchesReference) {
    require_gpus(1);
    run_cases(main_cases(), [](size_t i) {
        Options options;
        options.hierarchical = true;
        options.hook = i % 2 == 0;
        options.caller_out = i % 3 == 0;
        options.zero_copy = i % 3 == 2;
        return options;
    });
    Case wide;
    wide.hidden = 7168, wide.topk = 8, wide.experts = 64, wide.max_tokens = 128, wide.seed = 17;
    Case one_token = wide;
    one_token.tokens = {1}, one_token.seed = 18;
    run_cases({wide, one_token}, [](size_t i) {
        Options options;
        options.hierarchical = true;
        options.hook = i == 1;
        return options;
    });
}

// zero_padding: the padding rows of every contiguous segment are zero, bit for bit, in payload
// and scales. Hook rounds (cases 0, 2 and 4) poison the outputs between the halves, so a padding
// row the receive half did not zero fails.
SY_TEST(LowLatency, ContiguousZeroPadding) {
    require_gpus(1);
    run_cases(zero_padding_cases(), [](size_t i) {
        Options options;
        options.hook = i % 2 == 0;
        options.caller_out = i % 2 == 1;
        options.stats = i == 1;
        return options;
    });
}

// Alternate configurations launch on the caller's stream (BufferConfig::launch_on_caller_stream).
SY_TEST(LowLatency, HookModeTwoDispatchesInFlight) {
    require_gpus(1);
    int index = 0;
    for (const RankConfig& rc : standard_rank_configs()) {
        if (rc.ranks == 1) continue;
        const bool caller_stream = index++ % 2 == 1;
        std::printf("  %s%s\n", rc.name().c_str(), caller_stream ? " (ops on the caller's stream)" : "");
        Case ca, cb;
        ca.hidden = 7168, ca.topk = 8, ca.experts = 32, ca.seed = 21;
        cb.hidden = 7168, cb.topk = 8, cb.experts = 32, cb.seed = 22, cb.format = ScaleFormat::kUE8M0;
        const Scenario sa = make_scenario(ca, rc.ranks), sb = make_scenario(cb, rc.ranks);
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            BufferConfig config = ll_config(ca);
            config.launch_on_caller_stream = caller_stream;
            Buffer buffer(env.communicator, env.device, config);
            RankInputs ia(ca, rc.ranks, env.device), ib(cb, rc.ranks, env.device);
            // Both ops' kernels (each half, both reductions) loaded before any rank's first op
            // (DESIGN.md §4, rule 7). Without this the case once stalled: a rank loading the combine
            // kernels waited for its peer's combine, which waited for this rank, until the timeout.
            buffer.ll_load_kernels(ia.dispatch_args());
            buffer.ll_load_kernels(ib.hierarchical_dispatch_args());
            SY_CUDA_CHECK(cudaDeviceSynchronize());
            env.communicator->barrier(std::chrono::seconds(60));
            ia.load(sa, env.rank, env.stream);
            ib.load(sb, env.rank, env.stream);
            for (int round = 0; round < 3; ++round) {
                // Op B carries its weights and combines hierarchically.
                LowLatencyDispatchArgs da = ia.dispatch_args(), db = ib.hierarchical_dispatch_args();
                da.return_recv_hook = db.return_recv_hook = true;
                auto ra = buffer.ll_dispatch(da, env.stream);
                auto rb = buffer.ll_dispatch(db, env.stream);
                ra.receive();
                rb.receive();
                SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                buffer.check_errors();
                check_dispatch(sa, env.rank, ra, env.stream, "op A");
                check_dispatch(sb, env.rank, rb, env.stream, "op B");
                LowLatencyCombineArgs ca_args = ia.combine_args(rc.ranks),
                                      cb_args = ib.hierarchical_combine_args(rc.ranks);
                ca_args.return_recv_hook = cb_args.return_recv_hook = true;
                auto oa = buffer.ll_combine(ca_args, ra.handle, env.stream);
                auto ob = buffer.ll_combine(cb_args, rb.handle, env.stream);
                oa.receive();
                ob.receive();
                SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                buffer.check_errors();
                check_combine(sa, env.rank, oa.out, env.stream, "combine A");
                check_combine(sb, env.rank, ob.out, env.stream, "combine B (hierarchical)", true);
            }
        });
    }
}

// A small EP2 case for compute-sanitizer (memcheck / racecheck): `gpu_test_ll Sanitizer`. One
// round plain, one in hook mode and one with the hierarchical combine, fp8 with fp32 scales, a few
// tokens.
SY_TEST(LowLatencySanitizer, SmallEp2RoundTrip) {
    require_gpus(1);
    Case c;
    c.hidden = 2048, c.topk = 4, c.experts = 16, c.tokens = {5, 3}, c.seed = 31;
    const Scenario sc = make_scenario(c, 2);
    run_ranks(2, 1, [&](RankEnv& env) {
        TwoRankSetup setup(c, env);
        Buffer& buffer = setup.buffer;
        RankInputs& inputs = setup.inputs;
        RoundScratch& scratch = setup.scratch;
        for (int round = 0; round < 3; ++round) {
            Options options;
            options.hook = round == 1;
            options.hierarchical = round == 2;
            options.stats = true;
            run_round(buffer, env, sc, inputs, scratch, options,
                      "sanitizer case round " + std::to_string(round));
        }
    });
}

// An id outside [-1, E) in one rank's device top-k table: that rank's dispatch raises
// InvalidArgument naming the entry; it still arrives, with headers that announce its failure, so
// its peer's dispatch stops at once with a PeerFailedError naming it (not a timeout); after
// reset() on both ranks the buffer works again.
SY_TEST(LowLatency, InvalidExpertIdOnOneRank) {
    require_gpus(1);
    Case c;
    c.hidden = 2048, c.topk = 4, c.experts = 16, c.tokens = {8}, c.seed = 41;
    const Scenario sc = make_scenario(c, 2);
    run_ranks(2, 1, [&](RankEnv& env) {
        TwoRankSetup setup(c, env);
        Buffer& buffer = setup.buffer;
        RankInputs& inputs = setup.inputs;
        RoundScratch& scratch = setup.scratch;
        inputs.load(sc, env.rank, env.stream);
        if (env.rank == 1) {
            static const int64_t kBad = 99;  // E = 16: token 2, slot 1
            SY_CUDA_CHECK(cudaMemcpyAsync(inputs.idx64.data() + 2 * c.topk + 1, &kBad, sizeof(kBad),
                                          cudaMemcpyHostToDevice, env.stream));
        }
        LowLatencyDispatchResult dispatched = buffer.ll_dispatch(inputs.dispatch_args(), env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));  // the op (on the comm stream) is done too
        if (env.rank == 1) {
            SY_CHECK_THROWS_WITH(buffer.check_errors(), InvalidArgument,
                                 "topk_idx[2][1] = 99 is outside [-1, 16)");
        } else {
            bool named = false;
            try {
                buffer.check_errors();
            } catch (const PeerFailedError& error) {
                named = error.peer() == 1 && error.phase() == "low-latency dispatch";
                SY_CHECK_MSG(named, error.what());
            }
            SY_CHECK_MSG(named, "rank 0 did not raise PeerFailedError naming rank 1");
        }
        dispatched = {};
        buffer.reset();
        Options options;
        run_round(buffer, env, sc, inputs, scratch, options, "after reset");
    });
}

SY_TEST(LowLatency, RejectsBadArguments) {
    require_gpus(1);
    run_ranks(1, 1, [&](RankEnv& env) {
        Case c;
        c.hidden = 2048, c.topk = 4, c.experts = 16;
        Buffer buffer(env.communicator, env.device, ll_config(c));
        RankInputs inputs(c, 1, env.device);
        inputs.tokens = c.max_tokens;
        LowLatencyDispatchArgs args = inputs.dispatch_args();
        args.x = TensorView::contiguous(inputs.x.data(), DType::kBFloat16, {c.max_tokens + 1, c.hidden},
                                        Device::cuda(env.device));
        SY_CHECK_THROWS_WITH(buffer.ll_dispatch(args, env.stream), InvalidArgument, "ll_max_tokens_per_rank");
        args = inputs.dispatch_args();
        args.num_experts = 0;
        SY_CHECK_THROWS_WITH(buffer.ll_dispatch(args, env.stream), InvalidArgument, "num_experts");
        args = inputs.dispatch_args();
        args.x.dtype = DType::kFloat32;
        SY_CHECK_THROWS_WITH(buffer.ll_dispatch(args, env.stream), InvalidArgument, "x must be bf16");
        args = inputs.dispatch_args();
        args.zero_padding = true;  // the masked layout has no padding rows
        SY_CHECK_THROWS_WITH(buffer.ll_dispatch(args, env.stream), InvalidArgument,
                             "zero_padding applies to the expert-major contiguous layout only");
        SY_CHECK_THROWS_WITH(buffer.ll_combine(inputs.combine_args(1), nullptr, env.stream), InvalidArgument,
                             "handle");
        args = inputs.hierarchical_dispatch_args();
        args.topk_weights.dtype = DType::kBFloat16;
        SY_CHECK_THROWS_WITH(buffer.ll_dispatch(args, env.stream), InvalidArgument,
                             "topk_weights must be fp32");
        // A hierarchical combine needs the dispatch's weights, and only those (valid inputs, so
        // the ops that are accepted run cleanly).
        inputs.load(make_scenario(c, 1), 0, env.stream);
        LowLatencyDispatchResult plain = buffer.ll_dispatch(inputs.dispatch_args(), env.stream);
        SY_CHECK_THROWS_WITH(buffer.ll_combine(inputs.hierarchical_combine_args(1), plain.handle, env.stream),
                             InvalidArgument, "pass topk_weights to ll_dispatch");
        LowLatencyCombineResult flat = buffer.ll_combine(inputs.combine_args(1), plain.handle, env.stream);
        LowLatencyDispatchResult weighted =
            buffer.ll_dispatch(inputs.hierarchical_dispatch_args(), env.stream);
        LowLatencyCombineArgs both = inputs.hierarchical_combine_args(1);
        both.topk_weights = inputs.weights_view();
        SY_CHECK_THROWS_WITH(buffer.ll_combine(both, weighted.handle, env.stream), InvalidArgument,
                             "leave the combine's topk_weights empty");
        flat = buffer.ll_combine(inputs.combine_args(1), weighted.handle, env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
    });
}

SY_TEST_MAIN()
