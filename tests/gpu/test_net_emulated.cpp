// The emulated network on the GPU (ranks as threads on one GPU, emulated nodes 2x1, 2x2 and 4x1):
// delivery and strong signals under every adversarial mode, counters and flush, byte accounting
// against the bytes put, the bandwidth cap (large puts, and the HT shape: 7 KiB records with a
// signal each from 16 warps), the latency floor, and a withheld rank: its peers raise
// TimeoutError naming the network phase and the peer node within the timeout, nothing lands in
// their receive regions, and reset() recovers. Everything goes through Buffer::check_network
// (transport/net_check.cuh), which checks what arrives against the contract on the GPU; and the
// GPU barrier across nodes (Buffer::barrier, transport/net_barrier.cuh): no rank leaves before the
// last one arrived, plain and in a replayed graph, and a withheld rank is a TimeoutError naming it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "common/testing.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "jit/jit.hpp"
#include "switchyard/testing/time_stamp.cuh"
#include "switchyard/network.hpp"

using namespace switchyard;
using namespace switchyard::testing;

namespace {

struct Shape {
    int nodes;
    int per_node;
    int ranks() const { return nodes * per_node; }
    std::string name() const { return std::to_string(nodes) + "x" + std::to_string(per_node); }
};
const Shape kShapes[] = {{2, 1}, {2, 2}, {4, 1}};

// Data regions of a few tens of MB (HT capacities), emulated nodes, the network as given.
BufferConfig network_config(int nodes, uint32_t adversarial = 0) {
    BufferConfig config;
    config.max_tokens_per_rank = 512;
    config.max_hidden = 7168;
    config.max_topk = 8;
    config.max_experts = 64;
    config.emulated_nodes = nodes;
    config.timeout_seconds = 20;
    config.network_adversarial = adversarial;
    return config;
}

std::string mode_name(uint32_t mode) {
    if (mode == 0) return "plain";
    std::string name;
    if (mode & kNetworkReorderPuts) name += "reorder+";
    if (mode & kNetworkLateSourceReads) name += "late-reads+";
    if (mode & kNetworkContextsOutOfOrder) name += "contexts+";
    name.pop_back();
    return name;
}

void check_clean(const NetworkCheckResult& result, const std::string& what) {
    SY_CHECK_MSG(result.bad_slots == 0, what << ": " << result.bad_slots << " bad slot(s), first from node "
                                             << result.first_bad_node << " put " << result.first_bad_put);
}

}  // namespace

SY_TEST(NetEmulated, DeliveryAndAccountingInEveryShape) {
    require_gpus(1);
    for (const Shape& shape : kShapes) {
        std::printf("  %s\n", shape.name().c_str());
        std::vector<NetworkStats> stats(size_t(shape.ranks()));
        std::mutex mutex;
        NetworkCheck check;
        check.rounds = 3;
        check.puts_per_round = 48;
        check.puts_per_signal = 5;
        check.put_bytes = 8 << 10;
        check.num_contexts = 2;
        run_ranks(shape.ranks(), 1, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, network_config(shape.nodes));
            SY_CHECK_EQ(buffer.network_stats().backend, std::string("emulated"));
            const NetworkCheckResult result = buffer.check_network(check, env.stream);
            check_clean(result, shape.name());
            buffer.synchronize();  // the network delivered what the check asked
            std::lock_guard<std::mutex> lock(mutex);
            stats[size_t(env.rank)] = buffer.network_stats();
        });
        // Every rank put rounds x puts x bytes to its rail peer on each other node, nothing else.
        const uint64_t per_peer = uint64_t(check.rounds) * check.puts_per_round * check.put_bytes;
        for (int rank = 0; rank < shape.ranks(); ++rank) {
            const NetworkStats& s = stats[size_t(rank)];
            SY_CHECK(s.accounted);
            for (int peer = 0; peer < shape.ranks(); ++peer) {
                const bool rail = peer % shape.per_node == rank % shape.per_node &&
                                  peer / shape.per_node != rank / shape.per_node;
                SY_CHECK_EQ(s.bytes_to_rank[size_t(peer)], rail ? per_peer : 0);
                SY_CHECK_EQ(s.bytes_requested_to_rank[size_t(peer)], rail ? per_peer : 0);
                SY_CHECK_EQ(s.puts_to_rank[size_t(peer)],
                            rail ? uint64_t(check.rounds) * check.puts_per_round : 0);
            }
            SY_CHECK_EQ(s.bytes_withheld, uint64_t(0));
            SY_CHECK_EQ(s.invalid_requests, uint64_t(0));
            std::printf("    rank %d: %llu copies for %d puts by %s, signals by %s\n", rank,
                        (unsigned long long)s.copies, check.rounds * check.puts_per_round * (shape.nodes - 1),
                        s.copies_by.c_str(), s.signal_writes.c_str());
            SY_CHECK(!s.copies_by.empty());
        }
        const std::vector<uint64_t> pairs = bytes_by_node_pair(stats);
        for (int from = 0; from < shape.nodes; ++from)
            for (int to = 0; to < shape.nodes; ++to)
                SY_CHECK_EQ(pairs[size_t(from * shape.nodes + to)],
                            from == to ? 0 : per_peer * shape.per_node);
    }
}

