// LL across nodes on one GPU: ranks as threads, emulated nodes (BufferConfig::emulated_nodes), the
// emulated network between them. Every output is compared bit for bit with the CPU reference:
// dispatch outputs with the one-node contract (the same global ranks), the flat combine with
// reference::combine on one node's rules (rows per (token, k) come home unreduced), the
// hierarchical one with CombineOptions::num_nodes = N (node partials reduced on the forwarder).
//
// Cases (each names what it covers; a failure says which rank, topology, round and row differed):
//   WarmKernels                 every kernel the cases use, compiled in parallel (JIT disk cache)
//   Matrix{2x2,2x4,4x2,4x1}     fp8 (fp32 scales) masked, int64 ids, tokens T_ll/odd/1/0 per rank,
//                               flat and hierarchical, and the network bytes of each rank to each
//                               rail peer: each token once per destination node (prediction); the
//                               dispatch's statistics (rows per expert, time waited per source)
//   Bf16ContiguousZeroPadding   bf16 passthrough, contiguous layout (alignment 8, zero padding),
//                               int32 ids, flat and hierarchical, 2x2 and 4x2
//   Ue8m0Contiguous             fp8 with UE8M0 scales, contiguous, 2x4
//   HookModeTwoInFlight         send halves of two dispatches, then both receives; two combines
//                               likewise (both sets in flight), flat and hierarchical, 2x4 and 4x1
//   EmptyDispatchBetweenRounds  an empty dispatch before each round: dispatch and combine sequences
//                               of different parity (flat and hierarchical, 2x1 and 2x2)
//   DeepSeekRouting             top-8 of 256 experts, every slot valid, every rank full (the LL
//                               bench's routing at hidden 2048), flat and hierarchical, 2x1 and 2x2
//   GraphReplay                 dispatch + combine captured (plain and hook), replayed with new
//                               data into the same inputs, outputs poisoned before each replay, 2x2
//   AdversarialNetwork          every adversarial mode of the emulated network, 2x2 and 4x1
//   WithheldRankIsMasked        a rank's network deliveries withheld, masking on: every other rank's
//                               outputs equal the reference without the ranks it masked, and the
//                               silent rank is among them on every other node (4x1: exactly it)
//   WithheldRankWithoutMasking  masking off: the waiting ranks raise TimeoutError in phase
//                               'low-latency dispatch' naming the silent rank and its node "over the
//                               network"; reset() recovers
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <cstdio>
#include <mutex>
#include <thread>

#include "core/buffer_sizing.hpp"
#include "jit/jit.hpp"
#include "launch/ll_net_launch.hpp"
#include "ll_test_support.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/network.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::ll;

