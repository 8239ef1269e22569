// The emulated network's scheduling logic, apart from CUDA: which request's bytes move when, in
// which order, in how many copies, and what that costs on the wire. One Scheduler per rank; the
// engine thread (emulated_engine.cpp) feeds it the descriptors it takes from the rank's rings and
// lets it issue work to an Executor, which the engine implements with CUDA copies and stream
// memory operations and the CPU tests with memcpy on host memory.
//
// What it guarantees (the contract of transport/net.cuh) and the freedoms it takes:
//   - Work reaches the executor in an order the contract allows, and the executor runs it in that
//     order (an in-order queue, like one CUDA stream). Per (context, peer node) the requests form a
//     lane; a lane's requests are issued in batches, a batch ending at the first signal: the
//     batch's copies, then its counters, then its signal. So a signal is written only after its
//     own payload and every earlier put of the lane (strong signal), a counter only after its
//     put's copy has run (its source read).
//   - Inside a batch, puts are unordered: they are sorted by source offset and coalesced where
//     source and destination are both contiguous (HT kernels put thousands of small records; a
//     copy per record would be far too slow), then split into chunks for pacing.
//   - Pacing: a wire clock at the rank's bandwidth cap. Each chunk takes the wire after the chunk
//     before it for bytes / cap and is issued when that slot ends (a store-and-forward NIC: bytes
//     delivered by time t never exceed cap x t), and no request is issued before its latency has
//     passed since the engine saw it. When a chunk's slot ends, the chunks whose slots end within a
//     short horizon after it go in the same executor call, so small uncoalesced puts do not cost a
//     call each (they land at most that horizon early).
//   - A flush of a context is reported once every earlier request of the context was issued.
//   - Adversarial modes (NetworkAdversary): reorder puts inside a batch (shuffled, not
//     coalesced); hold puts until a later signal of their lane, a flush of their context, or an
//     idle network forces them (sources read as late as allowed); serve contexts in reverse order,
//     each stalled by a random delay between batches. A withheld rank issues no copies and no
//     signals, but still completes its own counters and flushes.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "switchyard/transport/net_types.cuh"

namespace switchyard::net {

constexpr int64_t kNever = INT64_MAX;

// What the engine asks of the memory system. Calls execute in the order they are made, each after
// every earlier call has completed; the copies of one copy() call may run in any order.
class Executor {
  public:
    struct Copy {
        int32_t dst_rank;
        uint64_t dst_offset;  // into dst_rank's window
        uint64_t src_offset;  // into this rank's window
        uint64_t bytes;
    };
    virtual ~Executor() = default;
    virtual void copy(const Copy* copies, size_t count) = 0;
    // Absolute values: the engine of the issuing rank is the only writer of each of these words.
    // Signals and counters belong to a context (transport/net.cuh, contract 6).
    virtual void write_signal(int32_t dst_rank, int32_t context, uint32_t id, uint64_t value) = 0;
    virtual void write_counter(int32_t context, uint32_t id, uint64_t value) = 0;
    virtual void write_flush_done(int32_t context, uint64_t value) = 0;
};

struct SchedulerConfig {
    int32_t rank = 0;
    int32_t num_nodes = 1;
    int32_t ranks_per_node = 1;
    int32_t num_contexts = device::kNetMaxContexts;
    uint64_t window_bytes = 0;
    double bytes_per_ns = 46.0;  // the bandwidth cap (46 GB/s = 46 bytes/ns); <= 0: unlimited
    int64_t latency_ns = 3000;
    uint32_t adversarial = 0;  // NetworkAdversary bits
    bool withhold = false;     // this rank's deliveries are withheld
    uint64_t seed = 1;
    int64_t hold_idle_ns = 200'000;              // late source reads: held puts go after this much quiet
    int64_t max_context_stall_ns = 50'000;       // contexts out of order: longest stall between batches
    uint64_t chunk_bytes = uint64_t(1) << 20;  // the largest copy (22 us of wire at 46 GB/s)
    int64_t issue_horizon_ns = 4000;           // chunks whose wire slot ends this soon go now
};

// Byte accounting of one rank, cumulative.
struct SchedulerStats {
    std::vector<uint64_t> bytes_requested;  // [dst rank] payload of accepted puts
    std::vector<uint64_t> bytes_delivered;  // [dst rank] payload issued to the executor
    std::vector<uint64_t> puts;             // [dst rank] put requests accepted
    std::vector<uint64_t> signals;          // [dst rank] signal adds issued
    uint64_t copies = 0;                    // copies issued after coalescing and chunking
    uint64_t flushes = 0;
    uint64_t bytes_withheld = 0;
    uint64_t invalid_requests = 0;
};

class Scheduler {
  public:
    Scheduler(const SchedulerConfig& config, Executor& executor);