SY_TEST(NetEmulated, StrongSignalsUnderAdversarialModes) {
    require_gpus(1);
    const uint32_t modes[] = {kNetworkReorderPuts, kNetworkLateSourceReads, kNetworkContextsOutOfOrder,
                              kNetworkReorderPuts | kNetworkLateSourceReads | kNetworkContextsOutOfOrder};
    for (const Shape& shape : {kShapes[1], kShapes[2]}) {
        for (uint32_t mode : modes) {
            std::printf("  %s %s\n", shape.name().c_str(), mode_name(mode).c_str());
            run_ranks(shape.ranks(), 1, [&](RankEnv& env) {
                Buffer buffer(env.communicator, env.device, network_config(shape.nodes, mode));
                NetworkCheck check;
                check.puts_per_round = 96;
                check.puts_per_signal = 7;
                check.put_bytes = 4 << 10;
                for (int contexts : {1, 4}) {
                    check.num_contexts = contexts;
                    check.seed = uint32_t(contexts);
                    check_clean(buffer.check_network(check, env.stream), mode_name(mode));
                }
                // Counters and flush: a reused source is rewritten only after it was read.
                NetworkCheck reuse;
                reuse.pattern = NetworkCheck::Pattern::kReuse;
                reuse.rounds = 24;
                reuse.put_bytes = 16 << 10;
                reuse.num_contexts = 2;
                check_clean(buffer.check_network(reuse, env.stream), mode_name(mode) + " counters");
                reuse.use_flush = true;
                check_clean(buffer.check_network(reuse, env.stream), mode_name(mode) + " flush");
                buffer.synchronize();
            });
        }
    }
}

// What a bandwidth run shows besides its rate: how fast the senders posted (a kernel that posts
// slower than the wire carries is the limit, not the network) and where the engine's time went.
void print_run(int rank, const NetworkCheckResult& sender, const NetworkStats& stats) {
    const double posting = double(sender.send_end_ns - sender.send_start_ns);
    std::printf("    rank %d posted %llu requests in %.2f ms (%.0f ns a request, %.1f GB/s of payload)\n",
                rank, (unsigned long long)sender.posts, posting / 1e6,
                sender.posts ? posting / double(sender.posts) : 0.0,
                posting > 0 ? double(sender.bytes_sent) / posting : 0.0);
    std::printf("    rank %d %s\n", rank, stats.engine.summary().c_str());
}

