// The emulated network's scheduling logic (src/net/emulated_scheduler.hpp) driven on the CPU: a
// memcpy executor moves bytes between host "windows" and checks, at every signal, counter and
// flush it is asked to write, that the contract holds at that moment. Ordering, counters, flush,
// coalescing, pacing (a real-time run of ~50 ms), the latency floor, every adversarial mode, the
// withheld rank and the byte accounting; and the request stream of LL ops across nodes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/testing.hpp"
#include "net/emulated_scheduler.hpp"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/config.hpp"
#include "switchyard/network.hpp"

using namespace switchyard;
using net::Executor;
using net::Scheduler;
using net::SchedulerConfig;

namespace {

constexpr uint64_t kWindow = 8u << 20;

// Host windows of every rank and a log of what the executor ran, with the contract checked as it
// runs: the test registers what each signal, counter and flush promises.
struct MemcpyExecutor : Executor {
    int32_t rank = 0;
    std::vector<std::vector<uint8_t>>* windows = nullptr;
    std::vector<Copy> copies;  // in execution order
    size_t copy_calls = 0;
    struct Write {
        char kind;  // 's'ignal, 'c'ounter, 'f'lush
        int32_t target;
        uint32_t id;
        uint64_t value;
        uint64_t landed;  // counters: puts copied so far with that counter
    };
    std::vector<Write> writes;
    std::map<uint32_t, std::vector<Copy>> counter_puts;  // the puts that carry each counter
    std::vector<std::string> violations;
    // Promises: (kind, target, id, value) -> the put positions that must have landed / been read.
    std::map<std::tuple<char, int32_t, uint32_t, uint64_t>, std::vector<Copy>> promises;
    std::vector<std::pair<int64_t, uint64_t>> timeline;  // (ns, bytes) of each copy call
    bool move_bytes = true;
    // Each call as submitted: when (the harness's clock, if given), its words' due time, its bytes
    // and the writes made so far.
    struct Submitted {
        int64_t at, due;
        uint64_t bytes;
        size_t writes;
    };
    const int64_t* clock = nullptr;
    std::vector<Submitted> submits;
    uint64_t call_bytes = 0;
    size_t copies_at_submit = 0, writes_at_submit = 0;
    void submit(int64_t words_due_ns) override {
        if (copies.size() == copies_at_submit && writes.size() == writes_at_submit) return;  // nothing
        submits.push_back({clock ? *clock : 0, words_due_ns, call_bytes, writes.size()});
        call_bytes = 0;
        copies_at_submit = copies.size();
        writes_at_submit = writes.size();
    }

    bool landed(const Copy& put) const {
        // A put landed when its destination bytes equal its source bytes (sources hold unique data).
        const auto& src = (*windows)[rank];
        const auto& dst = (*windows)[put.dst_rank];
        return std::memcmp(src.data() + put.src_offset, dst.data() + put.dst_offset, put.bytes) == 0;
    }
    std::vector<size_t> writes_before_copy;  // writes.size() at each copy call
    void copy(const Copy* list, size_t count) override {
        ++copy_calls;
        writes_before_copy.push_back(writes.size());
        uint64_t bytes = 0;
        for (size_t i = 0; i < count; ++i) {
            copies.push_back(list[i]);
            bytes += list[i].bytes;
            call_bytes += list[i].bytes;
            if (move_bytes)
                std::memcpy((*windows)[list[i].dst_rank].data() + list[i].dst_offset,
                            (*windows)[rank].data() + list[i].src_offset, list[i].bytes);
        }
        timeline.push_back({std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count(),
                            bytes});
    }
    void check(char kind, int32_t target, uint32_t id, uint64_t value) {
        uint64_t landed_puts = 0;
        if (kind == 'c')
            for (const Copy& put : counter_puts[id]) landed_puts += landed(put);
        writes.push_back({kind, target, id, value, landed_puts});
        auto found = promises.find({kind, target, id, value});
        if (found == promises.end()) return;
        for (const Copy& put : found->second)
            if (!landed(put))
                violations.push_back(std::string(1, kind) + " " + std::to_string(id) + "=" +
                                     std::to_string(value) + " written before the put to offset " +
                                     std::to_string(put.dst_offset) + " landed");
    }
    void write_signal(int32_t dst_rank, int32_t, uint32_t id, uint64_t value) override {
        check('s', dst_rank, id, value);
    }
    void write_counter(int32_t, uint32_t id, uint64_t value) override { check('c', rank, id, value); }
    void write_flush_done(int32_t context, uint64_t value) override {
        check('f', rank, uint32_t(context), value);
    }
    size_t index_of(char kind, int32_t target, uint32_t id, uint64_t value) const {
        for (size_t i = 0; i < writes.size(); ++i)
            if (writes[i].kind == kind && writes[i].target == target && writes[i].id == id &&
                writes[i].value == value)
                return i;
        return SIZE_MAX;
    }
};

// One rank's view: windows for every rank, its scheduler and executor, and helpers that post
// requests the way a kernel would.
struct Harness {
    std::vector<std::vector<uint8_t>> windows;
    MemcpyExecutor executor;
    SchedulerConfig config;
    std::unique_ptr<Scheduler> scheduler;
    std::vector<uint64_t> next_position = std::vector<uint64_t>(device::kNetMaxContexts, 0);
    int64_t now = 0;

    explicit Harness(SchedulerConfig c) : config(c) {
        const int ranks = c.num_nodes * c.ranks_per_node;
        config.window_bytes = kWindow;
        windows.assign(size_t(ranks), std::vector<uint8_t>(kWindow, 0));
        std::mt19937_64 random(7);
        for (auto& byte : windows[c.rank]) byte = uint8_t(random());  // unique source data
        executor.rank = c.rank;
        executor.windows = &windows;
        scheduler = std::make_unique<Scheduler>(config, executor);
    }
    int32_t rail_rank(int32_t node) const {
        return node * config.ranks_per_node + config.rank % config.ranks_per_node;
    }