namespace {

struct Topo {
    int nodes;
    int per_node;
    int ranks() const { return nodes * per_node; }
    std::string name() const { return std::to_string(nodes) + "x" + std::to_string(per_node); }
};

// The cases' shapes: 32 experts (L = 8 at EP4, 4 at EP8), top-6, hidden 2048, T_ll = 24.
Case base_case() {
    Case c;
    c.hidden = 2048;
    c.topk = 6;
    c.experts = 32;
    c.max_tokens = 24;
    c.tokens = {24, 7, 1, 0, 24, 13, 24, 3};
    c.use_fp8 = true;
    c.format = ScaleFormat::kFloat32;
    c.index_int64 = true;
    return c;
}
Case bf16_contiguous_case() {
    Case c = base_case();
    c.use_fp8 = false;
    c.index_int64 = false;
    c.contiguous_alignment = 8;
    c.zero_padding = true;
    return c;
}
// DeepSeek-V3's routing at a small hidden size: top-8 of 256 experts (L = 128 at EP2), every slot
// valid, every rank at T_ll tokens: the routing `switchyard-bench ll --nodes 2` uses.
Case deepseek_routing_case() {
    Case c = base_case();
    c.topk = 8;
    c.experts = 256;
    c.tokens = {24};
    c.empty_slot_per_mille = 0;
    return c;
}
Case ue8m0_contiguous_case() {
    Case c = bf16_contiguous_case();
    c.use_fp8 = true;
    c.format = ScaleFormat::kUE8M0;
    c.zero_padding = false;
    return c;
}

BufferConfig nodes_config(const Case& c, const Topo& topo, uint32_t adversarial = 0) {
    BufferConfig config = ll_config(c);
    config.emulated_nodes = topo.nodes;
    config.network_adversarial = adversarial;
    config.timeout_seconds = 30;
    return config;
}

// The reference combines of a scenario: flat on one node's rules, hierarchical per node.
std::vector<reference::CombineOutput> expected_combine(const Scenario& sc, bool hierarchical, int nodes) {
    reference::CombineOptions options;
    options.weighted = true;
    options.hierarchical = hierarchical;
    options.num_nodes = hierarchical ? nodes : 1;
    options.absent_ranks = sc.c.absent;
    return reference::combine(sc.dispatched.routing, sc.expert_outputs, sc.home, options);
}

void check_out(const std::vector<uint16_t>& expected, int hidden, int rank, const DeviceTensor& out,
               cudaStream_t stream, const std::string& what) {
    const auto got = download<uint16_t>(out.view().ptr(), expected.size(), stream);
    for (size_t i = 0; i < expected.size(); ++i)
        if (got[i] != expected[i])
            SY_CHECK_MSG(false, what << ": rank " << rank << " combine token " << i / hidden << " channel "
                                     << i % hidden << ": " << got[i] << " vs " << expected[i]);
}

// Loads every kernel of the cases' shapes before any op (co-located ranks, DESIGN.md §4 rule 7).
void load_kernels(Buffer& buffer, RankInputs& inputs, const std::vector<Case>& cases) {
    const Case kept = inputs.c;
    for (const Case& c : cases) {
        inputs.c = c;
        buffer.ll_load_kernels(inputs.dispatch_args());
    }
    inputs.c = kept;
}

// One rank's buffer and inputs, made before the ranks meet (allocations first: rule 2).
struct RankSetup {
    Buffer buffer;
    RankInputs inputs;
    RankSetup(const Case& c, const Topo& topo, RankEnv& env, const BufferConfig& config)
        : buffer(env.communicator, env.device, config), inputs(c, topo.ranks(), env.device) {
        load_kernels(buffer, inputs, {c});
        SY_CUDA_CHECK(cudaDeviceSynchronize());
        env.communicator->barrier(std::chrono::seconds(120));
    }
};

struct Round {
    LowLatencyDispatchResult dispatched;
    LowLatencyCombineResult combined;
};

Round issue_round(Buffer& buffer, RankEnv& env, const RankInputs& inputs, bool hook, bool hierarchical) {
    Round round;
    LowLatencyDispatchArgs dispatch = hierarchical ? inputs.hierarchical_dispatch_args() : inputs.dispatch_args();
    dispatch.return_recv_hook = hook;
    round.dispatched = buffer.ll_dispatch(dispatch, env.stream);
    if (hook) {
        poison_dispatch_outputs(round.dispatched, env.stream);
        round.dispatched.receive();
    }
    LowLatencyCombineArgs combine =
        hierarchical ? inputs.hierarchical_combine_args(env.num_ranks) : inputs.combine_args(env.num_ranks);
    combine.return_recv_hook = hook;
    round.combined = buffer.ll_combine(combine, round.dispatched.handle, env.stream);
    if (hook) round.combined.receive();
    return round;
}

void check_round(Buffer& buffer, RankEnv& env, const Scenario& sc, const Round& round, bool hierarchical,
                 const std::vector<reference::CombineOutput>& expected, const std::string& what) {
    SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
    buffer.check_errors();
    check_dispatch(sc, env.rank, round.dispatched, env.stream, what);
    check_out(expected[env.rank].out, sc.c.hidden, env.rank, round.combined.out, env.stream,
              what + (hierarchical ? " (hierarchical)" : " (flat)"));
}

// Flat and hierarchical rounds of `sc` (plain or hook), checked.
void run_rounds(Buffer& buffer, RankEnv& env, RankInputs& inputs, const Scenario& sc, const Topo& topo, bool hook,
                const std::string& what) {
    inputs.load(sc, env.rank, env.stream);
    for (bool hierarchical : {false, true}) {
        const auto expected = expected_combine(sc, hierarchical, topo.nodes);
        check_round(buffer, env, sc, issue_round(buffer, env, inputs, hook, hierarchical), hierarchical, expected,
                    what + (hook ? " hook" : ""));
    }
}

// --- Network bytes: each token crosses once per destination node ------------------------------
// What rank s puts to its rail peer on node m in one dispatch + combine round of `sc`: its records
// for node m and the node header; as the forwarder of that peer's tokens, the rows (flat: per
// (token, k) owned on s's node; hierarchical: per token with an owner on s's node) and the header.
uint64_t predicted_bytes(const Scenario& sc, const Topo& topo, const BufferConfig& config, int s, int m,
                         bool hierarchical) {
    // The layout the Buffer makes of this configuration.
    const device::BufferLayout layout =
        device::BufferLayout::make(core::buffer_capacity(config, topo.ranks(), topo.nodes));
    const int32_t scale_kind = !sc.c.use_fp8 ? device::kScaleNone
                               : sc.c.format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0
                                                                    : device::kScaleFloat32;
    const uint64_t record = uint64_t(device::ll_dispatch_record(sc.c.hidden, scale_kind, sc.c.topk).total_bytes);
    const uint64_t row = uint64_t(device::LlSetLayout::combine_row_bytes(sc.c.hidden));
    const int L = sc.local_experts(), G = topo.per_node;
    auto node_of_expert = [&](int64_t e) { return int(e / L) / G; };
    uint64_t bytes = uint64_t(layout.ll_set.node_header_bytes) + uint64_t(device::LlSetLayout::kCombineHeaderBytes);
    const auto& mine = sc.inputs[s].topk_idx;
    for (int t = 0; t < sc.inputs[s].num_tokens; ++t) {
        bool to_node = false;
        for (int k = 0; k < sc.c.topk; ++k) {
            const int64_t e = mine[size_t(t) * sc.c.topk + k];
            to_node = to_node || (e >= 0 && node_of_expert(e) == m);
        }
        if (to_node) bytes += record;
    }
    const int home = m * G + s % G, my_node = s / G;
    const auto& theirs = sc.inputs[home].topk_idx;
    for (int t = 0; t < sc.inputs[home].num_tokens; ++t) {
        int rows = 0;
        for (int k = 0; k < sc.c.topk; ++k) {
            const int64_t e = theirs[size_t(t) * sc.c.topk + k];
            if (e >= 0 && node_of_expert(e) == my_node) ++rows;
        }
        bytes += hierarchical ? (rows > 0 ? row : 0) : uint64_t(rows) * row;
    }
    return bytes;
}

void run_matrix(const Topo& topo) {
    Case c = base_case();
    c.seed = 101 + topo.nodes * 10 + topo.per_node;
    const Scenario sc = make_scenario(c, topo.ranks());
    std::printf("  %s: %s\n", topo.name().c_str(), describe(c).c_str());
    run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
        const BufferConfig config = nodes_config(c, topo);
        RankSetup setup(c, topo, env, config);
        SY_CHECK_EQ(setup.buffer.network_stats().backend, std::string("emulated"));
        if (env.rank == 0)
            std::printf("    buffer %.1f MiB per rank\n", double(setup.buffer.buffer_bytes()) / 1048576.0);
        setup.inputs.load(sc, env.rank, env.stream);
        for (bool hierarchical : {false, true}) {
            setup.buffer.synchronize();
            const NetworkStats before = setup.buffer.network_stats();
            const auto expected = expected_combine(sc, hierarchical, topo.nodes);
            check_round(setup.buffer, env, sc, issue_round(setup.buffer, env, setup.inputs, false, hierarchical),
                        hierarchical, expected, topo.name());
            setup.buffer.synchronize();
            const NetworkStats after = setup.buffer.network_stats();
            for (int m = 0; m < topo.nodes; ++m) {
                if (m == env.rank / topo.per_node) continue;
                const int peer = m * topo.per_node + env.rank % topo.per_node;
                const uint64_t put = after.bytes_requested_to_rank[peer] - before.bytes_requested_to_rank[peer];
                const uint64_t delivered = after.bytes_to_rank[peer] - before.bytes_to_rank[peer];
                const uint64_t predicted = predicted_bytes(sc, topo, config, env.rank, m, hierarchical);
                SY_CHECK_MSG(put == predicted && delivered == predicted,
                             topo.name() << (hierarchical ? " hierarchical" : " flat") << ": rank " << env.rank
                                         << " put " << put << " bytes (delivered " << delivered << ") to rank "
                                         << peer << " on node " << m << ", predicted " << predicted);
            }
            // Nothing to a rank off its rail.
            for (int q = 0; q < topo.ranks(); ++q)
                if (q % topo.per_node != env.rank % topo.per_node || q / topo.per_node == env.rank / topo.per_node)
                    SY_CHECK_EQ(after.bytes_requested_to_rank[q], uint64_t(0));
        }
        // Statistics: rows received per local expert (cumulative) and the time waited per source.
        {
            const int L = sc.local_experts();
            auto expert_stats = std::make_unique<DeviceArray<int32_t>>(size_t(L));
            auto wait_stats = std::make_unique<DeviceArray<int64_t>>(size_t(topo.ranks()));
            expert_stats->fill_bytes(0);
            wait_stats->fill_bytes(0);
            env.communicator->barrier(std::chrono::seconds(120));  // allocations done everywhere (rule 2)
            LowLatencyDispatchArgs dispatch = setup.inputs.dispatch_args();
            dispatch.cumulative_local_expert_recv_stats =
                TensorView::contiguous(expert_stats->data(), DType::kInt32, {L}, Device::cuda(env.device));
            dispatch.wait_time_stats =
                TensorView::contiguous(wait_stats->data(), DType::kInt64, {topo.ranks()}, Device::cuda(env.device));
            for (int i = 0; i < 2; ++i) setup.buffer.ll_dispatch(dispatch, env.stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            setup.buffer.check_errors();
            const auto counts = download<int32_t>(expert_stats->data(), size_t(L), env.stream);
            for (int e = 0; e < L; ++e)
                SY_CHECK_MSG(counts[e] == 2 * sc.dispatched.outputs[env.rank].num_tokens_per_expert[e],
                             topo.name() << ": rank " << env.rank << " expert " << e << " received " << counts[e]
                                         << " rows over two dispatches, expected "
                                         << 2 * sc.dispatched.outputs[env.rank].num_tokens_per_expert[e]);
            for (int64_t waited : download<int64_t>(wait_stats->data(), size_t(topo.ranks()), env.stream))
                SY_CHECK(waited >= 0);
            // Freed between barriers: cudaFree waits for the device, where a peer's next op could be
            // waiting for this rank (DESIGN.md §4, rule 2).
            env.communicator->barrier(std::chrono::seconds(120));
            expert_stats.reset();
            wait_stats.reset();
            env.communicator->barrier(std::chrono::seconds(120));
        }
        // A second scenario on the same buffer (both sets used, sequences advanced).
        Case next = c;
        next.seed += 1000;
        run_rounds(setup.buffer, env, setup.inputs, make_scenario(next, topo.ranks()), topo, false,
                   topo.name() + " second scenario");
        env.communicator->barrier(std::chrono::seconds(120));
    });
}

}  // namespace