// The longest an engine's host thread was held off in a run (a copy call issued past its wire slot,
// or a request taken from the ring late): more than a millisecond is the host descheduling that
// thread (seen on the GPU machine's virtual CPUs: 4 to 14 ms once in a suite run, with every other
// call on time), not something the network or the kernels did.
int64_t host_stall_ns(const NetworkEngineStats& engine) {
    return int64_t(std::max(engine.late_max_ns, engine.ring_lag_max_ns));
}
constexpr int64_t kHostStallNs = 1'000'000;
// What a timed run measured, and the longest any rank's engine thread was held off in it.
template <typename T>
struct Measured {
    T value;
    int64_t host_stall_ns = 0;
};

// The value of the first run of `measure` whose engines the host did not hold off; a run it did is
// measured again (at most twice more, each time said), so a descheduled thread is not taken for
// the network's rate or latency while one that stays out of bounds still fails its check.
template <class Measure>
auto undisturbed(Measure measure) {
    auto run = measure();
    for (int again = 0; again < 2 && run.host_stall_ns > kHostStallNs; ++again) {
        std::printf("  an engine thread was held off %.1f ms by the host: measured again\n",
                    run.host_stall_ns / 1e6);
        run = measure();
    }
    return run.value;
}

// One rank's timed check on `buffer`: `warm` first (it loads the check's kernels and wakes the
// engines), the ranks meet, then `check`: a rank whose thread came late would otherwise see its last
// signal late and count the delay as the network's (a 2 x 2 run measured 0.33 of the cap for one
// rank so, on 2026-12-02). The ranks meet again once each has measured: no rank tears its buffer
// down while another still measures (freeing and unmapping memory holds the driver for
// milliseconds, and the engines still running issued their copies that late: a 2 x 2 run measured
// 0.43 of the cap on its last rank so). `stall_ns` is the hold-off the measured run raised the
// engine's maximum to (the maxima are cumulative: a warm-up's stall is not taken for the run's, and
// one no longer than the warm-up's goes unseen), else 0.
struct TimedCheck {
    NetworkCheckResult warm, result;
    NetworkStats stats;
    int64_t stall_ns = 0;
};
TimedCheck timed_check(RankEnv& env, Buffer& buffer, const NetworkCheck& warm, const NetworkCheck& check) {
    TimedCheck run;
    run.warm = buffer.check_network(warm, env.stream);
    buffer.synchronize();
    env.host_barrier();
    const int64_t before = host_stall_ns(buffer.network_stats().engine);
    run.result = buffer.check_network(check, env.stream);
    buffer.synchronize();
    run.stats = buffer.network_stats();
    const int64_t after = host_stall_ns(run.stats.engine);
    run.stall_ns = after > before ? after : 0;
    env.host_barrier();
    return run;
}

// Runs `check` on `shape` at `cap` GB/s (timed_check, after a one-round warm-up); measures each
// rank's rate (its rail peer's bytes over the time from that peer's first post to this rank's last
// signal), printing the rates, the posting rates and the engines' statistics.
Measured<std::vector<double>> bandwidth_run(const Shape& shape, double cap, const NetworkCheck& check,
                                            const char* what) {
    std::vector<TimedCheck> runs(size_t(shape.ranks()));
    run_ranks(shape.ranks(), 1, [&](RankEnv& env) {
        BufferConfig config = network_config(shape.nodes);
        config.network_bandwidth_gbps = cap;
        Buffer buffer(env.communicator, env.device, config);
        NetworkCheck warm = check;
        warm.rounds = 1;
        TimedCheck& run = runs[size_t(env.rank)];
        run = timed_check(env, buffer, warm, check);
        check_clean(run.warm, what);
        check_clean(run.result, what);
    });
    Measured<std::vector<double>> run;
    for (int rank = 0; rank < shape.ranks(); ++rank) {
        const int peer_rank = (rank + shape.per_node) % shape.ranks();  // 2 nodes: the rail peer
        const NetworkCheckResult& mine = runs[size_t(rank)].result;
        const NetworkCheckResult& peer = runs[size_t(peer_rank)].result;
        const double seconds = double(mine.receive_end_ns - peer.send_start_ns) / 1e9;
        const double rate = double(peer.bytes_sent) / seconds / 1e9;
        std::printf(
            "  %s %s, cap %.0f GB/s: rank %d received %.1f MB in %.3f ms: %.2f GB/s (%.3f of the cap)\n",
            shape.name().c_str(), what, cap, rank, peer.bytes_sent / 1e6, seconds * 1e3, rate, rate / cap);
        print_run(rank, mine, runs[size_t(rank)].stats);
        run.value.push_back(rate);
        run.host_stall_ns = std::max(run.host_stall_ns, runs[size_t(rank)].stall_ns);
    }
    return run;
}