    // A descriptor taken from `context`'s ring at `position` (positions of a context arrive in
    // order), seen at `now_ns`. Returns an empty string, or why the request is invalid (it is
    // dropped and counted).
    std::string accept(int32_t context, uint64_t position, const device::NetDescriptor& request, int64_t now_ns);

    // Hands the executor the work due at `now_ns`. Returns when more becomes due (kNever: nothing
    // is pending, or it waits for requests).
    int64_t issue(int64_t now_ns);

    // Whether accepted work is not yet issued (held, paced, or within its latency).
    bool has_pending() const;

    // For reset(): forgets pending work and the values of signals and counters (back to zero).
    void clear();
    // A withheld rank delivers again (its first reset() brings the "failed NIC" back).
    void stop_withholding() { config_.withhold = false; }

    const SchedulerStats& stats() const { return stats_; }
    const SchedulerConfig& config() const { return config_; }

  private:
    struct Request {
        uint64_t position;
        int64_t ready_ns;  // not issued before (seen + latency)
        uint32_t kind;
        uint64_t dst_offset, src_offset, bytes;
        uint32_t signal_id;
        uint64_t signal_value;
        uint32_t counter_id;
    };
    // Work formed from the front of a lane, issued chunk by chunk, then counters and the signal.
    struct Batch {
        std::vector<Executor::Copy> chunks;
        size_t next_chunk = 0;
        double next_chunk_wire_end = -1;  // the head chunk's reserved wire slot end (ns), -1: none
        std::vector<std::pair<uint32_t, uint64_t>> counter_adds;  // (id, increments)
        bool has_signal = false;
        uint32_t signal_id = 0;
        uint64_t signal_add = 0;
        uint64_t first_position = 0;
        bool active = false;
    };
    struct Lane {  // one (context, peer node)
        int32_t context = 0;
        int32_t peer_node = 0;
        std::deque<Request> waiting;
        Batch batch;
    };
    struct ContextState {
        std::vector<Lane> lanes;     // [node]
        std::deque<uint64_t> flushes;  // positions of flush requests, in order
        uint64_t force_below = 0;      // late reads: positions below this must go (a flush)
        int64_t stalled_until = 0;     // contexts out of order
    };

    bool adversarial(uint32_t bit) const { return (config_.adversarial & bit) != 0; }
    // Forms the lane's next batch if its front is due; else lowers `next_due` to when it will be.
    void form_batch(ContextState& context, Lane& lane, int64_t now_ns, int64_t& next_due);
    // Issues the active batch as far as pacing allows; true when it is done.
    bool issue_batch(Lane& lane, int32_t dst_rank, int64_t now_ns, int64_t& next_due);
    void complete_flushes(int32_t context_index);
    uint64_t first_unissued(const ContextState& context) const;

    // Reserves the head chunk's wire slot if it has none; whether it may be issued at `now_ns`.
    bool wire_allows(Batch& batch, uint64_t bytes, int64_t now_ns, int64_t& next_due);

    SchedulerConfig config_;
    Executor& executor_;
    std::vector<ContextState> contexts_;
    std::vector<uint64_t> signal_values_;    // [node][kNetNumSignals]: what this rank raised at each rail peer
    std::vector<int32_t> signal_context_;    // [node][kNetNumSignals]: the context of each (-1: unused)
    std::vector<uint64_t> counter_values_;   // [kNetNumCounters]
    std::vector<int32_t> counter_context_;   // [kNetNumCounters]
    std::vector<uint64_t> flush_reported_;  // [context]
    double wire_free_ns_ = 0;  // when the wire has carried every chunk reserved so far
    int64_t last_request_ns_ = 0;
    uint64_t rotation_ = 0;
    std::mt19937_64 random_;
    SchedulerStats stats_;
};

}  // namespace switchyard::net
