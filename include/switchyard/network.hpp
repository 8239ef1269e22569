// The scale-out network of a buffer whose ranks span several nodes: its byte accounting.
//
// A buffer spanning nodes reaches the ranks of other nodes through the scale-out transport
// (DESIGN.md §4): NCCL GIN in production, the emulated network for emulated nodes on one host
// (BufferConfig::network_*). Each rank reaches only its rail peers: the ranks with its local index
// on the other nodes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "switchyard/ops.hpp"

namespace switchyard {

// Where the emulated network's engine thread spends its time (cumulative; emulated network only).
// Times in nanoseconds. One run of a workload shows whether the engine keeps up with the wire: the
// time in CUDA calls per call, how late it issues chunks against their wire slots, how long the
// GPU takes to run what it issued, and how long descriptors wait in the rings before it takes them.
struct NetworkEngineStats {
    uint64_t passes = 0;          // engine loop passes
    uint64_t requests = 0;        // descriptors taken from the rings
    uint64_t full_takes = 0;      // takes that hit the per-pass limit (a ring backlog)
    uint64_t batches = 0;         // batches formed (a lane's due requests, coalesced)
    uint64_t coalesce_waits = 0;  // times a lane's due requests waited for more to coalesce
    uint64_t copy_calls = 0;      // copy calls (copy-kernel launches or cudaMemcpyBatchAsync)
    uint64_t copy_call_ns = 0;    // time in them
    uint64_t copies = 0;          // copies they made
    uint64_t copy_bytes = 0;      // bytes they moved
    uint64_t write_calls = 0;     // calls writing signals, counters and flush reports
    uint64_t words = 0;           // words they wrote (a word takes every add due to it at once)
    uint64_t write_call_ns = 0;
    uint64_t signal_adds = 0;
    // The engine loop's time: passes that took or issued something, passes with work not yet due
    // (latency, wire slots, coalescing), passes with nothing to do.
    uint64_t busy_ns = 0, waiting_ns = 0, idle_ns = 0;
    uint64_t wire_ns = 0;      // wire time reserved (bytes / cap)
    uint64_t late_ns = 0;      // per copy call, how far past its wire slot's end its most overdue
    uint64_t late_max_ns = 0;  // chunk was (summed; the largest)
    uint64_t queued_ns = 0;    // per chunk, from its batch being due to its issue (summed)
    // The wire's busy periods (split where it stayed idle 200 us or more, as between ops) and, inside
    // them, the stretches it stood idle for want of a due batch (their count and summed time).
    uint64_t bursts = 0, burst_gaps = 0, burst_idle_ns = 0;
    // Ring lag: from a kernel posting a descriptor (its globaltimer) to the engine taking it (host
    // clock). The clocks differ by an unknown offset, which the engine takes as the smallest lag of
    // recent requests: sum and maximum above it.
    uint64_t ring_lag_samples = 0, ring_lag_ns = 0, ring_lag_max_ns = 0;
    // Stream lag: from an engine call to the GPU having run it (sampled every ~50 us, as seen by
    // the engine's polling). Calls handed over ahead of their words' time include the hold. Not
    // sampled with a CUDA tool attached (copies_by says so): there the engine records no events.
    uint64_t stream_lag_samples = 0, stream_lag_ns = 0, stream_lag_max_ns = 0;

    // One line: the averages and what they say.
    std::string summary() const;
};

// One rank's network traffic, cumulative since the buffer was created (reset() keeps it). Read it
// after Buffer::synchronize(), which also waits for the emulated network to deliver what the
// finished ops asked of it.
struct NetworkStats {
    std::string backend = "none";  // "none" (one node), "emulated" or "gin"
    int32_t num_nodes = 1;
    int32_t ranks_per_node = 1;
    int32_t node = 0;         // this rank's node
    int32_t local_index = 0;  // this rank's index inside its node
    // Emulated network only (NCCL does not count GIN's bytes: accounted is false there).
    bool accounted = false;
    std::vector<uint64_t> bytes_to_rank;            // [R] payload delivered to each rank
    std::vector<uint64_t> bytes_requested_to_rank;  // [R] payload of the puts this rank's kernels issued
    std::vector<uint64_t> puts_to_rank;             // [R] put requests
    std::vector<uint64_t> signals_to_rank;          // [R] signal adds delivered
    uint64_t copies = 0;                            // copies the engine issued after coalescing and chunking
    uint64_t flushes = 0;                           // flush requests
    uint64_t bytes_withheld = 0;                    // payload a withheld rank did not deliver (BufferConfig)
    uint64_t invalid_requests = 0;                  // requests refused (each also poisons the buffer)
    std::string signal_writes;  // how signals are written: by the copy kernel after its pieces, or (a
                                // CUDA tool attached) stream memory operations or 8-byte copies
    std::string copies_by;      // how payload is copied: the engine's copy kernel, or driver
                                // copies when a CUDA tool (sanitizer, profiler) is attached
    NetworkEngineStats engine;  // emulated network only