SY_TEST(NetEmulated, BandwidthCap) {
    require_gpus(1);
    // 2 x 1: each rank streams ~2.3 GB to the other at the default 46 GB/s cap (a ~50 ms run): 64 KiB
    // puts, a signal every 16, two contexts, the sender's lanes posting a group at once.
    for (double cap : {46.0, 12.0}) {
        NetworkCheck check;
        check.puts_per_round = 64;
        check.puts_per_signal = 16;
        check.put_bytes = 64 << 10;
        check.num_contexts = 2;
        check.check_every_signal = false;
        check.rounds = int32_t(cap * 1e9 * 0.05 / double(check.puts_per_round * check.put_bytes));
        for (double rate :
             undisturbed([&] { return bandwidth_run(kShapes[0], cap, check, "64 KiB puts"); })) {
            SY_CHECK(rate >= 0.9 * cap);
            SY_CHECK(rate <= 1.03 * cap);
        }
    }
    // One thread posting every request (as the check did before): what that thread reaches, for
    // the record (one post is a device atomic, the descriptor and a system-scope release).
    NetworkCheck single;
    single.puts_per_round = 64;
    single.puts_per_signal = 16;
    single.put_bytes = 64 << 10;
    single.num_contexts = 2;
    single.check_every_signal = false;
    single.lane_parallel = false;
    single.rounds = 100;
    for (double rate : bandwidth_run(kShapes[0], 46.0, single, "one posting thread").value)
        SY_CHECK(rate <= 1.03 * 46.0);
}

SY_TEST(NetEmulated, HtShapedBatchesReachTheCap) {
    require_gpus(1);
    // What the hierarchical HT dispatch puts on 2 x 1 and 2 x 2 (co-located ranks, an engine each):
    // every rank ~29 MB to its rail peer as whole batches of 128 FP8 records (~0.9 MB), one put and
    // one signal add each, completed by 16 sender warps (lane 0 of each), channel c on context c % 4.
    for (const Shape& shape : {kShapes[0], kShapes[1]}) {
        NetworkCheck check;
        check.pattern = NetworkCheck::Pattern::kChannels;
        check.channels = 16;
        check.puts_per_round = 2;  // batches a channel, a round: 32 batches, 29.4 MB a round
        check.puts_per_signal = 1;
        check.put_bytes = 128 * 7168;
        check.num_contexts = 4;
        // Eight rounds (~5 ms a rank): the engine's start (its first call's ring lag and launch, up
        // to ~0.1 ms with four ranks on one GPU) is then a small share of the time measured; over
        // two rounds a rank once measured 0.899 of the cap.
        check.rounds = 8;
        for (double rate : undisturbed([&] { return bandwidth_run(shape, 46.0, check, "0.9 MB batches"); })) {
            SY_CHECK(rate >= 0.9 * 46.0);
            SY_CHECK(rate <= 1.03 * 46.0);
        }
    }
    // The same bytes as single 7 KiB records with a signal add each (how the HT kernels once put
    // them): the engine's host thread takes ~4,000 requests an op and reached 0.42-0.77 of the cap on
    // one H200, which is why the kernels batch (decision of 2026-12-02). For the record: the rates,
    // and that the cap holds.
    NetworkCheck records;
    records.pattern = NetworkCheck::Pattern::kChannels;
    records.channels = 16;
    records.puts_per_round = 66;
    records.puts_per_signal = 1;
    records.put_bytes = 7168;
    records.num_contexts = 4;
    records.rounds = 4;
    for (double rate : bandwidth_run(kShapes[0], 46.0, records, "7 KiB records").value)
        SY_CHECK(rate <= 1.03 * 46.0);
}