    uint64_t post(int32_t context, uint32_t kind, int32_t node, uint64_t dst, uint64_t src, uint64_t bytes,
                  uint32_t signal = device::kNetNone, uint64_t add = 0, uint32_t counter = device::kNetNone) {
        device::NetDescriptor d{};
        d.kind = kind;
        d.peer_node = node;
        d.dst_offset = dst;
        d.src_offset = src;
        d.bytes = bytes;
        d.signal_id = signal;
        d.signal_value = add;
        d.counter_id = counter;
        const uint64_t position = next_position[context]++;
        const std::string problem = scheduler->accept(context, position, d, now);
        SY_CHECK_MSG(problem.empty(), problem);
        return position;
    }
    Executor::Copy put(int32_t context, int32_t node, uint64_t dst, uint64_t src, uint64_t bytes,
                       uint32_t signal = device::kNetNone, uint64_t add = 0,
                       uint32_t counter = device::kNetNone) {
        post(context, device::kNetRequestPut, node, dst, src, bytes, signal, add, counter);
        if (counter != device::kNetNone)
            executor.counter_puts[counter].push_back({rail_rank(node), dst, src, bytes});
        return {rail_rank(node), dst, src, bytes};
    }
    uint64_t flush(int32_t context) { return post(context, device::kNetRequestFlush, 0, 0, 0, 0); }
    // Runs simulated time forward until nothing is pending (or `limit` ns passed).
    void run(int64_t limit = 1'000'000'000) {
        const int64_t end = now + limit;
        while (now < end) {
            const int64_t due = scheduler->issue(now);
            if (!scheduler->has_pending() || due == net::kNever) return;
            now = std::max(now + 1, due);
        }
    }
};

SchedulerConfig two_nodes(uint32_t adversarial = 0) {
    SchedulerConfig c;
    c.rank = 0;
    c.num_nodes = 2;
    c.ranks_per_node = 1;
    c.num_contexts = 4;
    c.adversarial = adversarial;
    c.latency_ns = 3000;
    c.bytes_per_ns = 46.0;
    return c;
}

// A stream of puts with a signal after every `per_signal`, on `contexts` contexts; registers what
// each signal promises (its group and every earlier put of its lane) and checks it held.
void stream_with_signals(Harness& h, int puts, uint64_t bytes, int per_signal, int contexts, uint64_t seed) {
    std::mt19937_64 random(seed);
    std::vector<std::vector<Executor::Copy>> lane(contexts);
    std::vector<uint64_t> signal_value(contexts, 0);
    for (int i = 0; i < puts; ++i) {
        const int context = (i / per_signal) % contexts;
        const bool signals = (i + 1) % per_signal == 0;
        const uint64_t size = bytes ? bytes : 8 * (1 + random() % 64);
        const uint64_t offset = uint64_t(i) * 1024;
        const Executor::Copy put = h.put(context, 1, offset, offset, size,
                                         signals ? uint32_t(context) : device::kNetNone, signals ? 1 : 0);
        lane[context].push_back(put);
        if (signals) {
            ++signal_value[context];
            h.executor.promises[{'s', h.rail_rank(1), uint32_t(context), signal_value[context]}] =
                lane[context];
        }
        if (random() % 4 == 0) h.scheduler->issue(h.now);  // issue while requests keep coming
        h.now += int64_t(random() % 2000);
    }
    h.run();
    for (const auto& v : h.executor.violations) std::printf("  violation: %s\n", v.c_str());
    SY_CHECK(h.executor.violations.empty());
    for (int c = 0; c < contexts; ++c)
        SY_CHECK(h.executor.index_of('s', h.rail_rank(1), uint32_t(c), signal_value[c]) != SIZE_MAX);
    for (const auto& put : h.executor.copies) SY_CHECK(put.bytes > 0);
    for (int c = 0; c < contexts; ++c)
        for (const auto& put : lane[c]) SY_CHECK(h.executor.landed(put));
}

// After an HT-shaped run (channel c's records with a signal add each on id c, on context c % 4):
// no promise was broken, every channel's last signal value was written, every put landed.
void check_channels_delivered(const Harness& h, int channels, int records,
                              const std::vector<std::vector<Executor::Copy>>& lane) {
    for (const auto& v : h.executor.violations) std::printf("  violation: %s\n", v.c_str());
    SY_CHECK(h.executor.violations.empty());
    for (int c = 0; c < channels; ++c)
        SY_CHECK(h.executor.index_of('s', 1, uint32_t(c), uint64_t(records)) != SIZE_MAX);
    for (const auto& puts : lane)
        for (const auto& put : puts) SY_CHECK(h.executor.landed(put));
}

}  // namespace

SY_TEST(NetScheduler, StrongSignalsInEveryMode) {
    for (uint32_t mode :
         {0u, uint32_t(kNetworkReorderPuts), uint32_t(kNetworkLateSourceReads),
          uint32_t(kNetworkContextsOutOfOrder),
          uint32_t(kNetworkReorderPuts | kNetworkLateSourceReads | kNetworkContextsOutOfOrder)}) {
        for (int contexts : {1, 3}) {
            Harness h(two_nodes(mode));
            stream_with_signals(h, 600, 0, 7, contexts, mode * 10 + contexts);
        }
    }
}

SY_TEST(NetScheduler, SignalWaitsForItsPayloadNotOnlyForItsIssue) {
    // The signal of a lane comes after that lane's copies in the executor's order; a bare signal
    // on a lane without puts needs nothing.
    Harness h(two_nodes());
    h.put(0, 1, 0, 0, 4096);
    h.post(0, device::kNetRequestSignal, 1, 0, 0, 0, 5, 3);
    h.post(1, device::kNetRequestSignal, 1, 0, 0, 0, 6, 1);
    h.run();
    const size_t signal = h.executor.index_of('s', 1, 5, 3);
    SY_CHECK(signal != SIZE_MAX);
    SY_CHECK(h.executor.index_of('s', 1, 6, 1) != SIZE_MAX);
    SY_CHECK(h.executor.copies.size() == 1);
    SY_CHECK(h.executor.landed({1, 0, 0, 4096}));
    // Adds accumulate into absolute values.
    h.post(0, device::kNetRequestSignal, 1, 0, 0, 0, 5, 4);
    h.run();
    SY_CHECK(h.executor.index_of('s', 1, 5, 7) != SIZE_MAX);
}

SY_TEST(NetScheduler, CountersFollowTheirCopies) {
    for (uint32_t mode : {0u, uint32_t(kNetworkReorderPuts), uint32_t(kNetworkLateSourceReads)}) {
        Harness h(two_nodes(mode));
        std::vector<Executor::Copy> done;
        for (int i = 0; i < 40; ++i) {
            done.push_back(h.put(0, 1, uint64_t(i) * 4096, uint64_t(i) * 4096, 4096, device::kNetNone, 0, 9));
            h.now += 500;
            h.scheduler->issue(h.now);
        }
        h.run();
        // Counter value v: at least v of its puts had been copied when it was written.
        uint64_t last = 0;
        for (const auto& write : h.executor.writes)
            if (write.kind == 'c') {
                SY_CHECK(write.value > last);  // monotone
                SY_CHECK(write.landed >= write.value);
                last = write.value;
            }
        SY_CHECK_EQ(last, uint64_t(40));
    }
}

