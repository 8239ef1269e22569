// The network check (Buffer::check_network): one block of two warps per rank exercises the
// scale-out transport (transport/net.cuh) between rail peers, on either backend, and checks what
// arrives against the contract. Warp 0 sends, warp 1 receives; lane 0 issues every request and
// every wait, the warp fills and checks data. A preflight for a multi-node deployment (on GIN it
// is the first thing to cross the NICs, and a failure names the node) and the emulated network's
// GPU test.
//
// Scenarios:
//   kNetStream    round after round, `puts_per_round` puts of `put_bytes` to every other node's rail
//                 peer, a signal add after every `puts_per_signal` puts (a group) and after the
//                 round's last put; group g travels on context g % num_contexts. A group's
//                 unsignalled puts go from the warp's lanes at once, then (after __syncwarp) lane 0
//                 puts the signalled one (`lane_parallel`; else lane 0 posts every request, which
//                 measures one thread's posting rate). The receiver, in round 0, checks at each
//                 signal that the payload of that group and of every earlier group on the same
//                 context has landed (strong signals); at the end it checks all.
//   kNetChannels  the HT shape: `channels` sender warps, each a channel putting its
//                 `puts_per_round` records (contiguous, `put_bytes` each) per round to every other
//                 node's rail peer from lane 0, a signal add after every `puts_per_signal` records
//                 (1: each record) and after its round's last; channel c travels on context
//                 c % num_contexts and raises that context's check signal. The receiver waits for
//                 every context's last value and checks everything (a bandwidth pattern).
//   kNetReuse     one source slot per peer, reused every round: the sender waits for the previous
//                 put's counter (or flushes, with `use_flush`) before overwriting it, puts round r
//                 to its own destination slot, and signals once at the end; the receiver checks that
//                 every slot holds its own round (a source read after its counter would show the
//                 next round's data).
//   kNetPingPong  node 0 and node 1 bounce a put-with-signal (`put_bytes`, or a bare signal when 0)
//                 `rounds` times; node 0 records the round trips (latency floor).
// Every sender records its start and the end of its last post (the posting rate: a kernel that
// cannot post as fast as the wire carries is the limit, not the network).
// Source data: every 8-byte word is a hash of (seed, source rank, destination node, put, word), with
// the round in its top 16 bits for kNetReuse. The check uses the reserved signal and counter ids
// (the top kNetCheckIds of each range) and the buffer's data regions.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/transport/net.cuh"