SY_TEST(NetEmulated, LatencyFloor) {
    require_gpus(1);
    for (double latency_us : {3.0, 25.0}) {
        for (uint64_t bytes : {uint64_t(0), uint64_t(4096)}) {
            // A few round trips first wake the engines; a run the host held off is measured again.
            const NetworkCheckResult node0 = undisturbed([&] {
                std::vector<TimedCheck> runs(2);
                run_ranks(2, 1, [&](RankEnv& env) {
                    BufferConfig config = network_config(2);
                    config.network_latency_us = latency_us;
                    Buffer buffer(env.communicator, env.device, config);
                    NetworkCheck check;
                    check.pattern = NetworkCheck::Pattern::kPingPong;
                    check.put_bytes = bytes;
                    NetworkCheck warm = check;
                    warm.rounds = 8;
                    check.rounds = 200;
                    runs[size_t(env.rank)] = timed_check(env, buffer, warm, check);
                });
                return Measured<NetworkCheckResult>{runs[0].result,
                                                    std::max(runs[0].stall_ns, runs[1].stall_ns)};
            });
            std::printf("  latency %.0f us, %s: round trips %.1f-%.1f us\n", latency_us,
                        bytes ? "4 KiB puts" : "bare signals", node0.round_trip_min_ns / 1e3,
                        node0.round_trip_max_ns / 1e3);
            // Two hops, each at least the latency after the engine saw the request.
            SY_CHECK(node0.round_trip_min_ns >= int64_t(2 * latency_us * 1e3));
            SY_CHECK(node0.round_trip_max_ns < int64_t(2 * latency_us * 1e3) + 2'000'000);
        }
    }
}

SY_TEST(NetEmulated, WithheldRankTimesOutNamingTheNodeAndResetRecovers) {
    require_gpus(1);
    // 2 x 2: rank 3 (node 1, local index 1) delivers nothing until the first reset. Its rail peer,
    // rank 1 (node 0, local index 1), waits for it and must time out naming node 1; rank 3 still
    // receives from rank 1, and the other rail (ranks 0 and 2) is unaffected.
    const Shape shape{2, 2};
    const double timeout = 2.0;
    run_ranks(shape.ranks(), 1, [&](RankEnv& env) {
        BufferConfig config = network_config(shape.nodes);
        config.timeout_seconds = timeout;
        config.network_withhold_rank = 3;
        Buffer buffer(env.communicator, env.device, config);
        NetworkCheck check;
        check.puts_per_round = 16;
        check.puts_per_signal = 4;
        check.put_bytes = 4 << 10;
        // The receive region (after the source region) holds a poison pattern before the check.
        const size_t receive =
            buffer.data_offset() + size_t(shape.nodes) * check.puts_per_round * check.put_bytes;
        const size_t receive_bytes = size_t(shape.nodes) * check.puts_per_round * check.put_bytes;
        SY_CUDA_CHECK(cudaMemset(buffer.local_memory() + receive, 0xA5, receive_bytes));
        SY_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
        env.communicator->barrier(std::chrono::seconds(30));
        const auto start = std::chrono::steady_clock::now();
        if (env.rank == 1) {
            try {
                buffer.check_network(check, env.stream);
                SY_CHECK_MSG(false, "rank 1 should have timed out waiting for node 1");
            } catch (const TimeoutError& error) {
                const double waited =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                const std::string message = error.what();
                std::printf("  rank 1 after %.2f s: %s\n", waited, message.c_str());
                SY_CHECK_EQ(error.phase(), std::string("network"));
                SY_CHECK_EQ(error.peer(), 3);
                SY_CHECK(message.find("on node 1 over the network") != std::string::npos);
                SY_CHECK(waited < timeout + 5.0);
            }
            // Nothing from node 1 landed: its slots still hold the poison.
            std::vector<uint8_t> bytes(receive_bytes / size_t(shape.nodes));
            SY_CUDA_CHECK(cudaMemcpy(bytes.data(), buffer.local_memory() + receive + bytes.size(),
                                     bytes.size(), cudaMemcpyDeviceToHost));
            for (uint8_t byte : bytes) SY_CHECK_EQ(int(byte), 0xA5);
            SY_CHECK_THROWS(buffer.check_errors(), TimeoutError);
        } else {
            check_clean(buffer.check_network(check, env.stream), "unaffected rank");
        }
        // Collective recovery; the withheld rank delivers again after the reset.
        buffer.reset();
        check_clean(buffer.check_network(check, env.stream), "after reset");
        buffer.synchronize();
        SY_CHECK_EQ(buffer.network_stats().bytes_withheld,
                    env.rank == 3 ? uint64_t(check.puts_per_round) * check.put_bytes : 0);
    });
}

