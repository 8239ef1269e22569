// Buffer configuration: the capacities a communication buffer is sized for.
//
// Every rank must pass the same configuration; Buffer checks that when it is created and names
// the first field that differs. The struct carries its own size and version so it can grow
// without breaking callers compiled against an older header.
#pragma once

#include <cstdint>
#include <string>

namespace switchyard {

// Which transport carries a buffer's traffic between nodes (BufferConfig::network_backend).
enum class NetworkBackend : int32_t {
    kAuto = 0,      // emulated nodes: the emulated network; nodes that are hosts: NCCL GIN
    kEmulated = 1,  // the emulated network (every rank on one host)
    kGin = 2,       // NCCL's GPU-initiated networking (needs a communicator wrapping an ncclComm_t)
};

// Adversarial modes of the emulated network (bits of BufferConfig::network_adversarial), for tests:
// each one exercises a freedom the scale-out contract gives the transport.
enum NetworkAdversary : uint32_t {
    kNetworkReorderPuts = 1u << 0,         // puts land in shuffled order (each signal still after its
                                           // own payload and every earlier put of its context and peer)
    kNetworkLateSourceReads = 1u << 1,     // sources are read as late as allowed (a later signal, a
                                           // flush or an idle network forces them)
    kNetworkContextsOutOfOrder = 1u << 2,  // contexts are served in reverse order, each with a delay
};

struct BufferConfig {
    uint32_t struct_size = sizeof(BufferConfig);
    uint32_t version = 3;

    // Capacities (maxima over all calls on this buffer).
    int32_t max_tokens_per_rank = 4096;  // T_max of high-throughput calls
    int32_t max_hidden = 7168;           // largest hidden size H
    int32_t max_topk = 8;                // largest top-k K
    int32_t max_experts = 256;           // largest number of experts E

    // Which modes get memory. The high-throughput (HT) regions scale with T_max, the
    // low-latency (LL) regions with ll_max_tokens_per_rank.
    bool enable_high_throughput = true;
    bool enable_low_latency = false;
    int32_t ll_max_tokens_per_rank = 128;

    // Bound on every wait for another rank, on the GPU and on the host.
    double timeout_seconds = 100.0;

    // Splits the ranks of one host into this many emulated nodes (tests of the hierarchical
    // path). 0 = take SWITCHYARD_EMULATED_NODES from the environment, else real hosts.
    int32_t emulated_nodes = 0;

    // SM budget of the communication kernels; 0 = the analytical SM model decides.
    int32_t num_sms = 0;

    // Low latency: a peer that does not arrive within the timeout is masked (its contributions
    // count as absent, later ops skip it) instead of failing the op with TimeoutError.
    bool ll_mask_unresponsive_ranks = false;
    // Low latency: reserve a send area for zero-copy combine input ([L, R*T_ll, H] bf16).
    bool ll_zero_copy_combine = false;

    // Launch every op straight on the caller's stream instead of on the buffer's communication
    // stream. Saves the two cross-stream event waits per op (each costs GPU time), at the cost of
    // the overlap the separate stream gives
    // (the caller's next work waits for the op either way). Buffer::synchronize() then waits for
    // the stream of the latest op as well.
    bool launch_on_caller_stream = false;

    // --- Version 2: the scale-out network (buffers whose ranks span several nodes) ----------------
    // Ignored when all ranks are on one node. See docs/architecture.md and transport/net.cuh.
    NetworkBackend network_backend = NetworkBackend::kAuto;
    // Emulated network only: the cap on each rank's outgoing network bytes (GB/s, 1e9 bytes per
    // second; 0 = unlimited; default: a 400 Gb/s NIC) and the latency added between a request's
    // appearance and its delivery (microseconds).
    double network_bandwidth_gbps = 46.0;
    double network_latency_us = 3.0;
    // Emulated network, for tests: NetworkAdversary bits, and a rank whose network deliveries are
    // withheld until the buffer's first reset() (a failed NIC the reset brings back: its puts and
    // signals never land, its own counters and flushes still complete), or -1.
    uint32_t network_adversarial = 0;
    int32_t network_withhold_rank = -1;

    // --- Version 3: HT rank masking --------------------------------------------------------------
    // High throughput, ranks of one node: a peer that does not enter an op within the timeout is
    // masked (as LL's ll_mask_unresponsive_ranks): the op goes on without it (tokens routed to its
    // experts are dropped, its tokens are absent) and later ops skip it. Buffer::ht_query_mask /
    // ht_set_mask / ht_clear_mask read and change the mask. Not for buffers spanning nodes.
    bool ht_mask_unresponsive_ranks = false;
};

// A copy of `config` with the fields an older caller's (smaller) struct lacks at their defaults,
// per its struct_size.
BufferConfig upgraded(const BufferConfig& config);

const char* network_backend_name(NetworkBackend backend);

// "max_tokens_per_rank=4096, max_hidden=7168, ..." for logs and error messages.
std::string describe(const BufferConfig& config);

}  // namespace switchyard
