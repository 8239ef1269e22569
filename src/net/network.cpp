// Backend choice and what every network shares (see network.hpp), and the stats helpers of
// include/switchyard/network.hpp.
#include "net/network.hpp"

#include <sstream>

#include <cmath>
#include <cstdio>
#include <set>

#include "util/cuda_check.hpp"
#include "util/mapped_host.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/transport/net_check.cuh"

namespace switchyard {

std::vector<uint64_t> NetworkStats::bytes_to_node() const {
    std::vector<uint64_t> out(static_cast<size_t>(num_nodes), 0);
    for (size_t rank = 0; rank < bytes_to_rank.size(); ++rank)
        out[rank / static_cast<size_t>(ranks_per_node)] += bytes_to_rank[rank];
    return out;
}

std::string NetworkEngineStats::summary() const {
    auto per = [](double total, double count) { return count > 0 ? total / count : 0.0; };
    const double loop = double(busy_ns + waiting_ns + idle_ns);
    char line[1024];
    std::snprintf(
        line, sizeof(line),
        "engine: %llu passes (busy %.0f%%, waiting %.0f%%, idle %.0f%% of %.2f ms); %llu requests in %llu "
        "batches (%llu coalescing waits, %llu full ring takes); copy calls %llu: %.1f us, %.1f copies, "
        "%.0f KB each (%.0f KB a copy); write calls %llu: %.1f us, %.1f words each (%llu signal adds); "
        "wire %.2f ms in %llu bursts, idle %.1f us a burst in %.1f gaps; issue late %.1f us per call, %.1f "
        "us at most; queued %.1f us per chunk; "
        "ring lag +%.1f us, +%.1f us at most (%llu); stream lag %.1f us, %.1f us at most (%llu)",
        (unsigned long long)passes, 100 * per(double(busy_ns), loop), 100 * per(double(waiting_ns), loop),
        100 * per(double(idle_ns), loop), loop / 1e6, (unsigned long long)requests,
        (unsigned long long)batches, (unsigned long long)coalesce_waits, (unsigned long long)full_takes,
        (unsigned long long)copy_calls, per(double(copy_call_ns), double(copy_calls)) / 1e3,
        per(double(copies), double(copy_calls)), per(double(copy_bytes), double(copy_calls)) / 1e3,
        per(double(copy_bytes), double(copies)) / 1e3, (unsigned long long)write_calls,
        per(double(write_call_ns), double(write_calls)) / 1e3, per(double(words), double(write_calls)),
        (unsigned long long)signal_adds, double(wire_ns) / 1e6, (unsigned long long)bursts,
        per(double(burst_idle_ns), double(bursts)) / 1e3, per(double(burst_gaps), double(bursts)),
        per(double(late_ns), double(copy_calls)) / 1e3, double(late_max_ns) / 1e3,
        per(double(queued_ns), double(copies)) / 1e3,
        per(double(ring_lag_ns), double(ring_lag_samples)) / 1e3, double(ring_lag_max_ns) / 1e3,
        (unsigned long long)ring_lag_samples, per(double(stream_lag_ns), double(stream_lag_samples)) / 1e3,
        double(stream_lag_max_ns) / 1e3, (unsigned long long)stream_lag_samples);
    return line;
}

std::vector<uint64_t> bytes_by_node_pair(const std::vector<NetworkStats>& all_ranks) {
    if (all_ranks.empty()) return {};
    const size_t nodes = static_cast<size_t>(all_ranks[0].num_nodes);
    std::vector<uint64_t> out(nodes * nodes, 0);
    for (const NetworkStats& stats : all_ranks) {
        if (static_cast<size_t>(stats.num_nodes) != nodes)
            throw InvalidArgument(
                "switchyard: bytes_by_node_pair got stats of buffers with different node counts");
        const std::vector<uint64_t> to_node = stats.bytes_to_node();
        for (size_t node = 0; node < nodes; ++node) out[size_t(stats.node) * nodes + node] += to_node[node];
    }
    return out;
}

namespace net {

const char* network_kind_name(NetworkKind kind) {
    switch (kind) {
        case NetworkKind::kNone:
            return "none";
        case NetworkKind::kEmulated:
            return "emulated";
        case NetworkKind::kGin:
            return "gin";
    }
    return "unknown";
}

NetworkKind resolve_network_kind(const BufferConfig& config, const Topology& topology,
                                 bool communicator_is_nccl, const std::string& communicator) {
    if (topology.num_nodes <= 1) return NetworkKind::kNone;
    std::set<uint64_t> hosts;
    for (const RankPlacement& placement : topology.placements) hosts.insert(placement.host_id);
    const std::string nodes = std::to_string(topology.num_nodes) +
                              (topology.emulated_nodes ? " emulated" : "") + " nodes on " +
                              std::to_string(hosts.size()) + " host(s)";
    const bool emulated = config.network_backend == NetworkBackend::kEmulated ||
                          (config.network_backend == NetworkBackend::kAuto && topology.emulated_nodes);
    if (emulated) {
        if (hosts.size() != 1)
            throw UnsupportedError(
                "switchyard: the emulated network joins emulated nodes of one host, but the ranks "
                "form " +
                nodes + "; use network_backend = kGin (or kAuto) for nodes that are hosts");
        return NetworkKind::kEmulated;
    }
    if (config.network_backend != NetworkBackend::kGin && config.network_backend != NetworkBackend::kAuto)
        throw InvalidArgument("switchyard: unknown network_backend " +
                              std::to_string(static_cast<int>(config.network_backend)));
    if (topology.emulated_nodes)
        throw UnsupportedError(
            "switchyard: NCCL GIN joins the nodes NCCL sees (hosts), but the ranks form " + nodes +
            " from the emulated-nodes override; use network_backend = kEmulated (or kAuto) "
            "for emulated nodes");
    if (!communicator_is_nccl)
        throw UnsupportedError(
            "switchyard: the ranks form " + nodes +
            "; across nodes Switchyard uses NCCL GIN, which needs a communicator over an "
            "ncclComm_t (switchyard::wrap_nccl_communicator), but the buffer's communicator is " +
            communicator);
    return NetworkKind::kGin;
}

std::string traffic_note(const NetworkStats& stats, int peer) {
    if (!stats.accounted || peer < 0) return {};
    auto at = [peer](const std::vector<uint64_t>& values) {
        return size_t(peer) < values.size() ? values[size_t(peer)] : uint64_t(0);
    };
    std::ostringstream note;
    note << "this rank's network has carried to rank " << peer << ": " << at(stats.puts_to_rank) << " puts ("
         << at(stats.bytes_to_rank) << " of " << at(stats.bytes_requested_to_rank) << " bytes delivered), "
         << at(stats.signals_to_rank) << " signal adds; " << stats.engine.requests
         << " requests taken in all";
    return note.str();
}

void validate_network_config(const BufferConfig& config, int num_ranks) {
    auto fail = [](const std::string& what) { throw InvalidArgument("switchyard: BufferConfig: " + what); };
    const int backend = static_cast<int>(config.network_backend);
    if (backend < 0 || backend > 2)
        fail("network_backend " + std::to_string(backend) + " is not kAuto, kEmulated or kGin");
    if (!(config.network_bandwidth_gbps >= 0.0) || std::isinf(config.network_bandwidth_gbps))
        fail("network_bandwidth_gbps must be >= 0 (0 = unlimited), got " +
             std::to_string(config.network_bandwidth_gbps));
    if (!(config.network_latency_us >= 0.0) || config.network_latency_us > 1e6)
        fail("network_latency_us must be in [0, 1e6], got " + std::to_string(config.network_latency_us));
    const uint32_t known = kNetworkReorderPuts | kNetworkLateSourceReads | kNetworkContextsOutOfOrder;
    if ((config.network_adversarial & ~known) != 0)
        fail("network_adversarial has unknown bits " + std::to_string(config.network_adversarial & ~known));
    if (config.network_withhold_rank < -1 || config.network_withhold_rank >= num_ranks)
        fail("network_withhold_rank must be -1 (none) or a rank in [0, " + std::to_string(num_ranks) +
             "), got " + std::to_string(config.network_withhold_rank));
}

Network::Network(const comm::NodeLayout& layout, int device) : layout_(layout) {
    SY_CUDA_CHECK(cudaSetDevice(device));
    SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&check_.results_device),
                             sizeof(int64_t) * device::kNetResultWords));
    check_.results_host = util::allocate_mapped_host<int64_t>(device::kNetResultWords).host;
}

Network::~Network() {
    if (check_.results_device) cudaFree(check_.results_device);
    if (check_.results_host) cudaFreeHost(check_.results_host);
}

device::EmulatedNetContext Network::emulated_context() const {
    throw Error(
        std::string("switchyard: a kernel for the emulated network was launched on a buffer whose network "
                    "is ") +
        network_kind_name(kind()));
}

device::GinNetContext Network::gin_context() const {
    throw Error(std::string("switchyard: a GIN kernel was launched on a buffer whose network is ") +
                network_kind_name(kind()));
}

}  // namespace net
}  // namespace switchyard
