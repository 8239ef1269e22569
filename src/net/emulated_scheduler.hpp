// The emulated network's scheduling logic, apart from CUDA: which request's bytes move when, in
// which order, in how many copies, and what that costs on the wire. One Scheduler per rank; the
// engine thread (emulated_network.cpp) feeds it the descriptors it takes from the rank's rings and
// lets it issue work to an Executor, which the engine implements with CUDA copies and stream
// memory operations and the CPU tests with memcpy on host memory.
//
// What it guarantees (the contract of transport/net.cuh) and the freedoms it takes:
//   - Work reaches the executor in an order the contract allows, and the executor runs it in that
//     order (an in-order queue, like one CUDA stream). Per (context, peer node) the requests form a
//     lane; a lane's due requests are issued in batches of up to `batch_bytes` of payload, signals
//     and all: a batch's puts are copied in chunks, and each counter and signal of the batch is
//     written once the chunks it needs have been issued: a signal after the chunks holding its own
//     payload and every earlier put of the lane (strong signal), a counter after its put's chunks
//     (its source read). Batches of a lane go one after the other.
//   - Inside a batch, puts are unordered: they are sorted by source offset and coalesced where
//     source and destination are both contiguous, across the batch's signals (HT kernels put
//     thousands of small records, each with a signal; a copy or a call per record would be far too
//     slow), then split into chunks for pacing.
//   - Coalescing: a lane forms its next batch only when the wire is about to be free (forming it
//     earlier would only freeze a smaller batch: its chunks could not go sooner), and while
//     requests keep coming to the lane, only once it holds batch_bytes or its oldest request has
//     waited coalesce_ns (SchedulerConfig); a lone request is not held.
//   - Pacing: a wire clock at the rank's bandwidth cap. Each chunk takes the wire for bytes / cap
//     after the chunk before it, or from when its batch became due if the wire was idle then, and its
//     words (the signals and counters it completes, what makes its bytes count under the contract)
//     are due when that slot ends (a store-and-forward NIC: bytes delivered by time t never exceed
//     cap x t). The clock runs on the requests' due times, not on when the engine got round to them,
//     so an engine late to a slot issues the chunks that are overdue together and the wire loses
//     nothing. A request is due one latency after its kernel posted it (its globaltimer stamp on
//     this clock), not after the engine took it from the ring: a NIC sees its doorbell at once,
//     and the ring lag is the emulator's own (a host thread's pass, a launch in progress), so it
//     delays the bytes' landing but not the wire. No word is due before that.
//   - Handing over ahead (issue_lead_ns): the executor is given a call up to that long before its
//     words are due, with their due time (Executor::submit), and holds the words until then; the
//     bytes may land early. The time between a call and its landing (launches, a busy GPU) then
//     overlaps the wire time instead of adding to it. Without a lead a call goes when its slot ends.
//   - One issue() makes at most one copy call (every chunk whose slot ends within a short horizon,
//     from every lane; chunks contiguous at source and destination, such as a channel's records
//     split by batch boundaries, merged into one copy) and then one write call (the counters,
//     signals and flush reports that became due, each word once with its latest value): the
//     executor's calls and their entries, not the requests, set the engine's cost.
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
    // A word of device memory the engine sets: a signal of `rank`, a counter or a flush report of
    // this rank. Absolute values: the engine of the issuing rank is the only writer of each word.
    // Signals and counters belong to a context (transport/net.cuh, contract 6).
    struct Word {
        enum Kind : uint32_t { kSignal = 0, kCounter = 1, kFlushDone = 2 };
        Kind kind;
        int32_t rank;  // kSignal: the destination rank; otherwise this rank
        int32_t context;
        uint32_t id;  // signal or counter id (kFlushDone: unused)
        uint64_t value;
    };
    virtual ~Executor() = default;
    virtual void copy(const Copy* copies, size_t count) = 0;
    // The words, after everything earlier; among themselves in any order. The default makes one
    // call below per word.
    virtual void write(const Word* words, size_t count);
    // The end of one issue()'s calls (its copies, then its words): an executor that gathers a
    // call's work runs it now. The words are not to be written before `words_due_ns` on the
    // scheduler's clock (when everything issued so far is due: its chunks' wire slots ended and its
    // requests' latency passed; 0: none given): an executor that cannot hold them is only ever
    // called with a zero issue lead, when that time has come.
    virtual void submit(int64_t words_due_ns) { (void)words_due_ns; }
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
    int64_t hold_idle_ns = 200'000;            // late source reads: held puts go after this much quiet
    int64_t max_context_stall_ns = 50'000;     // contexts out of order: longest stall between batches
    uint64_t chunk_bytes = uint64_t(1) << 20;  // the largest copy (22 us of wire at 46 GB/s)
    int64_t issue_horizon_ns = 4000;           // chunks whose wire slot ends this soon go now
    // How long before its words are due a call may be handed over (0: when they are due). Only for
    // an executor that holds words until their time (Executor::submit); the engine sets it once its
    // copy kernel can tell the time on the scheduler's clock.
    int64_t issue_lead_ns = 0;
    // The payload a lane's batch takes before it closes (at most this much wire time delays a
    // signal of the batch beyond its own payload when the batch's puts interleave).
    uint64_t batch_bytes = uint64_t(1) << 20;
    // Coalescing: while requests keep coming to a lane (one within quiet_ns), its next batch waits
    // until it holds batch_bytes or its oldest request has been due for coalesce_ns, so records put
    // one by one go as large copies (each costs the executor at least a piece, whatever its size).
    // A lone request (nothing after it for quiet_ns) goes as soon as it is due and the wire is free.
    int64_t coalesce_ns = 10'000;
    int64_t quiet_ns = 2'000;
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
    // Where the work went (the engine's statistics; times on the scheduler's clock).
    uint64_t requests = 0;        // requests accepted
    uint64_t batches = 0;         // batches formed
    uint64_t copy_calls = 0;      // executor copy() calls
    uint64_t write_calls = 0;     // executor write() calls
    uint64_t words = 0;           // words written (signals, counters, flush reports)
    uint64_t signal_adds = 0;     // signal adds applied (several may share one word)
    uint64_t coalesce_waits = 0;  // times a lane's due requests waited for more to coalesce
    double wire_ns = 0;           // wire time reserved (bytes / cap)
    double late_ns = 0;           // chunks issued after their slot ended (summed per copy call)
    double late_max_ns = 0;       // the latest of them
    double queued_ns = 0;         // per chunk, from its batch being due to its issue (summed)
    // The wire's busy periods (bursts: split where it stayed idle for kBurstGapNs or more, as
    // between ops) and the idle stretches inside them: the time the wire waited for a due batch
    // while the network was in use (a burst spans its wire time plus that idle time).
    uint64_t bursts = 0;
    uint64_t burst_gaps = 0;
    double burst_idle_ns = 0;
};