SY_TEST(LlNodes, WarmKernels) {
    require_gpus(1);
    // Every kernel the cases load (Buffer::ll_load_kernels per shape), compiled on every core.
    std::vector<jit::KernelSource> sources;
    for (const Case& c :
         {base_case(), bf16_contiguous_case(), ue8m0_contiguous_case(), deepseek_routing_case()}) {
        launch::LlDispatchShape shape;
        shape.hidden = c.hidden;
        shape.topk = c.topk;
        shape.scale_kind = !c.use_fp8 ? device::kScaleNone
                           : c.format == ScaleFormat::kUE8M0 ? device::kScaleUe8m0
                                                             : device::kScaleFloat32;
        shape.index_is_int64 = c.index_int64;
        shape.contiguous = c.contiguous_alignment > 0;
        for (const auto& source : launch::ll_net_op_sources(shape, false))
            if (std::none_of(sources.begin(), sources.end(),
                             [&](const jit::KernelSource& known) { return known.kernel == source.kernel; }))
                sources.push_back(source);
    }
    int device = 0;
    SY_CUDA_CHECK(cudaGetDevice(&device));
    jit::CompileOptions options;
    options.arch = jit::arch_for_device(device);  // as Buffer's loads compile them
    std::atomic<size_t> next{0};
    std::mutex mutex;
    std::vector<std::string> lines(sources.size());
    std::vector<std::thread> workers;
    const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
    for (unsigned w = 0; w < threads; ++w)
        workers.emplace_back([&] {
            for (size_t i = next++; i < sources.size(); i = next++) {
                try {
                    const jit::CompiledKernel compiled = jit::compile(sources[i], options);
                    char line[512];
                    std::snprintf(line, sizeof(line), "  %s: %d registers, %d spill bytes%s", sources[i].kernel.c_str(),
                                  compiled.num_registers, compiled.spill_bytes, compiled.cache_hit ? " (cached)" : "");
                    lines[i] = line;
                } catch (const std::exception& error) {
                    std::lock_guard<std::mutex> lock(mutex);
                    lines[i] = "  FAILED " + sources[i].kernel + ": " + error.what();
                }
            }
        });
    for (auto& worker : workers) worker.join();
    for (const auto& line : lines) {
        std::printf("%s\n", line.c_str());
        SY_CHECK_MSG(line.find("FAILED") == std::string::npos, line);
    }
}