SY_TEST(NetEmulated, OneNodeHasNoNetwork) {
    require_gpus(1);
    run_ranks(2, 1, [&](RankEnv& env) {
        BufferConfig config = network_config(0);
        Buffer single(env.communicator, env.device, config);
        SY_CHECK_EQ(single.network_stats().backend, std::string("none"));
        SY_CHECK_THROWS_WITH(single.check_network(NetworkCheck{}, env.stream), UnsupportedError, "one node");
        single.barrier(env.stream);
        single.synchronize();
    });
}

namespace {

// Rounds of (spin a rank-dependent time, stamp the arrival, barrier, stamp the leaving) on every
// rank; `graph`: the barrier replayed from a graph captured once. Returns, per round, the latest
// arrival and the earliest leaving over the ranks (GPU clock, ns): the barrier holds when the
// leaving comes after the arrival in every round.
struct BarrierRounds {
    std::vector<uint64_t> latest_arrival, earliest_leave;
};

BarrierRounds barrier_rounds(const Shape& shape, bool graph) {
    constexpr int kRounds = 6;
    BarrierRounds rounds{std::vector<uint64_t>(kRounds, 0), std::vector<uint64_t>(kRounds, ~0ull)};
    std::mutex mutex;
    run_ranks(shape.ranks(), 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, network_config(shape.nodes));
        // Loaded and allocated before any rank's kernel runs (DESIGN.md §4, rules 2 and 7).
        const jit::Kernel& stamp = jit::get_kernel(
            {"time_stamp", "switchyard/testing/time_stamp.cuh", "switchyard::device::time_stamp_kernel"},
            env.device);
        DeviceArray<uint64_t> stamps(2 * kRounds);
        cudaGraphExec_t replay = nullptr;
        cudaGraph_t captured = nullptr;
        if (graph) {
            SY_CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
            buffer.barrier(env.stream);
            SY_CUDA_CHECK(cudaStreamEndCapture(env.stream, &captured));
            SY_CUDA_CHECK(cudaGraphInstantiate(&replay, captured, 0));
        }
        env.communicator->barrier(std::chrono::seconds(60));
        auto launch_stamp = [&](int slot, uint64_t spin_ns) {
            const device::TimeStampArgs args{stamps.data() + slot, spin_ns};
            jit::LaunchConfig config;
            config.stream = env.stream;
            jit::launch(stamp, config, &args, sizeof(args));
        };
        for (int round = 0; round < kRounds; ++round) {
            // A different rank arrives last each round, up to 300 us after the first.
            launch_stamp(2 * round, uint64_t((env.rank + round) % shape.ranks()) * 300000 / shape.ranks());
            if (graph)
                SY_CUDA_CHECK(cudaGraphLaunch(replay, env.stream));
            else
                buffer.barrier(env.stream);
            launch_stamp(2 * round + 1, 0);
        }
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        env.communicator->barrier(std::chrono::seconds(60));
        const std::vector<uint64_t> values = stamps.download();
        {
            const std::lock_guard<std::mutex> lock(mutex);
            for (int round = 0; round < kRounds; ++round) {
                rounds.latest_arrival[size_t(round)] =
                    std::max(rounds.latest_arrival[size_t(round)], values[size_t(2 * round)]);
                rounds.earliest_leave[size_t(round)] =
                    std::min(rounds.earliest_leave[size_t(round)], values[size_t(2 * round + 1)]);
            }
        }
        if (graph) {
            SY_CUDA_CHECK(cudaGraphExecDestroy(replay));
            SY_CUDA_CHECK(cudaGraphDestroy(captured));
        }
        env.communicator->barrier(std::chrono::seconds(60));  // no rank frees its buffer under a peer
    });
    return rounds;
}

}  // namespace