namespace switchyard::device {

enum NetCheckScenario : int32_t { kNetStream = 0, kNetReuse = 1, kNetPingPong = 2, kNetChannels = 3 };

// kNetChannels: sender warps at most (the block is one more warp, the receiver).
constexpr int32_t kNetCheckMaxChannels = 16;

// Result words (int64, device memory, zeroed by the host; kNetResultFirstBad and kNetResultRttMin
// start at -1 and INT64_MAX).
enum NetCheckResultWord : int32_t {
    kNetResultErrors = 0,     // words that did not hold what they should
    kNetResultFirstBad = 1,   // (source node << 32) | put index of the first bad word, -1 if none
    kNetResultSendStart = 2,  // globaltimer when the sender began
    kNetResultRecvEnd = 3,    // globaltimer when the receiver saw the last signal
    kNetResultRttMin = 4,     // ping-pong: shortest round trip (ns)
    kNetResultRttMax = 5,     // ping-pong: longest round trip (ns)
    kNetResultBytesSent = 6,  // payload bytes this rank put
    kNetResultFailed = 7,     // 1: a request or wait failed (timeout, poisoned)
    kNetResultSendEnd = 8,    // globaltimer when the sender's last request was posted (the latest)
    kNetResultPosts = 9,      // requests this rank posted
    kNetResultWords = 10,
};

// The check's ids: the top kNetCheckIds of each range (up to kNetCheckMaxNodes nodes; net_types.cuh).
// The other kernels of the library use ids below them.
// Signal ids: one per (source node, context), and one per source node for the ping-pong (context 0),
// so every id of a context grows by the same amount in every launch; counter ids: one per
// (destination node, context).
SY_HOST_DEVICE constexpr uint32_t net_check_signal(int32_t source_node, int32_t context) {
    return uint32_t(kNetNumSignals) - kNetCheckIds + uint32_t(source_node * kNetMaxContexts + context);
}
SY_HOST_DEVICE constexpr uint32_t net_check_ping_signal(int32_t source_node) {
    return uint32_t(kNetNumSignals) - uint32_t(kNetCheckMaxNodes) + uint32_t(source_node);
}
SY_HOST_DEVICE constexpr uint32_t net_check_counter(int32_t destination_node, int32_t context) {
    return uint32_t(kNetNumCounters) - kNetCheckIds + uint32_t(destination_node * kNetMaxContexts + context);
}

template <class Backend>
struct NetCheckArgs {
    typename Backend::Context net;
    Diagnostics diagnostics;
    uint8_t* window;      // this rank's window (its symmetric buffer)
    int64_t* results;     // [kNetResultWords]
    uint64_t src_offset;  // source region: [num_nodes][puts_per_round][put_bytes]
    uint64_t dst_offset;  // receive region: [num_nodes][slots][put_bytes], slots = puts_per_round (or rounds)
    uint64_t put_bytes;   // a multiple of 8
    uint64_t signal_base[kNetMaxContexts];   // the check's signals of each context before this launch
    uint64_t counter_base[kNetMaxContexts];  // the check's counters of each context before this launch
    uint64_t ping_base;                      // the ping-pong signal before this launch
    int32_t scenario;
    int32_t rounds;
    int32_t puts_per_round;
    int32_t puts_per_signal;
    int32_t num_contexts;  // contexts used (<= net.num_contexts)
    int32_t use_flush;     // kNetReuse: flush instead of waiting for counters
    int32_t check_every_signal;
    int32_t lane_parallel;  // kNetStream: a group's unsignalled puts from all lanes
    int32_t channels;       // kNetChannels: sender warps
    uint32_t seed;
};

// Signal groups (signal adds) per round from one source to one destination.
SY_HOST_DEVICE constexpr int32_t net_check_groups(int32_t puts_per_round, int32_t puts_per_signal) {
    return puts_per_signal > 0 ? (puts_per_round + puts_per_signal - 1) / puts_per_signal : 1;
}
// Signal adds on `context` per round.
SY_HOST_DEVICE constexpr int32_t net_check_groups_on(int32_t groups, int32_t num_contexts, int32_t context) {
    return groups / num_contexts + (context < groups % num_contexts ? 1 : 0);
}
// kNetChannels: signal adds per round on `context` from one source (channel c is on context
// c % num_contexts and signals ceil(records / puts_per_signal) times a round).
SY_HOST_DEVICE constexpr int32_t net_check_channel_signals_on(int32_t channels, int32_t records,
                                                              int32_t puts_per_signal, int32_t num_contexts,
                                                              int32_t context) {
    return net_check_groups_on(channels, num_contexts, context) * net_check_groups(records, puts_per_signal);
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace net_check {

SY_DEVICE uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

// The 48-bit body of word `word` of put `put` from `source_rank` to `destination_node`.
SY_DEVICE uint64_t pattern(uint32_t seed, int32_t source_rank, int32_t destination_node, int32_t put,
                           uint64_t word) {
    return mix((uint64_t(seed) << 40) ^ (uint64_t(source_rank) << 52) ^ (uint64_t(destination_node) << 46) ^
               (uint64_t(put) << 24) ^ word) &
           0xffffffffffffull;
}

// Runs `f` on lane 0 (requests and waits are one thread's) and gives every lane its outcome.
template <typename F>
SY_DEVICE bool on_lane0(F f) {
    int32_t value = 0;
    if (ptx::lane_id() == 0) value = f() ? 1 : 0;
    return __shfl_sync(0xffffffffu, value, 0) != 0;
}

template <class Backend>
SY_DEVICE void record_bad(const NetCheckArgs<Backend>& args, int32_t source_node, int32_t put) {
    atomicAdd(reinterpret_cast<unsigned long long*>(args.results + kNetResultErrors), 1ull);
    atomicCAS(reinterpret_cast<unsigned long long*>(args.results + kNetResultFirstBad),
              static_cast<unsigned long long>(-1ll),
              static_cast<unsigned long long>((int64_t(source_node) << 32) | uint32_t(put)));
}

template <class Backend>
SY_DEVICE void fail(const NetCheckArgs<Backend>& args) {
    atomicExch(reinterpret_cast<unsigned long long*>(args.results + kNetResultFailed), 1ull);
}

// Lane 0 waits until signal (source `node`, `context`) reaches `target`; on a timeout it fails the
// check (reported). The same answer in every lane.
template <class Backend>
SY_DEVICE bool wait_check_signal(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports,
                                 int32_t node, int32_t context, uint64_t target) {
    if (on_lane0([&] { return ports[context].wait_signal(net_check_signal(node, context), target, node); }))
        return true;
    if (ptx::lane_id() == 0) fail(args);
    return false;
}

// Writes the source of put `put` to `destination_node` (round `round` in the top bits, or none).
template <class Backend>
SY_DEVICE void fill_source(const NetCheckArgs<Backend>& args, uint64_t offset, int32_t destination_node,
                           int32_t put, int64_t round) {
    uint64_t* words = reinterpret_cast<uint64_t*>(args.window + offset);
    const uint64_t top = round >= 0 ? (uint64_t(round + 1) << 48) : 0;
    for (uint64_t w = ptx::lane_id(); w < args.put_bytes / 8; w += 32)
        words[w] = top | pattern(args.seed, args.net.rank, destination_node, put, w);
}

// Checks the slot holding put `put` from `source_node` (its rail peer's rank is the source).
// `round` >= 0: the top bits must say exactly that round.
template <class Backend>
SY_DEVICE void check_slot(const NetCheckArgs<Backend>& args, uint64_t offset, int32_t source_node,
                          int32_t put, int64_t round) {
    const int32_t source_rank = source_node * args.net.ranks_per_node + args.net.local_index;
    const volatile uint64_t* words = reinterpret_cast<const volatile uint64_t*>(args.window + offset);
    const uint64_t top = round >= 0 ? (uint64_t(round + 1) << 48) : 0;
    bool bad = false;
    for (uint64_t w = ptx::lane_id(); w < args.put_bytes / 8; w += 32)
        bad |= words[w] != (top | pattern(args.seed, source_rank, args.net.node, put, w));
    if (__any_sync(0xffffffffu, bad) && ptx::lane_id() == 0) record_bad(args, source_node, put);
}

// After the last signals of every source node: the receive end time, then the `puts` slots of each
// source node checked (their layout: node-major, `puts` a node).
template <class Backend>
SY_DEVICE void finish_receive(const NetCheckArgs<Backend>& args, int32_t puts) {
    if (ptx::lane_id() == 0) args.results[kNetResultRecvEnd] = int64_t(ptx::globaltimer_ns());
    for (int32_t node = 0; node < args.net.num_nodes; ++node)
        if (node != args.net.node)
            for (int32_t put = 0; put < puts; ++put)
                check_slot(args, args.dst_offset + (uint64_t(node) * puts + put) * args.put_bytes, node, put,
                           -1);
}

// --- kNetStream --------------------------------------------------------------------------------
// Marks the end of this sender's posting (the latest of all senders) and counts its posts.
template <class Backend>
SY_DEVICE void posted(const NetCheckArgs<Backend>& args, uint64_t posts) {
    atomicMax(reinterpret_cast<unsigned long long*>(args.results + kNetResultSendEnd),
              static_cast<unsigned long long>(ptx::globaltimer_ns()));
    atomicAdd(reinterpret_cast<unsigned long long*>(args.results + kNetResultPosts),
              static_cast<unsigned long long>(posts));
}

template <class Backend>
SY_DEVICE void stream_send(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports) {
    const int32_t me = args.net.node, nodes = args.net.num_nodes;
    const int32_t per_round = args.puts_per_round;
    for (int32_t node = 0; node < nodes; ++node) {
        if (node == me) continue;
        for (int32_t put = 0; put < per_round; ++put)
            fill_source(args, args.src_offset + (uint64_t(node) * per_round + put) * args.put_bytes, node,
                        put, -1);
    }
    __syncwarp();
    const uint32_t lane = ptx::lane_id();
    if (lane == 0) args.results[kNetResultSendStart] = int64_t(ptx::globaltimer_ns());
    const int32_t per_signal = args.puts_per_signal > 0 ? args.puts_per_signal : per_round;
    const int32_t groups = net_check_groups(per_round, args.puts_per_signal);
    // Lane-parallel: a group's puts but the last from the lanes at once; then lane 0 the last one
    // with the signal, once the others are posted (__syncwarp orders them before it). Otherwise
    // lane 0 posts them all, in order.
    const uint32_t posters = args.lane_parallel ? 32u : 1u;
    uint64_t posts = 0;
    for (int32_t round = 0; round < args.rounds; ++round) {
        for (int32_t group = 0; group < groups; ++group) {
            const int32_t context = group % args.num_contexts;
            const int32_t first = group * per_signal, last = min(first + per_signal, per_round) - 1;
            for (int32_t node = 0; node < nodes; ++node) {
                if (node == me) continue;
                auto put = [&](int32_t index, NetSignal signal) {
                    const uint64_t src =
                        args.src_offset + (uint64_t(node) * per_round + index) * args.put_bytes;
                    const uint64_t dst =
                        args.dst_offset + (uint64_t(me) * per_round + index) * args.put_bytes;
                    ++posts;
                    return ports[context].put(node, dst, src, args.put_bytes, signal);
                };
                bool ok = true;
                if (lane < posters)
                    for (int32_t index = first + int32_t(lane); index < last; index += int32_t(posters))
                        ok = ok && put(index, NetSignal{});
                __syncwarp();
                if (lane == 0) ok = ok && put(last, net_signal_add(net_check_signal(me, context), 1));
                if (__any_sync(0xffffffffu, !ok)) {
                    if (lane == 0) fail(args);
                    return;
                }
            }
        }
    }
    posted(args, posts);
    if (lane == 0)
        args.results[kNetResultBytesSent] =
            int64_t(args.rounds) * per_round * (nodes - 1) * int64_t(args.put_bytes);
}

template <class Backend>
SY_DEVICE void stream_receive(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports) {
    const int32_t me = args.net.node, nodes = args.net.num_nodes;
    const int32_t per_round = args.puts_per_round;
    const int32_t per_signal = args.puts_per_signal > 0 ? args.puts_per_signal : per_round;
    const int32_t groups = net_check_groups(per_round, args.puts_per_signal);
    for (int32_t node = 0; node < nodes; ++node) {
        if (node == me) continue;
        // Round 0, group by group: a signal promises its group and the earlier groups on its context.
        for (int32_t group = 0; group < groups && args.check_every_signal; ++group) {
            const int32_t context = group % args.num_contexts;
            const uint64_t target = args.signal_base[context] + uint64_t(group / args.num_contexts) + 1;
            if (!wait_check_signal(args, ports, node, context, target)) return;
            for (int32_t earlier = context; earlier <= group; earlier += args.num_contexts)
                for (int32_t put = earlier * per_signal; put < per_round && put < (earlier + 1) * per_signal;
                     ++put)
                    check_slot(args, args.dst_offset + (uint64_t(node) * per_round + put) * args.put_bytes,
                               node, put, -1);
        }
        // The last signal of every context, then everything.
        for (int32_t context = 0; context < args.num_contexts && context < groups; ++context) {
            const uint64_t target =
                args.signal_base[context] +
                uint64_t(args.rounds) * net_check_groups_on(groups, args.num_contexts, context);
            if (!wait_check_signal(args, ports, node, context, target)) return;
        }
    }
    finish_receive(args, per_round);
}

// --- kNetChannels -------------------------------------------------------------------------------
// Channel c's records r of every round: put c * puts_per_round + r (source and receive layouts of
// kNetStream with channels * puts_per_round puts per round).
template <class Backend>
SY_DEVICE void channels_send(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports,
                             int32_t channel) {
    const int32_t me = args.net.node, nodes = args.net.num_nodes;
    const int32_t records = args.puts_per_round, total = args.channels * records;
    for (int32_t node = 0; node < nodes; ++node) {
        if (node == me) continue;
        for (int32_t r = 0; r < records; ++r) {
            const int32_t put = channel * records + r;
            fill_source(args, args.src_offset + (uint64_t(node) * total + put) * args.put_bytes, node, put,
                        -1);
        }
    }
    // Every channel's sources are written before any channel starts (one start time for all).
    asm volatile("bar.sync 1, %0;" ::"r"(args.channels * 32) : "memory");
    if (ptx::lane_id() != 0) return;
    if (channel == 0) args.results[kNetResultSendStart] = int64_t(ptx::globaltimer_ns());
    const int32_t per_signal = args.puts_per_signal > 0 ? args.puts_per_signal : records;
    const NetPort<Backend>& port = ports[channel % args.num_contexts];
    const NetSignal signal = net_signal_add(net_check_signal(me, channel % args.num_contexts), 1);
    uint64_t posts = 0;
    for (int32_t round = 0; round < args.rounds; ++round)
        for (int32_t r = 0; r < records; ++r) {
            const int32_t put = channel * records + r;
            const bool signals = (r + 1) % per_signal == 0 || r + 1 == records;
            for (int32_t node = 0; node < nodes; ++node) {
                if (node == me) continue;
                const uint64_t src = args.src_offset + (uint64_t(node) * total + put) * args.put_bytes;
                const uint64_t dst = args.dst_offset + (uint64_t(me) * total + put) * args.put_bytes;
                ++posts;
                if (!port.put(node, dst, src, args.put_bytes, signals ? signal : NetSignal{})) {
                    fail(args);
                    return;
                }
            }
        }
    posted(args, posts);
    if (channel == 0)
        args.results[kNetResultBytesSent] =
            int64_t(args.rounds) * total * (nodes - 1) * int64_t(args.put_bytes);
}

template <class Backend>
SY_DEVICE void channels_receive(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports) {
    const int32_t me = args.net.node, nodes = args.net.num_nodes;
    const int32_t total = args.channels * args.puts_per_round;
    for (int32_t node = 0; node < nodes; ++node) {
        if (node == me) continue;
        for (int32_t context = 0; context < args.num_contexts && context < args.channels; ++context) {
            const uint64_t target =
                args.signal_base[context] +
                uint64_t(args.rounds) * net_check_channel_signals_on(args.channels, args.puts_per_round,
                                                                     args.puts_per_signal, args.num_contexts,
                                                                     context);
            if (!wait_check_signal(args, ports, node, context, target)) return;
        }
    }
    finish_receive(args, total);
}

// --- kNetReuse ---------------------------------------------------------------------------------
template <class Backend>
SY_DEVICE void reuse_send(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports) {
    const int32_t me = args.net.node, nodes = args.net.num_nodes;
    if (ptx::lane_id() == 0) args.results[kNetResultSendStart] = int64_t(ptx::globaltimer_ns());
    uint64_t sent = 0;
    for (int32_t round = 0; round < args.rounds; ++round) {
        const int32_t context = round % args.num_contexts;
        for (int32_t node = 0; node < nodes; ++node) {
            if (node == me) continue;
            const uint64_t src =
                args.src_offset + uint64_t(node) * args.put_bytes;  // one slot per peer, reused
            const NetPort<Backend>& port = ports[context];
            // The previous round's put to this peer (on whichever context) must have read the source.
            const bool read = on_lane0([&] {
                if (round == 0) return true;
                const int32_t previous = (round - 1) % args.num_contexts;
                if (args.use_flush) return ports[previous].flush();
                return ports[previous].wait_counter(
                    net_check_counter(node, previous),
                    args.counter_base[previous] + uint64_t((round - 1) / args.num_contexts) + 1);
            });
            if (!read) {
                if (ptx::lane_id() == 0) fail(args);
                return;
            }
            fill_source(args, src, node, round, round);
            __syncwarp();  // the warp's source writes before lane 0's put (its release covers them)
            const bool sent_ok = on_lane0([&] {
                const uint64_t dst = args.dst_offset + (uint64_t(me) * args.rounds + round) * args.put_bytes;
                const NetCounter counter =
                    args.use_flush ? NetCounter{} : net_counter_inc(net_check_counter(node, context));
                return port.put(node, dst, src, args.put_bytes, NetSignal{}, counter);
            });
            sent += args.put_bytes;
            if (!sent_ok) {
                if (ptx::lane_id() == 0) fail(args);
                return;
            }
        }
    }
    // One signal per context used, after everything: it covers the earlier puts on its context.
    if (ptx::lane_id() == 0) {
        posted(args, uint64_t(args.rounds) * (nodes - 1));
        for (int32_t node = 0; node < nodes; ++node)
            for (int32_t context = 0; context < args.num_contexts && context < args.rounds; ++context)
                if (node != me &&
                    !ports[context].signal(node, net_signal_add(net_check_signal(me, context), 1)))
                    fail(args);
        args.results[kNetResultBytesSent] = int64_t(sent);
    }
}

template <class Backend>
SY_DEVICE void reuse_receive(const NetCheckArgs<Backend>& args, const NetPort<Backend>* ports) {
    const int32_t me = args.net.node, nodes = args.net.num_nodes;
    for (int32_t node = 0; node < nodes; ++node) {
        if (node == me) continue;
        for (int32_t context = 0; context < args.num_contexts && context < args.rounds; ++context) {
            const uint64_t target = args.signal_base[context] + 1;
            if (!wait_check_signal(args, ports, node, context, target)) return;
        }
        for (int32_t round = 0; round < args.rounds; ++round)
            check_slot(args, args.dst_offset + (uint64_t(node) * args.rounds + round) * args.put_bytes, node,
                       round, round);
    }
    if (ptx::lane_id() == 0) args.results[kNetResultRecvEnd] = int64_t(ptx::globaltimer_ns());
}

// --- kNetPingPong ------------------------------------------------------------------------------
template <class Backend>
SY_DEVICE void ping_pong(const NetCheckArgs<Backend>& args, const NetPort<Backend>& port) {
    const int32_t me = args.net.node;
    if (me > 1 || args.net.num_nodes < 2) return;
    const int32_t other = 1 - me;
    fill_source(args, args.src_offset, other, 0, -1);
    __syncwarp();
    if (ptx::lane_id() != 0) return;
    const uint32_t inbound = net_check_ping_signal(other);
    const NetSignal outbound = net_signal_add(net_check_ping_signal(me), 1);
    const uint64_t dst = args.dst_offset + uint64_t(me) * args.put_bytes;
    int64_t shortest = 0x7fffffffffffffffll, longest = 0;
    for (int32_t round = 0; round < args.rounds; ++round) {
        const uint64_t start = ptx::globaltimer_ns();
        if (me == 1 && !port.wait_signal(inbound, args.ping_base + round + 1, other)) return fail(args);
        const bool sent = args.put_bytes > 0 ? port.put(other, dst, args.src_offset, args.put_bytes, outbound)
                                             : port.signal(other, outbound);
        if (!sent) return fail(args);
        if (me == 0) {
            if (!port.wait_signal(inbound, args.ping_base + round + 1, other)) return fail(args);
            const int64_t trip = int64_t(ptx::globaltimer_ns() - start);
            shortest = trip < shortest ? trip : shortest;
            longest = trip > longest ? trip : longest;
        }
    }
    if (me == 0) {
        args.results[kNetResultRttMin] = shortest;
        args.results[kNetResultRttMax] = longest;
    }
    posted(args, uint64_t(args.rounds));
    args.results[kNetResultBytesSent] = int64_t(args.put_bytes) * args.rounds;
}

}  // namespace net_check

// One block per rank: warp 0 sends, warp 1 receives (ping-pong: warp 0 alone); kNetChannels:
// warps [0, channels) send, warp `channels` receives.
template <class Backend>
__global__ void __launch_bounds__(32 * (kNetCheckMaxChannels + 1), 1)
    net_check_kernel(const __grid_constant__ NetCheckArgs<Backend> args) {
    const NetPort<Backend> ports[kNetMaxContexts] = {
        NetPort<Backend>(args.net, 0, args.diagnostics), NetPort<Backend>(args.net, 1, args.diagnostics),
        NetPort<Backend>(args.net, 2, args.diagnostics), NetPort<Backend>(args.net, 3, args.diagnostics)};
    const int32_t warp = int32_t(threadIdx.x / 32);
    const bool sender = warp == 0;
    switch (args.scenario) {
        case kNetChannels:
            if (warp < args.channels)
                net_check::channels_send(args, ports, warp);
            else if (warp == args.channels)
                net_check::channels_receive(args, ports);
            break;
        case kNetStream:
            if (sender)
                net_check::stream_send(args, ports);
            else if (warp == 1)
                net_check::stream_receive(args, ports);
            break;
        case kNetReuse:
            if (sender)
                net_check::reuse_send(args, ports);
            else if (warp == 1)
                net_check::reuse_receive(args, ports);
            break;
        case kNetPingPong:
            if (sender) net_check::ping_pong(args, ports[0]);
            break;
        default:
            break;
    }
}

#endif

}  // namespace switchyard::device