SY_TEST(NetScheduler, FlushReportsWhenEarlierSourcesWereRead) {
    for (uint32_t mode : {0u, uint32_t(kNetworkLateSourceReads),
                          uint32_t(kNetworkReorderPuts | kNetworkContextsOutOfOrder)}) {
        Harness h(two_nodes(mode));
        std::vector<Executor::Copy> before;
        for (int i = 0; i < 25; ++i)
            before.push_back(h.put(2, 1, uint64_t(i) * 8192, uint64_t(i) * 8192, 8192));
        const uint64_t position = h.flush(2);
        h.executor.promises[{'f', 0, 2, position + 1}] = before;
        h.put(2, 1, 1 << 20, 1 << 20, 8192);  // after the flush: not covered
        h.now += 1;
        h.scheduler->issue(h.now);
        h.run();
        SY_CHECK(h.executor.violations.empty());
        SY_CHECK(h.executor.index_of('f', 0, 2, position + 1) != SIZE_MAX);
    }
}

SY_TEST(NetScheduler, CoalescesContiguousPutsIntoChunks) {
    // 1,001 records of 7 KiB, contiguous at source and destination, one signal at the end. Posted
    // by one "warp" in order, each batch (up to batch_bytes) is one copy; posted by two taking
    // alternate records (consecutive requests not contiguous), each batch is one copy per warp.
    for (int warps : {1, 2}) {
        Harness h(two_nodes());
        const uint64_t record = 7168, records = 1000;
        for (uint64_t i = 0; i < records; ++i) {
            const uint64_t r = warps == 1 ? i : (i % 2) * (records / 2) + i / 2;
            h.put(0, 1, r * record, r * record, record);
        }
        h.put(0, 1, records * record, records * record, record, 0, 1);
        h.run();
        const uint64_t total = (records + 1) * record;
        const uint64_t per_batch = h.config.batch_bytes / record;  // records
        const uint64_t batches = (records + 1 + per_batch - 1) / per_batch;
        SY_CHECK(h.executor.violations.empty());
        SY_CHECK_EQ(h.scheduler->stats().batches, batches);
        SY_CHECK(h.executor.copies.size() <= size_t(warps) * batches);
        SY_CHECK(h.executor.landed({1, 0, 0, total}));
        SY_CHECK_EQ(h.scheduler->stats().bytes_delivered[1], total);
        SY_CHECK_EQ(h.scheduler->stats().puts[1], records + 1);
    }
}

SY_TEST(NetScheduler, RecordsWithASignalEachCoalesceAcrossSignals) {
    // The HT shape: 16 channels (sender warps) put 7 KiB records, each with a signal add on its
    // channel's id, contiguous per channel, channel c on context c % 4, interleaved in posting
    // order and arriving faster than the wire. Every signal value written promises its channel's
    // records so far and every earlier put of its lane (context); the batches coalesce each
    // channel's records across their signals, so copies and executor calls are few, and every
    // channel's last value is written.
    Harness h(two_nodes());
    const int channels = 16, records = 48;
    const uint64_t record = 7168, region = uint64_t(records) * record;
    std::vector<std::vector<Executor::Copy>> lane(4);
    for (int r = 0; r < records; ++r) {
        for (int c = 0; c < channels; ++c) {
            const uint64_t offset = uint64_t(c) * region + uint64_t(r) * record;
            const Executor::Copy put = h.put(c % 4, 1, offset, offset, record, uint32_t(c), 1);
            lane[c % 4].push_back(put);
            h.executor.promises[{'s', 1, uint32_t(c), uint64_t(r + 1)}] = lane[c % 4];
        }
        h.now += 1000;  // 16 records (115 KB) per us: faster than 46 GB/s
        if (r % 3 == 0) h.scheduler->issue(h.now);
    }
    h.run();
    check_channels_delivered(h, channels, records, lane);
    const auto& stats = h.scheduler->stats();
    std::printf("  %d records: %zu copies in %llu copy calls, %llu words in %llu write calls, %llu batches\n",
                channels * records, h.executor.copies.size(), (unsigned long long)stats.copy_calls,
                (unsigned long long)stats.words, (unsigned long long)stats.write_calls,
                (unsigned long long)stats.batches);
    SY_CHECK_EQ(stats.signal_adds, uint64_t(channels * records));
    SY_CHECK_EQ(stats.signals[1], uint64_t(channels * records));
    // Each batch holds a few records of each of its context's four channels: one copy per channel.
    SY_CHECK(h.executor.copies.size() <= 4 * size_t(stats.batches));
    SY_CHECK(stats.copy_calls * 8 < uint64_t(channels * records));
    SY_CHECK(stats.words < uint64_t(channels * records) / 2);
}