SY_TEST(LlNodes, Matrix2x2) {
    require_gpus(1);
    run_matrix({2, 2});
}
SY_TEST(LlNodes, Matrix2x4) {
    require_gpus(1);
    run_matrix({2, 4});
}
SY_TEST(LlNodes, Matrix4x2) {
    require_gpus(1);
    run_matrix({4, 2});
}
SY_TEST(LlNodes, Matrix4x1) {
    require_gpus(1);
    run_matrix({4, 1});
}

SY_TEST(LlNodes, Bf16ContiguousZeroPadding) {
    require_gpus(1);
    for (const Topo topo : {Topo{2, 2}, Topo{4, 2}}) {
        Case c = bf16_contiguous_case();
        c.seed = 211 + topo.ranks();
        const Scenario sc = make_scenario(c, topo.ranks());
        std::printf("  %s: %s\n", topo.name().c_str(), describe(c).c_str());
        run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
            RankSetup setup(c, topo, env, nodes_config(c, topo));
            run_rounds(setup.buffer, env, setup.inputs, sc, topo, false, topo.name() + " bf16 contiguous");
            run_rounds(setup.buffer, env, setup.inputs, sc, topo, true, topo.name() + " bf16 contiguous");
            env.communicator->barrier(std::chrono::seconds(120));
        });
    }
}