// Buffer::barrier across nodes: each rank meets its rail peers over the network, then its node.
SY_TEST(NetEmulated, GpuBarrierSpansNodes) {
    require_gpus(1);
    for (const Shape& shape : kShapes)
        for (bool graph : {false, true}) {
            const BarrierRounds rounds = barrier_rounds(shape, graph);
            for (size_t round = 0; round < rounds.latest_arrival.size(); ++round) {
                const int64_t margin =
                    int64_t(rounds.earliest_leave[round]) - int64_t(rounds.latest_arrival[round]);
                SY_CHECK_MSG(margin >= 0, shape.name() << (graph ? " graph" : "") << " round " << round
                                                       << ": a rank left " << -margin
                                                       << " ns before the last one arrived");
                if (round == 0)
                    std::printf("  %s%s: first leaving %.1f us after the last arrival\n",
                                shape.name().c_str(), graph ? " (graph)" : "", margin / 1e3);
            }
        }
}

// A withheld rank (2 x 2, rank 3): its rail peer times out naming it over the network, that peer's
// node-mate times out waiting for the peer in the node's meeting, the other node passes; reset()
// recovers and the next barrier passes everywhere.
SY_TEST(NetEmulated, GpuBarrierWithAWithheldRankTimesOutNamingIt) {
    require_gpus(1);
    const Shape shape{2, 2};
    run_ranks(shape.ranks(), 1, [&](RankEnv& env) {
        BufferConfig config = network_config(shape.nodes);
        config.timeout_seconds = 2.0;
        config.network_withhold_rank = 3;
        Buffer buffer(env.communicator, env.device, config);
        env.communicator->barrier(std::chrono::seconds(30));
        buffer.barrier(env.stream);
        if (env.rank == 1 || env.rank == 0) {
            try {
                buffer.synchronize();
                buffer.check_errors();
                SY_CHECK_MSG(false, "rank " << env.rank << " should have timed out in the barrier");
            } catch (const TimeoutError& error) {
                const std::string message = error.what();
                std::printf("  rank %d: %s\n", env.rank, message.c_str());
                SY_CHECK_EQ(error.phase(), std::string("barrier"));
                SY_CHECK_EQ(error.peer(), env.rank == 1 ? 3 : 1);
                if (env.rank == 1) SY_CHECK(message.find("on node 1 over the network") != std::string::npos);
            }
        } else {
            buffer.synchronize();
            buffer.check_errors();
        }
        buffer.reset();
        buffer.barrier(env.stream);
        buffer.synchronize();
        buffer.check_errors();
    });
}

SY_TEST_MAIN()