SY_TEST(NetScheduler, LlOpsAtDeepSeekRoutingDeliverEverySignal) {
    // What the LL kernels across nodes post on 2 x 1 with top-8 of 256 experts and 128 tokens
    // (hidden 1024 to fit the test windows): an empty dispatch (its node header with the dispatch
    // signal), a dispatch (its records in one put, then the header with the signal), then a flat
    // combine: as the forwarder of the other node's tokens, each row this node owns put from the
    // forward area to the home's combine rows, warps interleaved, each with the forward counter,
    // then the network header with the combine signal. Every signal must reach its op's value,
    // after its payload, and the counter every forward put.
    Harness h(two_nodes());
    const int32_t T = 128, K = 8, E = 256, L = E / 2;
    const uint64_t record = 1200, row = 2048, header = 1152;
    const int32_t context = device::ll_net_context(4);
    std::mt19937_64 random(11);
    // Layout inside the test windows: headers, records, combine rows, forward area.
    const uint64_t headers = 0, records_at = 64 << 10, rows_at = 1 << 20, forward_at = 4 << 20;
    std::vector<Executor::Copy> lane;
    auto signal_put = [&](uint64_t dst, uint64_t src, uint64_t bytes, uint32_t signal) {
        lane.push_back(h.put(context, 1, dst, src, bytes, signal, device::kLlNetOpAmount));
        h.executor.promises[{'s', 1, signal, device::kLlNetOpAmount}] = lane;
    };
    const uint32_t empty_dispatch = device::ll_net_signal(device::kLlDispatch, 1, 0);
    const uint32_t dispatch = device::ll_net_signal(device::kLlDispatch, 0, 0);
    const uint32_t combine = device::ll_net_signal(device::kLlCombine, 1, 0);
    // Empty dispatch (sequence 1, set 1), then a full one (sequence 2, set 0).
    signal_put(headers, headers + header, header, empty_dispatch);
    h.now += 20'000;
    h.scheduler->issue(h.now);
    lane.push_back(h.put(context, 1, records_at, records_at + uint64_t(T) * record, uint64_t(T) * record));
    signal_put(headers + 2 * header, headers + 3 * header, header, dispatch);
    h.now += 20'000;
    h.scheduler->issue(h.now);
    // The combine (sequence 1, set 1): the rows of the slots this node owns, 64 warps taking
    // tokens in turn, each warp its tokens' rows in order.
    std::vector<std::vector<std::pair<int32_t, int32_t>>> per_warp(64);  // (token, k)
    for (int32_t t = 0; t < T; ++t) {
        std::vector<int32_t> experts;
        while (int32_t(experts.size()) < K) {
            const int32_t e = int32_t(random() % E);
            if (std::find(experts.begin(), experts.end(), e) == experts.end()) experts.push_back(e);
        }
        for (int32_t k = 0; k < K; ++k)
            if (experts[size_t(k)] < L) per_warp[size_t(t) % per_warp.size()].push_back({t, k});
    }
    uint64_t forward_puts = 0;
    for (size_t step = 0, left = 1; left > 0; ++step) {
        left = 0;
        for (const auto& rows : per_warp) {
            if (step >= rows.size()) continue;
            ++left;
            const uint64_t slot = uint64_t(rows[step].second) * T + uint64_t(rows[step].first);
            lane.push_back(h.put(context, 1, rows_at + slot * row, forward_at + slot * row, row,
                                 device::kNetNone, 0, device::kLlNetForwardCounter));
            ++forward_puts;
            if (random() % 8 == 0) h.scheduler->issue(h.now);
            h.now += int64_t(random() % 300);
        }
    }
    signal_put(headers + 4 * header, headers + 4 * header + 64, 64, combine);
    h.run();
    for (const auto& v : h.executor.violations) std::printf("  violation: %s\n", v.c_str());
    SY_CHECK(h.executor.violations.empty());
    for (uint32_t signal : {empty_dispatch, dispatch, combine})
        SY_CHECK_MSG(h.executor.index_of('s', 1, signal, device::kLlNetOpAmount) != SIZE_MAX,
                     "signal " << signal << " never reached one op");
    SY_CHECK(h.executor.index_of('c', 0, device::kLlNetForwardCounter, forward_puts) != SIZE_MAX);
    for (const auto& put : lane) SY_CHECK(h.executor.landed(put));
    std::printf("  %llu forward rows in %zu copies\n", (unsigned long long)forward_puts,
                h.executor.copies.size());
}

SY_TEST(NetScheduler, SignalsOfABatchGoAsTheirChunksDo) {
    // One batch: a 1 MiB put with signal A, then a contiguous 1 MiB put with signal B (2 chunks of
    // 23 us of wire each at 46 GB/s). A is written after the first chunk's call, before the second
    // chunk is issued; B after the second.
    SchedulerConfig config = two_nodes();
    config.batch_bytes = 4 << 20;
    Harness h(config);
    const uint64_t mib = 1 << 20;
    h.put(0, 1, 0, 0, mib, 1, 1);
    h.put(0, 1, mib, mib, mib, 2, 1);
    h.run();
    SY_CHECK(h.executor.violations.empty());
    SY_CHECK_EQ(h.executor.copy_calls, size_t(2));
    const size_t a = h.executor.index_of('s', 1, 1, 1), b = h.executor.index_of('s', 1, 2, 1);
    SY_CHECK(a != SIZE_MAX && b != SIZE_MAX);
    SY_CHECK_EQ(h.executor.writes_before_copy.size(), size_t(2));
    SY_CHECK(a < h.executor.writes_before_copy[1]);  // A went before the second chunk's call
    SY_CHECK(b >= h.executor.writes_before_copy[1]);
    SY_CHECK_EQ(h.scheduler->stats().batches, uint64_t(1));
}

SY_TEST(NetScheduler, LatencyFloor) {
    Harness h(two_nodes());
    h.config.latency_ns = 3000;
    h.put(0, 1, 0, 0, 64, 0, 1);
    SY_CHECK_EQ(h.scheduler->issue(h.now), int64_t(3000));  // due exactly one latency later
    SY_CHECK(h.executor.copies.empty() && h.executor.writes.empty());
    SY_CHECK_EQ(h.scheduler->issue(2999), int64_t(3000));
    SY_CHECK(h.executor.copies.empty());
    h.scheduler->issue(3000);
    SY_CHECK_EQ(h.executor.copies.size(), size_t(1));
    SY_CHECK(h.executor.index_of('s', 1, 0, 1) != SIZE_MAX);
}

SY_TEST(NetScheduler, LatencyFloorHoldsForWordsHandedOverAhead) {
    // With a lead, a put and a bare signal (no payload: no wire slot) are handed over at once, and
    // their words are due no sooner than one latency after their post (here: when the engine saw
    // them).
    for (bool bare : {false, true}) {
        SchedulerConfig config = two_nodes();
        config.latency_ns = 25'000;
        config.issue_lead_ns = 100'000;
        Harness h(config);
        h.executor.clock = &h.now;
        h.now = 1'000'000;
        if (bare)
            h.post(0, device::kNetRequestSignal, 1, 0, 0, 0, 0, 1);
        else
            h.put(0, 1, 0, 0, 64, 0, 1);
        h.run();
        SY_CHECK(h.executor.index_of('s', 1, 0, 1) != SIZE_MAX);
        SY_CHECK_EQ(h.executor.submits.size(), size_t(1));
        SY_CHECK(h.executor.submits[0].at <= 1'000'000 + config.quiet_ns);
        SY_CHECK(h.executor.submits[0].due >= 1'000'000 + config.latency_ns);
    }
}