SY_TEST(LlNodes, Ue8m0Contiguous) {
    require_gpus(1);
    const Topo topo{2, 4};
    Case c = ue8m0_contiguous_case();
    c.seed = 307;
    const Scenario sc = make_scenario(c, topo.ranks());
    std::printf("  %s: %s\n", topo.name().c_str(), describe(c).c_str());
    run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
        RankSetup setup(c, topo, env, nodes_config(c, topo));
        run_rounds(setup.buffer, env, setup.inputs, sc, topo, false, topo.name() + " ue8m0 contiguous");
        env.communicator->barrier(std::chrono::seconds(120));
    });
}

SY_TEST(LlNodes, HookModeTwoInFlight) {
    require_gpus(1);
    for (const Topo topo : {Topo{2, 4}, Topo{4, 1}}) {
        Case a = base_case(), b = base_case();
        a.seed = 401 + topo.ranks();
        b.seed = 501 + topo.ranks();
        b.tokens = {5, 24, 0, 17};
        const Scenario sa = make_scenario(a, topo.ranks()), sb = make_scenario(b, topo.ranks());
        std::printf("  %s: two dispatches, then two combines, in flight\n", topo.name().c_str());
        run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
            RankSetup setup(a, topo, env, nodes_config(a, topo));
            RankInputs other(b, topo.ranks(), env.device);
            SY_CUDA_CHECK(cudaDeviceSynchronize());
            env.communicator->barrier(std::chrono::seconds(120));
            setup.inputs.load(sa, env.rank, env.stream);
            other.load(sb, env.rank, env.stream);
            Buffer& buffer = setup.buffer;
            for (bool hierarchical : {false, true}) {
                auto dispatch = [&](const RankInputs& in) {
                    LowLatencyDispatchArgs args = hierarchical ? in.hierarchical_dispatch_args() : in.dispatch_args();
                    args.return_recv_hook = true;
                    return buffer.ll_dispatch(args, env.stream);
                };
                auto combine = [&](const RankInputs& in, const LowLatencyDispatchResult& d) {
                    LowLatencyCombineArgs args = hierarchical ? in.hierarchical_combine_args(env.num_ranks)
                                                              : in.combine_args(env.num_ranks);
                    args.return_recv_hook = true;
                    return buffer.ll_combine(args, d.handle, env.stream);
                };
                Round ra, rb;
                ra.dispatched = dispatch(setup.inputs);
                rb.dispatched = dispatch(other);
                poison_dispatch_outputs(ra.dispatched, env.stream);
                poison_dispatch_outputs(rb.dispatched, env.stream);
                ra.dispatched.receive();
                rb.dispatched.receive();
                ra.combined = combine(setup.inputs, ra.dispatched);
                rb.combined = combine(other, rb.dispatched);
                ra.combined.receive();
                rb.combined.receive();
                const std::string what = topo.name() + " two in flight";
                check_round(buffer, env, sa, ra, hierarchical, expected_combine(sa, hierarchical, topo.nodes),
                            what + " (first)");
                check_round(buffer, env, sb, rb, hierarchical, expected_combine(sb, hierarchical, topo.nodes),
                            what + " (second)");
            }
            env.communicator->barrier(std::chrono::seconds(120));
        });
    }
}