// Wire idle for this long ends a burst (SchedulerStats::bursts).
constexpr double kBurstGapNs = 200'000;

class Scheduler {
  public:
    Scheduler(const SchedulerConfig& config, Executor& executor);

    // A descriptor taken from `context`'s ring at `position` (positions of a context arrive in
    // order), seen at `now_ns` and posted by its kernel at `posted_ns` (both on this clock; the
    // engine converts the request's globaltimer stamp, DeviceClock): its latency, and its batch's
    // wire slot, count from the post, never earlier than the lane's previous request's. Returns an
    // empty string, or why the request is invalid (it is dropped and counted).
    std::string accept(int32_t context, uint64_t position, const device::NetDescriptor& request,
                       int64_t now_ns, int64_t posted_ns);
    // A request whose posting time is unknown: posted when seen.
    std::string accept(int32_t context, uint64_t position, const device::NetDescriptor& request,
                       int64_t now_ns) {
        return accept(context, position, request, now_ns, now_ns);
    }

    // Hands the executor the work due at `now_ns`. Returns when more becomes due (kNever: nothing
    // is pending, or it waits for requests).
    int64_t issue(int64_t now_ns);

    // Whether accepted work is not yet issued (held, paced, or within its latency).
    bool has_pending() const;

    // For reset(): forgets pending work and the values of signals and counters (back to zero).
    void clear();
    // A withheld rank delivers again (its first reset() brings the "failed NIC" back).
    void stop_withholding() { config_.withhold = false; }
    // SchedulerConfig::issue_lead_ns from the next issue() on.
    void set_issue_lead(int64_t lead_ns) { config_.issue_lead_ns = lead_ns > 0 ? lead_ns : 0; }

    const SchedulerStats& stats() const { return stats_; }
    const SchedulerConfig& config() const { return config_; }