SY_TEST(NetScheduler, PacingHoldsTheCapInSimulatedTime) {
    // 46 GB/s, ~2.3 GB of 64 KiB puts over four contexts (a 50 ms run), simulated clock.
    SchedulerConfig config = two_nodes();
    config.latency_ns = 3000;
    Harness h(config);
    h.executor.move_bytes = false;
    const uint64_t bytes = 64 << 10;
    const int puts = 35000;
    uint64_t issued_by_half = 0;
    for (int i = 0; i < puts; ++i)
        h.put(i % 4, 1, 0, 0, bytes, i % 64 == 63 ? uint32_t(i % 4) : device::kNetNone, 1);
    const int64_t start = h.now;
    while (h.scheduler->has_pending()) {
        const int64_t due = h.scheduler->issue(h.now);
        if (due == net::kNever) break;
        if (h.now <= start + 25'000'000) issued_by_half = h.scheduler->stats().bytes_delivered[1];
        h.now = std::max(h.now + 1, due);
    }
    const uint64_t total = h.scheduler->stats().bytes_delivered[1];
    SY_CHECK_EQ(total, uint64_t(puts) * bytes);
    // Everything was due after the latency; from then on the wire is the limit (the last chunk
    // goes up to one issue horizon before its wire slot ends).
    const double seconds = double(h.now - start - config.latency_ns) / 1e9;
    const double rate = double(total) / seconds / 1e9;
    std::printf("  %.1f MB in %.3f simulated ms: %.4f GB/s against 46\n", total / 1e6, seconds * 1e3, rate);
    SY_CHECK(rate <= 46.0 * 1.01 && rate >= 46.0 * 0.99);
    // Small copies (64 KiB: 1.4 us of wire) go several per executor call (the issue horizon).
    std::printf("  %zu copies in %zu executor calls\n", h.executor.copies.size(), h.executor.copy_calls);
    SY_CHECK(h.executor.copy_calls * 2 < h.executor.copies.size());
    // And evenly: half the time, half the bytes (within a chunk or two).
    SY_CHECK(std::abs(double(issued_by_half) - 46.0 * (25e6 - 3000)) < 4.0 * double(config.chunk_bytes));
}

SY_TEST(NetScheduler, PacingHoldsTheCapOverAMeasuredRun) {
    // Real time: 2 GB/s cap, ~100 MB queued at once (a ~50 ms run); copies are recorded, not made.
    // The cap is an upper bound whatever the machine does (a chunk is issued when its wire slot
    // ends, at most one horizon early): at every copy call, the bytes issued so far fit the wire
    // time since the requests were posted. The wire clock runs on the requests' due times, so a
    // late wake-up (a loaded CI machine preempts this thread) costs nothing but the last one.
    SchedulerConfig config = two_nodes();
    config.bytes_per_ns = 2.0;
    config.latency_ns = 0;
    Harness h(config);
    h.executor.move_bytes = false;
    const uint64_t bytes = 64 << 10;
    const int puts = 1600;
    using Clock = std::chrono::steady_clock;
    auto now_ns = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    };
    h.now = now_ns();
    const int64_t posted = h.now;
    for (int i = 0; i < puts; ++i)
        h.put(i % 4, 1, 0, 0, bytes, i % 64 == 63 ? uint32_t(i % 4) : device::kNetNone, 1);
    int64_t due = 0, last_late = 0;
    while (h.scheduler->has_pending()) {
        const int64_t now = now_ns();
        last_late = due > 0 ? std::max<int64_t>(0, now - due) : 0;
        due = h.scheduler->issue(now);
        if (due == net::kNever) break;
        while (now_ns() < due) {
        }
    }
    const auto& timeline = h.executor.timeline;
    SY_CHECK(!timeline.empty());
    uint64_t total = 0;
    bool under_cap = true;
    for (const auto& [t, b] : timeline) {
        total += b;
        under_cap &= double(total) <= config.bytes_per_ns * double(t - posted + config.issue_horizon_ns);
    }
    SY_CHECK(under_cap);
    SY_CHECK_EQ(total, uint64_t(puts) * bytes);
    const double seconds = double(timeline.back().first - posted) / 1e9;
    const double rate = double(total) / seconds / 1e9;
    const double rate_on_time = double(total) / (seconds - double(last_late) / 1e9) / 1e9;
    const auto& stats = h.scheduler->stats();
    std::printf(
        "  %.1f MB in %.2f ms: %.3f GB/s against a 2 GB/s cap (%.3f GB/s without the last wake-up's "
        "%.2f ms late); %llu copy calls, %.2f ms late in all\n",
        total / 1e6, seconds * 1e3, rate, rate_on_time, last_late / 1e6, (unsigned long long)stats.copy_calls,
        stats.late_ns / 1e6);
    SY_CHECK(rate <= 2.0 * 1.02);
    SY_CHECK(rate_on_time >= 2.0 * 0.98);
}