// Dispatches out of step with combines: an empty dispatch before each round (how a bench or an
// engine aligns ranks across nodes, where the GPU barrier cannot reach), so a round's dispatch and
// combine have sequences of different parity and use different signal sets.
SY_TEST(LlNodes, EmptyDispatchBetweenRounds) {
    require_gpus(1);
    for (const Topo topo : {Topo{2, 1}, Topo{2, 2}}) {
        Case c = base_case();
        c.seed = 601 + topo.ranks();
        const Scenario sc = make_scenario(c, topo.ranks());
        std::printf("  %s: an empty dispatch before each of 4 rounds\n", topo.name().c_str());
        run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
            RankSetup setup(c, topo, env, nodes_config(c, topo));
            setup.inputs.load(sc, env.rank, env.stream);
            LowLatencyDispatchArgs empty = setup.inputs.dispatch_args();
            empty.x = TensorView::contiguous(setup.inputs.x.data(), DType::kBFloat16, {0, c.hidden},
                                             Device::cuda(env.device));
            empty.topk_idx = TensorView::contiguous(setup.inputs.idx64.data(), DType::kInt64, {0, c.topk},
                                                    Device::cuda(env.device));
            for (int round = 0; round < 4; ++round) {
                const bool hierarchical = round % 2 == 1;
                setup.buffer.ll_dispatch(empty, env.stream);
                check_round(setup.buffer, env, sc,
                            issue_round(setup.buffer, env, setup.inputs, false, hierarchical), hierarchical,
                            expected_combine(sc, hierarchical, topo.nodes),
                            topo.name() + " round " + std::to_string(round) + " after an empty dispatch");
            }
            env.communicator->barrier(std::chrono::seconds(120));
        });
    }
}

// Top-8 of 256 experts, every slot valid (the bench's routing), flat and hierarchical, 2x1 and 2x2.
SY_TEST(LlNodes, DeepSeekRouting) {
    require_gpus(1);
    for (const Topo topo : {Topo{2, 1}, Topo{2, 2}}) {
        Case c = deepseek_routing_case();
        c.seed = 701 + topo.ranks();
        const Scenario sc = make_scenario(c, topo.ranks());
        std::printf("  %s: %s\n", topo.name().c_str(), describe(c).c_str());
        run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
            RankSetup setup(c, topo, env, nodes_config(c, topo));
            run_rounds(setup.buffer, env, setup.inputs, sc, topo, false, topo.name() + " top-8 of 256");
            env.communicator->barrier(std::chrono::seconds(120));
        });
    }
}

SY_TEST(LlNodes, GraphReplay) {
    require_gpus(1);
    const Topo topo{2, 2};
    Case c = base_case();
    std::vector<Scenario> scenarios;
    for (int i = 0; i < 4; ++i) {
        c.seed = 601 + i;
        scenarios.push_back(make_scenario(c, topo.ranks()));
    }
    run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
        RankSetup setup(c, topo, env, nodes_config(c, topo));
        Buffer& buffer = setup.buffer;
        for (bool hook : {false, true}) {
            for (bool hierarchical : {false, true}) {
                const std::string mode = std::string(hook ? "graph (hook)" : "graph") +
                                         (hierarchical ? " hierarchical" : " flat");
                setup.inputs.load(scenarios[0], env.rank, env.stream);
                check_round(buffer, env, scenarios[0], issue_round(buffer, env, setup.inputs, hook, hierarchical),
                            hierarchical, expected_combine(scenarios[0], hierarchical, topo.nodes), mode + " warm-up");
                cudaGraph_t graph = nullptr;
                cudaGraphExec_t exec = nullptr;
                SY_CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
                Round captured = issue_round(buffer, env, setup.inputs, hook, hierarchical);
                SY_CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
                SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
                env.communicator->barrier(std::chrono::seconds(120));
                for (int i = 1; i < 4; ++i) {
                    setup.inputs.load(scenarios[i], env.rank, env.stream);
                    poison_dispatch_outputs(captured.dispatched, env.stream);
                    SY_CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
                    check_round(buffer, env, scenarios[i], captured, hierarchical,
                                expected_combine(scenarios[i], hierarchical, topo.nodes),
                                mode + " replay " + std::to_string(i));
                }
                SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
                env.communicator->barrier(std::chrono::seconds(120));
                SY_CUDA_CHECK(cudaGraphExecDestroy(exec));
                SY_CUDA_CHECK(cudaGraphDestroy(graph));
                env.communicator->barrier(std::chrono::seconds(120));
            }
        }
    });
}