    // [N] bytes_to_rank summed per destination node.
    std::vector<uint64_t> bytes_to_node() const;
};

// [N * N] payload bytes from source node s (row) to destination node d (column), given every rank's
// stats in rank order (e.g. gathered with Communicator::all_gather by the caller).
std::vector<uint64_t> bytes_by_node_pair(const std::vector<NetworkStats>& all_ranks);

// A check of the scale-out network (Buffer::check_network): every rank puts to its rail peer on
// every other node through the device transport API and checks what arrives against its contract
// (transport/net_check.cuh). A preflight for a multi-node job, and the emulated network's test.
struct NetworkCheck {
    enum class Pattern : int32_t {
        kStream = 0,    // `rounds` x `puts_per_round` puts to every peer, a signal every
                        // `puts_per_signal`; at each signal of round 0 the receiver checks that
                        // signal's puts and every earlier one on its context (strong signals)
        kReuse = 1,     // one source slot per peer, rewritten every round once the previous put's
                        // counter (or a flush, with use_flush) says it was read; one signal at the end
        kPingPong = 2,  // nodes 0 and 1 bounce a put of put_bytes (a bare signal when 0) with a
                        // signal `rounds` times; round trips measured
        kChannels = 3,  // the HT shape: `channels` sender warps, each putting `puts_per_round`
                        // contiguous records a round, a signal add every `puts_per_signal` (1: each
                        // record); channel c on context c % num_contexts; checked at the end
    };
    Pattern pattern = Pattern::kStream;
    int32_t rounds = 1;
    int32_t puts_per_round = 64;
    int32_t puts_per_signal = 8;              // 0: one signal per round
    uint64_t put_bytes = uint64_t(64) << 10;  // a multiple of 8
    int32_t num_contexts = 1;                 // group g (stream) or round r (reuse) uses context g % n
    bool use_flush = false;                   // kReuse
    bool check_every_signal = true;           // kStream: off for bandwidth runs (checks at the end only)
    bool lane_parallel = true;                // kStream: a group's unsignalled puts from 32 lanes at
                                              // once (false: one thread posts every request)
    int32_t channels = 16;                    // kChannels: sender warps, 1 to 16
    uint32_t seed = 1;
};

struct NetworkCheckResult {
    int64_t bad_slots = 0;        // puts whose bytes were not what the contract promised when checked
    int32_t first_bad_node = -1;  // the source node and put of the first, or -1
    int32_t first_bad_put = -1;
    uint64_t bytes_sent = 0;  // payload this rank put
    // The GPU's global timer (ns, one clock per GPU): when this rank began sending and when it saw
    // its last signal. Bandwidth: a peer's bytes_sent / (receive_end_ns - the peer's send_start_ns).
    int64_t send_start_ns = 0;
    int64_t receive_end_ns = 0;
    // When this rank's senders posted their last request, and how many requests they posted: a
    // sender that posts slower than the wire carries is the limit, not the network.
    int64_t send_end_ns = 0;
    uint64_t posts = 0;
    int64_t round_trip_min_ns = -1;  // kPingPong on node 0
    int64_t round_trip_max_ns = -1;
};

// What the hierarchical HT ops (ranks on several nodes) put on the network, predicted from the
// routing: the byte accounting NetworkStats must match (DESIGN.md §9). A dispatch sends each token
// once to every destination node other than its own (to the rail peer there) as one forward record,
// and one counts block to every other node; a combine sends back one partial per (token, node) from
// the rank that forwarded the token into that node, and in a flat weighted combine each home first
// sends its [T, K] top-k weights to its rail peers.
struct HtNetworkShape {
    int32_t num_ranks = 1;
    int32_t num_nodes = 1;
    int32_t num_experts = 0;
    int32_t hidden = 0;
    int32_t topk = 0;
    ScaleFormat records = ScaleFormat::kNone;  // the dispatch's records: bf16, or fp8 with these scales
};

enum class HtNetworkOp {
    kDispatch,                // dispatch or cached dispatch
    kCombine,                 // combine
    kCombineWithHomeWeights,  // flat weighted combine (expert-major layouts): the homes' weights travel
};

// [R]: payload bytes rank `rank` puts to each rank in one op of `shape`, given every rank's top-k
// ids (topk_idx[r]: T_r * K entries, -1 = empty slot). Throws InvalidArgument on an inconsistent shape.
std::vector<uint64_t> predict_ht_network_bytes(const HtNetworkShape& shape,
                                               const std::vector<std::vector<int64_t>>& topk_idx, int rank,
                                               HtNetworkOp op);

}  // namespace switchyard