SY_TEST(NetScheduler, LatencyAndWireCountFromThePost) {
    // The engine took a put 50 us after its kernel posted it: it is due one latency after the post,
    // so it goes at once, and a second batch's wire slot follows the first's from the post on. A
    // request of the lane posted earlier than the one before it is not due before it.
    SchedulerConfig config = two_nodes();
    Harness h(config);
    const int64_t posted = 1'000'000;
    h.now = posted + 50'000;
    device::NetDescriptor d{};
    d.kind = device::kNetRequestPut;
    d.peer_node = 1;
    d.bytes = 460'000;  // 10 us of wire at 46 GB/s
    d.signal_id = 0;
    d.signal_value = 1;
    d.counter_id = device::kNetNone;
    SY_CHECK(h.scheduler->accept(0, 0, d, h.now, posted).empty());
    d.dst_offset = d.src_offset = 1 << 20;
    SY_CHECK(h.scheduler->accept(0, 1, d, h.now, posted).empty());
    h.scheduler->issue(h.now + config.quiet_ns);  // quiet: the lane's batch forms
    // Both due (3 us after the post) and both slots (ending 13 and 23 us after it) over by now.
    SY_CHECK_EQ(h.executor.copies.size(), size_t(2));
    SY_CHECK(h.executor.index_of('s', 1, 0, 2) != SIZE_MAX);
    SY_CHECK(h.executor.violations.empty());

    Harness order(config);
    order.now = 2'000'000;
    device::NetDescriptor signal{};
    signal.kind = device::kNetRequestSignal;
    signal.peer_node = 1;
    signal.signal_id = 0;
    signal.signal_value = 1;
    signal.counter_id = device::kNetNone;
    SY_CHECK(order.scheduler->accept(0, 0, signal, order.now, order.now - 1'000).empty());
    SY_CHECK(order.scheduler->accept(0, 1, signal, order.now, order.now - 2'500).empty());
    SY_CHECK_EQ(order.scheduler->issue(order.now), order.now + 2'000);  // the first's due time
    SY_CHECK(order.executor.writes.empty());
    order.scheduler->issue(order.now + 2'000 + config.quiet_ns);
    SY_CHECK(order.executor.index_of('s', 1, 0, 2) != SIZE_MAX);
}

SY_TEST(NetScheduler, AnEngineLateToItsSlotsLosesNoWireTime) {
    // Simulated time, the bandwidth test's traffic (64 KiB puts, a signal every 16, 2 contexts,
    // 46 GB/s), but issue() runs only every 30 us, whatever is due: the engine is late to nearly
    // every slot. The wire clock does not move with the engine, so the run still takes the wire
    // time (the overdue chunks go together), and the bytes issued never run ahead of the cap.
    SchedulerConfig config = two_nodes();
    Harness h(config);
    h.executor.move_bytes = false;
    const uint64_t bytes = 64 << 10;
    const int puts = 8192;
    for (int i = 0; i < puts; ++i) {
        const int put = i % 64, context = (put / 16) % 2;
        h.put(context, 1, uint64_t(64 + put) * bytes, uint64_t(put) * bytes, bytes,
              put % 16 == 15 ? uint32_t(context) : device::kNetNone, 1);
    }
    const int64_t posted = h.now;
    bool under_cap = true;
    while (h.scheduler->has_pending()) {
        h.now += 30'000;
        h.scheduler->issue(h.now);
        under_cap &=
            double(h.scheduler->stats().bytes_delivered[1]) <=
            config.bytes_per_ns * double(h.now - posted - config.latency_ns + config.issue_horizon_ns);
    }
    const double wire_ms = double(puts) * double(bytes) / config.bytes_per_ns / 1e6;
    const double took_ms = double(h.now - posted) / 1e6;
    const auto& stats = h.scheduler->stats();
    std::printf(
        "  %.1f MB: %.3f ms of wire, done by %.3f ms with issue() every 30 us (%llu copy calls, "
        "%.1f us late at most)\n",
        puts * double(bytes) / 1e6, wire_ms, took_ms, (unsigned long long)stats.copy_calls,
        stats.late_max_ns / 1e3);
    SY_CHECK(under_cap);
    SY_CHECK(took_ms <= wire_ms + 0.03 + config.latency_ns / 1e6 + 0.001);
    SY_CHECK(stats.late_max_ns > 0);
    SY_CHECK_EQ(stats.bytes_delivered[1], uint64_t(puts) * bytes);
}

// The HT batches' shape, smaller: 32 puts of 240 KB (5.2 us of wire each at 46 GB/s) with a signal
// each, posted 2 us apart (the senders run ahead of the wire), then a flush; with an issue lead of
// `lead_ns`. Returns the executor's calls (each signal's promise checked as it was written).
std::vector<MemcpyExecutor::Submitted> ht_batches_with_lead(int64_t lead_ns, size_t& flushed) {
    SchedulerConfig config = two_nodes();
    config.issue_lead_ns = lead_ns;
    Harness h(config);
    h.executor.clock = &h.now;
    const uint64_t bytes = 240'000;
    const int puts = 32;
    std::vector<Executor::Copy> lane;
    for (int i = 0; i < puts; ++i) {
        lane.push_back(h.put(0, 1, uint64_t(i) * bytes, uint64_t(i) * bytes, bytes, 0, 1));
        h.executor.promises[{'s', 1, 0, uint64_t(i + 1)}] = lane;
        h.scheduler->issue(h.now);
        h.now += 2'000;
    }
    h.flush(0);
    h.run();
    SY_CHECK(h.executor.violations.empty());
    SY_CHECK(h.executor.index_of('s', 1, 0, uint64_t(puts)) !=
             SIZE_MAX);  // (a call writes a word's latest value)
    flushed = h.executor.index_of('f', 0, 0, uint64_t(puts + 1));
    SY_CHECK(flushed != SIZE_MAX);
    uint64_t total = 0;
    for (const auto& call : h.executor.submits) total += call.bytes;
    SY_CHECK_EQ(total, uint64_t(puts) * bytes);
    return h.executor.submits;
}

SY_TEST(NetScheduler, CallsHandedOverAheadHoldTheirWordsToTheirSlots) {
    // With a 60 us lead, calls are handed over up to the lead before their words are due, never
    // earlier; the words are due no sooner than the wire carries the bytes (the bytes of the calls
    // whose words are due by t never exceed cap x (t - latency)); the last words (and the flush
    // report) are due when they are without a lead, where each call goes within the issue horizon
    // of its words' time.
    const SchedulerConfig config = two_nodes();
    const int64_t lead = 60'000;
    size_t flushed_ahead = 0, flushed_plain = 0;
    const auto ahead = ht_batches_with_lead(lead, flushed_ahead);
    const auto plain = ht_batches_with_lead(0, flushed_plain);
    uint64_t total = 0;
    bool under_cap = true, within_lead = true, plain_on_time = true;
    int64_t most_ahead = 0, last_due = 0, last_due_plain = 0, flush_due = 0;
    for (const auto& call : ahead) {
        total += call.bytes;
        if (call.due == 0) continue;
        under_cap &= double(total) <= config.bytes_per_ns * double(call.due - config.latency_ns) + 1.0;
        within_lead &= call.at >= call.due - lead - config.issue_horizon_ns;
        most_ahead = std::max(most_ahead, call.due - call.at);
        last_due = std::max(last_due, call.due);
        if (flush_due == 0 && call.writes > flushed_ahead) flush_due = call.due;
    }
    for (const auto& call : plain) {
        if (call.due == 0) continue;
        plain_on_time &= call.at >= call.due - config.issue_horizon_ns;
        last_due_plain = std::max(last_due_plain, call.due);
    }
    std::printf(
        "  %zu calls handed over up to %.1f us ahead, last words due at %.1f us (%zu calls, %.1f us "
        "without a lead)\n",
        ahead.size(), most_ahead / 1e3, last_due / 1e3, plain.size(), last_due_plain / 1e3);
    SY_CHECK(under_cap);
    SY_CHECK(within_lead);
    SY_CHECK(plain_on_time);
    SY_CHECK(most_ahead >= lead / 2);
    SY_CHECK(std::abs(double(last_due - last_due_plain)) < 1'000.0);
    SY_CHECK(flush_due >= last_due_plain - 1'000);
}

SY_TEST(NetScheduler, BurstsCountTheWiresIdleStretches) {
    // Three 460 KB puts (10 us of wire each at 46 GB/s): the second due 4 us after the first's
    // wire ended (an idle stretch inside the burst), the third 300 us later (a new burst).
    Harness h(two_nodes());
    h.put(0, 1, 0, 0, 460'000);
    h.run();  // due at 3 us, wire until 13 us
    h.now = 14'000;
    h.put(0, 1, 460'000, 460'000, 460'000);  // due at 17 us: 4 us idle
    h.run();
    h.now = 330'000;
    h.put(0, 1, 920'000, 920'000, 460'000);  // due at 333 us, after the wire idled 306 us
    h.run();
    const net::SchedulerStats& stats = h.scheduler->stats();
    SY_CHECK_EQ(stats.bursts, uint64_t(2));
    SY_CHECK_EQ(stats.burst_gaps, uint64_t(1));
    SY_CHECK(std::abs(stats.burst_idle_ns - 4'000.0) < 1.0);
    SY_CHECK(std::abs(stats.wire_ns - 30'000.0) < 1.0);
    NetworkEngineStats engine;
    engine.bursts = stats.bursts;
    engine.burst_gaps = stats.burst_gaps;
    engine.burst_idle_ns = uint64_t(stats.burst_idle_ns);
    SY_CHECK(engine.summary().find("in 2 bursts, idle 2.0 us a burst in 0.5 gaps") != std::string::npos);
}

SY_TEST(NetScheduler, CopiesOfOneCallCoalesceAcrossBatches) {
    // The HT shape (16 channels of 7 KiB records with a signal each, channel c on context c % 4,
    // each channel's records contiguous, the channels' regions apart) posted at once, issue() every
    // 100 us (an engine far behind the wire): each call carries several batches of every lane (a batch holds
    // records of its context's 4 channels), and a channel's records in them are contiguous, so the call makes
    // one copy per channel run instead of one per batch and channel. Every signal still keeps its
    // promise (the call's words follow all its copies).
    SchedulerConfig config = two_nodes();
    config.batch_bytes = 256 << 10;  // many batches per call, as when the engine is far behind
    Harness h(config);
    const int channels = 16, records = 120;
    const uint64_t record = 4096, region = uint64_t(records) * record + 4096;
    std::vector<std::vector<Executor::Copy>> lane(4);
    for (int r = 0; r < records; ++r)
        for (int c = 0; c < channels; ++c) {
            const uint64_t offset = uint64_t(c) * region + uint64_t(r) * record;
            lane[c % 4].push_back(h.put(c % 4, 1, offset, offset, record, uint32_t(c), 1));
            h.executor.promises[{'s', 1, uint32_t(c), uint64_t(r + 1)}] = lane[c % 4];
        }
    while (h.scheduler->has_pending()) {
        h.now += 100'000;
        h.scheduler->issue(h.now);
    }
    check_channels_delivered(h, channels, records, lane);
    const auto& stats = h.scheduler->stats();
    std::printf("  %d records (%.1f MB): %llu batches, %zu copies in %llu copy calls\n", channels * records,
                double(channels) * double(region) / 1e6, (unsigned long long)stats.batches,
                h.executor.copies.size(), (unsigned long long)stats.copy_calls);
    // At most one copy per channel and call (and one more where a call ends inside a run), where
    // copies per batch would be one per channel of the batch's lane.
    SY_CHECK(stats.copy_calls > 1);
    SY_CHECK(h.executor.copies.size() <= size_t(stats.copy_calls) * (channels + 4));
    SY_CHECK(h.executor.copies.size() * 2 < size_t(stats.batches) * 4);
}

SY_TEST(NetScheduler, ReorderedPutsAreShuffledNotCoalesced) {
    Harness h(two_nodes(kNetworkReorderPuts));
    for (int i = 0; i < 64; ++i) h.put(0, 1, uint64_t(i) * 256, uint64_t(i) * 256, 256);
    h.put(0, 1, 64 * 256, 64 * 256, 256, 3, 1);
    h.run();
    const auto& copies = h.executor.copies;
    SY_CHECK_EQ(copies.size(), size_t(65));
    bool out_of_order = false;
    for (size_t i = 1; i < copies.size(); ++i)
        out_of_order |= copies[i].dst_offset < copies[i - 1].dst_offset;
    SY_CHECK(out_of_order);
    SY_CHECK(h.executor.index_of('s', 1, 3, 1) != SIZE_MAX);
}

SY_TEST(NetScheduler, LateSourceReadsHoldPutsUntilForced) {
    Harness h(two_nodes(kNetworkLateSourceReads));
    // Held: no signal, no flush, the network busy (a request every 10 us).
    for (int i = 0; i < 10; ++i) {
        h.put(0, 1, uint64_t(i) * 64, uint64_t(i) * 64, 64);
        h.now += 10'000;
        h.scheduler->issue(h.now);
    }
    SY_CHECK(h.executor.copies.empty());
    // A signal on the lane forces them (and itself).
    h.put(0, 1, 640, 640, 64, 1, 1);
    h.now += 5000;
    h.scheduler->issue(h.now);
    SY_CHECK_EQ(h.executor.copies.size(), size_t(1));  // contiguous: one copy of 11 puts
    SY_CHECK(h.executor.index_of('s', 1, 1, 1) != SIZE_MAX);
    // A flush forces what came before it on its context; later puts stay held.
    h.put(1, 1, 8192, 8192, 64);
    const uint64_t flush = h.flush(1);
    h.put(1, 1, 16384, 16384, 64);
    h.now += 5000;
    h.scheduler->issue(h.now);
    SY_CHECK_EQ(h.executor.copies.size(), size_t(2));
    SY_CHECK(h.executor.index_of('f', 0, 1, flush + 1) != SIZE_MAX);
    // An idle network releases the rest.
    h.now += h.config.hold_idle_ns;
    h.scheduler->issue(h.now);
    SY_CHECK_EQ(h.executor.copies.size(), size_t(3));
    SY_CHECK(!h.scheduler->has_pending());
}

SY_TEST(NetScheduler, ContextsServedOutOfOrder) {
    // Context 0: two signalled puts, the second due a microsecond after the first (so they form
    // two batches); context 1: one, posted last. Out of order, context 0 stalls after its first
    // batch and the context-1 signal overtakes the second context-0 one on some seeds; a lane's
    // own order never changes.
    int overtaken = 0;
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        SchedulerConfig config = two_nodes(kNetworkContextsOutOfOrder);
        config.seed = seed;
        Harness h(config);
        h.put(0, 1, 0, 0, 64, 0, 1);
        h.now += 1000;
        h.put(0, 1, 64, 64, 64, 0, 1);
        h.now += 1000;
        h.put(1, 1, 128, 128, 64, 1, 1);
        h.now = config.latency_ns;  // the first put is due; the second is not yet
        h.run();
        const size_t a1 = h.executor.index_of('s', 1, 0, 1), a2 = h.executor.index_of('s', 1, 0, 2),
                     b1 = h.executor.index_of('s', 1, 1, 1);
        SY_CHECK(a1 != SIZE_MAX && a2 != SIZE_MAX && b1 != SIZE_MAX);
        SY_CHECK(a1 < a2);
        overtaken += b1 < a2;
    }
    std::printf("  context 1 overtook context 0 in %d of 20 runs\n", overtaken);
    SY_CHECK(overtaken > 0);
}

SY_TEST(NetScheduler, WithheldRankDeliversNothingButCompletesLocally) {
    SchedulerConfig config = two_nodes();
    config.withhold = true;
    Harness h(config);
    h.put(0, 1, 0, 0, 4096, 2, 1, 4);
    const uint64_t flush = h.flush(0);
    h.run();
    SY_CHECK(h.executor.copies.empty());
    SY_CHECK(h.executor.index_of('s', 1, 2, 1) == SIZE_MAX);
    SY_CHECK(h.executor.index_of('c', 0, 4, 1) != SIZE_MAX);
    SY_CHECK(h.executor.index_of('f', 0, 0, flush + 1) != SIZE_MAX);
    SY_CHECK_EQ(h.scheduler->stats().bytes_withheld, uint64_t(4096));
    SY_CHECK_EQ(h.scheduler->stats().bytes_delivered[1], uint64_t(0));
    SY_CHECK_EQ(h.scheduler->stats().bytes_requested[1], uint64_t(4096));
}

SY_TEST(NetScheduler, AccountingPerDestinationRank) {
    // Rank 5 of 4 nodes x 2 ranks (node 2, local index 1): its rail peers are ranks 1, 3 and 7.
    SchedulerConfig config;
    config.rank = 5;
    config.num_nodes = 4;
    config.ranks_per_node = 2;
    Harness h(config);
    h.put(0, 0, 0, 0, 100);
    h.put(1, 1, 0, 1000, 200);
    h.put(2, 3, 0, 2000, 300, 7, 1);
    h.put(3, 3, 500, 3000, 400);
    h.run();
    const auto& stats = h.scheduler->stats();
    SY_CHECK_EQ(stats.bytes_delivered[1], uint64_t(100));
    SY_CHECK_EQ(stats.bytes_delivered[3], uint64_t(200));
    SY_CHECK_EQ(stats.bytes_delivered[7], uint64_t(700));
    SY_CHECK_EQ(stats.puts[7], uint64_t(2));
    SY_CHECK_EQ(stats.signals[7], uint64_t(1));
    for (int r : {0, 2, 4, 5, 6}) SY_CHECK_EQ(stats.bytes_delivered[r], uint64_t(0));
    SY_CHECK(h.executor.landed({7, 0, 2000, 300}));
}

SY_TEST(NetScheduler, InvalidRequestsAreRefused) {
    Harness h(two_nodes());
    auto refuse = [&](device::NetDescriptor d) { return h.scheduler->accept(0, 0, d, 0); };
    device::NetDescriptor d{};
    d.kind = device::kNetRequestPut;
    d.peer_node = 1;
    d.signal_id = d.counter_id = device::kNetNone;
    d.dst_offset = kWindow - 8;
    d.bytes = 16;
    SY_CHECK(refuse(d).find("outside the") != std::string::npos);
    d.dst_offset = 0;
    d.peer_node = 2;
    SY_CHECK(refuse(d).find("peer node 2") != std::string::npos);
    d.peer_node = 1;
    d.signal_id = device::kNetNumSignals;
    SY_CHECK(refuse(d).find("signal") != std::string::npos);
    d.signal_id = device::kNetNone;
    d.kind = 77;
    SY_CHECK(refuse(d).find("unknown kind") != std::string::npos);
    SY_CHECK_EQ(h.scheduler->stats().invalid_requests, uint64_t(4));
    // An id belongs to one context.
    d.kind = device::kNetRequestSignal;
    d.signal_id = 12;
    SY_CHECK(h.scheduler->accept(0, 0, d, 0).empty());
    SY_CHECK(h.scheduler->accept(1, 0, d, 0).find("belongs to one context") != std::string::npos);
    d.kind = device::kNetRequestPut;
    d.signal_id = device::kNetNone;
    d.counter_id = 3;
    SY_CHECK(h.scheduler->accept(2, 0, d, 0).empty());
    SY_CHECK(h.scheduler->accept(3, 0, d, 0).find("belongs to one context") != std::string::npos);
}

SY_TEST(NetScheduler, ClearStartsSignalsAndCountersFromZero) {
    Harness h(two_nodes());
    h.put(0, 1, 0, 0, 64, 3, 5, 2);
    h.run();
    SY_CHECK(h.executor.index_of('s', 1, 3, 5) != SIZE_MAX);
    h.put(0, 1, 0, 0, 64);  // pending when the reset comes
    h.scheduler->clear();
    SY_CHECK(!h.scheduler->has_pending());
    h.executor.writes.clear();
    std::fill(h.next_position.begin(), h.next_position.end(), 0);
    h.put(0, 1, 0, 0, 64, 3, 1, 2);
    h.run();
    SY_CHECK(h.executor.index_of('s', 1, 3, 1) != SIZE_MAX);
    SY_CHECK(h.executor.index_of('c', 0, 2, 1) != SIZE_MAX);
}

SY_TEST(NetScheduler, EngineSummaryGivesAverages) {
    // NetworkStats::engine's one-line summary: per-call averages, and nothing divides by zero.
    NetworkEngineStats none;
    SY_CHECK(none.summary().find("copy calls 0") != std::string::npos);
    NetworkEngineStats stats;
    stats.copy_calls = 10;
    stats.copy_call_ns = 20'000;
    stats.copies = 40;
    stats.copy_bytes = 4'000'000;
    stats.write_calls = 5;
    stats.words = 15;
    stats.ring_lag_samples = 4;
    stats.ring_lag_ns = 8'000;
    const std::string line = stats.summary();
    std::printf("  %s\n", line.c_str());
    SY_CHECK(line.find("copy calls 10: 2.0 us, 4.0 copies, 400 KB each (100 KB a copy)") !=
             std::string::npos);
    SY_CHECK(line.find("write calls 5: 0.0 us, 3.0 words each") != std::string::npos);
    SY_CHECK(line.find("ring lag +2.0 us") != std::string::npos);
}

SY_TEST_MAIN()