SY_TEST(LlNodes, AdversarialNetwork) {
    require_gpus(1);
    const uint32_t all = kNetworkReorderPuts | kNetworkLateSourceReads | kNetworkContextsOutOfOrder;
    for (const Topo topo : {Topo{2, 2}, Topo{4, 1}}) {
        Case c = base_case();
        std::vector<Scenario> scenarios;
        for (int i = 0; i < 3; ++i) {
            c.seed = 701 + 10 * topo.nodes + i;
            scenarios.push_back(make_scenario(c, topo.ranks()));
        }
        std::printf("  %s: reordered puts, late source reads, contexts out of order\n", topo.name().c_str());
        run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
            RankSetup setup(c, topo, env, nodes_config(c, topo, all));
            for (size_t i = 0; i < scenarios.size(); ++i)
                run_rounds(setup.buffer, env, setup.inputs, scenarios[i], topo, i % 2 == 1,
                           topo.name() + " adversarial " + std::to_string(i));
            env.communicator->barrier(std::chrono::seconds(120));
        });
    }
}

namespace {

// y of rank q, every valid row (s, t, k) holding a value of (s, t, k, channel) only: the combine
// of any consistent layout then sums the same values, so each rank's output can be checked against
// a reference with its own absent ranks.
std::vector<uint16_t> y_of_sources(const Scenario& sc, const reference::DispatchOutput& output) {
    const size_t H = size_t(sc.c.hidden);
    std::vector<uint16_t> y(size_t(output.num_rows) * H, 0);
    for (int64_t row = 0; row < output.num_rows; ++row) {
        const reference::RowSource& source = output.sources[size_t(row)];
        if (source.rank < 0) continue;
        for (size_t h = 0; h < H; ++h)
            y[size_t(row) * H + h] = test_value(sc.c.seed + 9, uint64_t(source.rank) * 64 + uint64_t(source.k),
                                                uint64_t(source.token), int(h));
    }
    return y;
}

// The scenario of `c` with `absent` ranks, y by source (y_of_sources) on every rank.
Scenario absent_scenario(Case c, const std::vector<int32_t>& mask) {
    c.absent.assign(mask.size(), false);
    for (size_t r = 0; r < mask.size(); ++r) c.absent[r] = mask[r] != 0;
    Scenario sc = make_scenario(c, int(mask.size()));
    for (int q = 0; q < sc.num_ranks; ++q) sc.expert_outputs[size_t(q)].y = y_of_sources(sc, sc.dispatched.outputs[size_t(q)]);
    return sc;
}

std::string mask_text(const std::vector<int32_t>& mask) {
    std::string text = "{";
    for (size_t r = 0; r < mask.size(); ++r)
        if (mask[r]) text += (text.size() > 1 ? "," : "") + std::to_string(r);
    return text + "}";
}

void run_withheld_masked(const Topo& topo, int silent) {
    Case c = base_case();
    c.seed = 811 + topo.ranks();
    c.tokens = {24};
    const Scenario everyone = make_scenario(c, topo.ranks());
    std::mutex print;
    run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
        BufferConfig config = nodes_config(c, topo);
        config.ll_mask_unresponsive_ranks = true;
        config.timeout_seconds = 1.0;
        config.network_withhold_rank = silent;
        RankSetup setup(c, topo, env, config);
        Buffer& buffer = setup.buffer;
        RankInputs& inputs = setup.inputs;
        const bool mine_checked = env.rank != silent;
        for (bool hierarchical : {false, true}) {
            // Dispatch; then y laid out as this rank's dispatch laid it out (the reference without
            // the ranks it masked), by source.
            inputs.load(everyone, env.rank, env.stream);
            LowLatencyDispatchArgs dispatch = hierarchical ? inputs.hierarchical_dispatch_args() : inputs.dispatch_args();
            LowLatencyDispatchResult dispatched = buffer.ll_dispatch(dispatch, env.stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            buffer.check_errors();
            const std::vector<int32_t> after_dispatch = buffer.ll_query_mask();
            const Scenario seen = absent_scenario(c, after_dispatch);
            const std::string what = topo.name() + " rank " + std::to_string(silent) + " withheld" +
                                     (hierarchical ? " (hierarchical)" : " (flat)");
            if (mine_checked) check_dispatch(seen, env.rank, dispatched, env.stream, what + " dispatch");
            // Every rank enters the combine once every dispatch ended. The ranks of the other nodes
            // spend the timeout in their dispatch before they mask the silent rank; a rank of the
            // silent rank's node, whose dispatch waits for no one silent, would otherwise wait that
            // long for their combine's rows and rightly mask them too (a race of this test, seen
            // once in 2x2 on one H200, not a masking error).
            env.communicator->barrier(std::chrono::seconds(120));
            upload(inputs.y.data(), seen.expert_outputs[size_t(env.rank)].y, env.stream);
            LowLatencyCombineArgs combine =
                hierarchical ? inputs.hierarchical_combine_args(env.num_ranks) : inputs.combine_args(env.num_ranks);
            LowLatencyCombineResult combined = buffer.ll_combine(combine, dispatched.handle, env.stream);
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            buffer.check_errors();
            const std::vector<int32_t> after_combine = buffer.ll_query_mask();
            {
                std::lock_guard<std::mutex> lock(print);
                std::printf("    %s: rank %d masked %s after the dispatch, %s after the combine\n", what.c_str(),
                            env.rank, mask_text(after_dispatch).c_str(), mask_text(after_combine).c_str());
            }
            if (mine_checked) {
                const Scenario combined_view = absent_scenario(c, after_combine);
                check_out(expected_combine(combined_view, hierarchical, topo.nodes)[size_t(env.rank)].out, c.hidden,
                          env.rank, combined.out, env.stream, what);
                const bool other_node = env.rank / topo.per_node != silent / topo.per_node;
                SY_CHECK_MSG(!other_node || after_dispatch[size_t(silent)] == 1,
                             what << ": rank " << env.rank << " did not mask the silent rank");
                SY_CHECK_MSG(other_node || after_combine == std::vector<int32_t>(size_t(topo.ranks()), 0),
                             what << ": rank " << env.rank << ", on the silent rank's node, masked "
                                  << mask_text(after_combine));
                if (topo.per_node == 1) {
                    std::vector<int32_t> only(size_t(topo.ranks()), 0);
                    only[size_t(silent)] = 1;
                    SY_CHECK_MSG(after_combine == only, what << ": rank " << env.rank << " masked "
                                                             << mask_text(after_combine) << ", expected {" << silent
                                                             << "}");
                }
            }
            // The next round starts from no mask, once every rank is done with this one.
            env.communicator->barrier(std::chrono::seconds(120));
            buffer.ll_clear_mask();
            env.communicator->barrier(std::chrono::seconds(120));
        }
        env.communicator->barrier(std::chrono::seconds(120));
    });
}

}  // namespace