  private:
    struct Request {
        uint64_t position;
        int64_t ready_ns;  // not issued before (posted + latency)
        uint32_t kind;
        uint64_t dst_offset, src_offset, bytes;
        uint32_t signal_id;
        uint64_t signal_value;
        uint32_t counter_id;
    };
    // Work formed from the front of a lane, issued chunk by chunk, then counters and the signal.
    // A counter increment or signal add of a batch, due once `need` of its chunks were issued.
    struct Completion {
        size_t need;
        bool signal;
        uint32_t id;
        uint64_t add;
    };
    struct Batch {
        std::vector<Executor::Copy> chunks;
        size_t next_chunk = 0;
        double next_chunk_wire_end = -1;      // the head chunk's reserved wire slot end (ns), -1: none
        std::vector<Completion> completions;  // by need
        size_t next_completion = 0;
        int64_t ready_ns = 0;  // when its last request became due
        uint64_t first_position = 0;
        bool active = false;
        void reset() {
            chunks.clear();
            completions.clear();
            next_chunk = next_completion = 0;
            next_chunk_wire_end = -1;
            ready_ns = 0;
            first_position = 0;
            active = false;
        }
    };
    struct Lane {  // one (context, peer node)
        int32_t context = 0;
        int32_t peer_node = 0;
        int64_t last_seen_ns = INT64_MIN / 2;   // when its latest request was accepted
        int64_t last_ready_ns = INT64_MIN / 2;  // when its latest request is due (they are in order)
        std::deque<Request> waiting;
        uint64_t waiting_bytes = 0;  // their payload
        Batch batch;
    };
    struct ContextState {
        std::vector<Lane> lanes;       // [node]
        std::deque<uint64_t> flushes;  // positions of flush requests, in order
        uint64_t force_below = 0;      // late reads: positions below this must go (a flush)
        int64_t stalled_until = 0;     // contexts out of order
    };

    bool adversarial(uint32_t bit) const { return (config_.adversarial & bit) != 0; }
    // When the wire can take a new batch (now_ns if it can now).
    int64_t wire_busy_until(int64_t now_ns) const;
    // Forms the lane's next batch if its front is due; else lowers `next_due` to when it will be.
    void form_batch(ContextState& context, Lane& lane, int64_t now_ns, int64_t& next_due);
    // Takes the active batch's chunks as far as pacing allows into this call's copies, and its
    // completions those chunks make due into this call's words; true when the batch is done.
    bool issue_batch(Lane& lane, int32_t dst_rank, int64_t now_ns, int64_t& next_due);
    void complete_flushes(int32_t context_index);
    uint64_t first_unissued(const ContextState& context) const;
    // Queues a word for this call's write, replacing an earlier value of the same word.
    void queue_word(Executor::Word::Kind kind, int32_t rank, int32_t context, uint32_t id, uint64_t value);
    // Hands this call's copies, then its words, to the executor.
    void flush_calls();

    // Reserves the head chunk's wire slot if it has none; whether it may be issued at `now_ns` in
    // this call (with a lead, a call holds the chunks whose slots end within the issue horizon of
    // its first: its words wait for the last one).
    bool wire_allows(Batch& batch, uint64_t bytes, int64_t now_ns, int64_t& next_due);
    // This call's copies, those contiguous at source and destination merged (any order is allowed).
    void coalesce_call_copies();

    SchedulerConfig config_;
    Executor& executor_;
    std::vector<ContextState> contexts_;
    std::vector<uint64_t> signal_values_;   // [node][kNetNumSignals]: what this rank raised at each rail peer
    std::vector<int32_t> signal_context_;   // [node][kNetNumSignals]: the context of each (-1: unused)
    std::vector<uint64_t> counter_values_;  // [kNetNumCounters]
    std::vector<int32_t> counter_context_;  // [kNetNumCounters]
    std::vector<uint64_t> flush_reported_;  // [context]
    // This issue()'s executor calls: the copies, then the words (with where each word sits, per
    // signal, counter and flush report, so a later value replaces an earlier one).
    std::vector<Executor::Copy> call_copies_;
    std::vector<Executor::Word> call_words_;
    std::vector<uint32_t> signal_word_;   // [node][kNetNumSignals]: index + 1 in call_words_, 0: none
    std::vector<uint32_t> counter_word_;  // [kNetNumCounters]
    std::vector<uint32_t> flush_word_;    // [context]
    double call_late_ns_ = 0;             // the most overdue chunk of this call
    double call_first_end_ = -1;          // the wire slot end of this call's first chunk (-1: none yet)
    // When everything issued so far is due: the latest slot end of its chunks, and for a batch
    // without payload (bare signals) when its latency ends (-1: nothing yet).
    double issued_due_ns_ = -1;
    // Scratch of form_batch (kept to avoid allocating per batch).
    struct Put {
        Executor::Copy copy;
        uint32_t request;  // index in the batch
    };
    std::vector<Put> puts_;
    std::vector<Executor::Copy> merged_;
    std::vector<size_t> merged_of_put_, first_chunk_, need_of_request_;
    double wire_free_ns_ = -1;  // when the wire has carried every chunk reserved so far (-1: never used)
    int64_t last_request_ns_ = 0;
    uint64_t rotation_ = 0;
    std::mt19937_64 random_;
    SchedulerStats stats_;
};

}  // namespace switchyard::net