SY_TEST(LlNodes, WithheldRankIsMasked) {
    require_gpus(1);
    std::printf("  4x1, rank 2 withheld\n");
    run_withheld_masked({4, 1}, 2);
    std::printf("  2x2, rank 1 withheld\n");
    run_withheld_masked({2, 2}, 1);
}

SY_TEST(LlNodes, WithheldRankWithoutMasking) {
    require_gpus(1);
    // 2 x 2: rank 3 (node 1) delivers nothing over the network until the first reset. Node 0's
    // ranks wait for its dispatch data: rank 1, its rail peer, for its network signal; rank 0 for the
    // arrival rank 1 would relay. Both raise TimeoutError naming rank 3 and node 1.
    const Topo topo{2, 2};
    const double timeout = 1.5;
    Case c = base_case();
    c.seed = 901;
    const Scenario sc = make_scenario(c, topo.ranks());
    run_ranks(topo.ranks(), 1, [&](RankEnv& env) {
        BufferConfig config = nodes_config(c, topo);
        config.timeout_seconds = timeout;
        config.network_withhold_rank = 3;
        RankSetup setup(c, topo, env, config);
        setup.inputs.load(sc, env.rank, env.stream);
        const auto start = std::chrono::steady_clock::now();
        setup.buffer.ll_dispatch(setup.inputs.dispatch_args(), env.stream);
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        if (env.rank < 2) {
            bool thrown = false;
            try {
                setup.buffer.check_errors();
            } catch (const TimeoutError& error) {
                thrown = true;
                const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                const std::string message = error.what();
                std::printf("    rank %d after %.2f s: %s\n", env.rank, waited, message.c_str());
                SY_CHECK_EQ(error.phase(), std::string("low-latency dispatch"));
                SY_CHECK_EQ(error.peer(), 3);
                SY_CHECK(message.find("rank 3 on node 1 over the network") != std::string::npos);
                SY_CHECK(waited < timeout + 5.0);
            }
            SY_CHECK_MSG(thrown, "rank " << env.rank << " should have timed out waiting for rank 3 on node 1");
        } else {
            setup.buffer.check_errors();  // node 1 received everything
        }
        setup.buffer.reset();
        run_rounds(setup.buffer, env, setup.inputs, sc, topo, false, "after reset");
        setup.buffer.synchronize();
        if (env.rank == 3) SY_CHECK(setup.buffer.network_stats().bytes_withheld > 0);
    });
}

SY_TEST_MAIN()
