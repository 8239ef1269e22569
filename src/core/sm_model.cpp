// Analytical SM model (see include/switchyard/sm_model.hpp).
#include "switchyard/sm_model.hpp"

#include <algorithm>
#include <cmath>

#include "switchyard/errors.hpp"

namespace switchyard {

double expected_distinct_groups(int num_experts, int topk, int num_groups) {
    if (num_groups < 1 || num_experts % num_groups != 0 || topk < 0 || topk > num_experts)
        throw InvalidArgument("expected_distinct_groups: need E % groups == 0 and 0 <= k <= E (E=" +
                              std::to_string(num_experts) + ", k=" + std::to_string(topk) +
                              ", groups=" + std::to_string(num_groups) + ")");
    // P(a given group gets none of the k picks) = C(E - E/g, k) / C(E, k)
    //   = prod_{i < k} (E - E/g - i) / (E - i), computed as a product to stay in range.
    const int outside = num_experts - num_experts / num_groups;
    double miss = 1.0;
    for (int i = 0; i < topk; ++i)
        miss *= outside - i <= 0 ? 0.0 : double(outside - i) / double(num_experts - i);
    return num_groups * (1.0 - miss);
}

ArchBandwidth default_arch_bandwidth(int compute_capability_major) {
    ArchBandwidth bandwidth;
    if (compute_capability_major >= 10) {
        // NVLink 5: about twice the per-direction bandwidth; per-SM rates from the same design.
        bandwidth.nvlink_gbps = 720.0;
        bandwidth.sm_write_gbps = 90.0;
        bandwidth.sm_read_gbps = 250.0;
    }
    return bandwidth;
}

SmModelResult model_num_sms(const SmModelInput& input) {
    if (input.num_ranks < 1 || input.num_nodes < 1 || input.num_ranks % input.num_nodes != 0)
        throw InvalidArgument("model_num_sms: ranks must split evenly into nodes");
    if (input.num_device_sms < 2) throw InvalidArgument("model_num_sms: num_device_sms must be >= 2");
    if (!(input.combine_send_fraction > 0.0 && input.combine_send_fraction <= 1.0))
        throw InvalidArgument("model_num_sms: combine_send_fraction must be in (0, 1]");
    const ArchBandwidth& bw = input.bandwidth;
    SmModelResult result;
    result.expected_ranks_per_token =
        expected_distinct_groups(input.num_experts, input.topk, input.num_ranks);
    result.expected_nodes_per_token =
        expected_distinct_groups(input.num_experts, input.topk, input.num_nodes);

    // Per byte of token payload held by the sender:
    //  * the sender's SMs read it once and write one copy per distinct destination rank;
    //  * NVLink carries the copies for remote ranks of this node: D * (ranks_per_node - 1) / R
    //    (each of the D destinations is a given rank with probability 1 / R);
    //  * with several nodes, RDMA carries one copy per remote node: N_d * (nodes - 1) / nodes.
    const double ranks_per_node = double(input.num_ranks) / input.num_nodes;
    const double d = result.expected_ranks_per_token;
    result.sm_read_bytes_per_token = 1.0;
    result.sm_write_bytes_per_token = d;
    const double nvlink_bytes = d * (ranks_per_node - 1.0) / input.num_ranks;
    const double rdma_bytes =
        input.num_nodes > 1 ? result.expected_nodes_per_token * (input.num_nodes - 1.0) / input.num_nodes
                            : 0.0;

    if (input.num_nodes > 1) {
        // The hierarchical kernels (several nodes): each token crosses the network once per other
        // destination node, so the network is the link to keep busy, and the SMs move more than a
        // direct copy per token byte. Dispatch: the senders read the token and write one record per
        // destination node (N_d), the forwarders read those and write one row per destination rank
        // (D). Combine: the contributors read their rows (D) and write them to the forwarders, which
        // read them and write one partial per node (N_d), which the homes read.
        const double nodes = result.expected_nodes_per_token;
        const bool dispatch = input.op == SmModelOp::kDispatch;
        result.sm_read_bytes_per_token = dispatch ? 1.0 + nodes : 2.0 * d + nodes;
        result.sm_write_bytes_per_token = nodes + d;
    }
    const int budget =
        input.max_sms > 0 ? std::min(input.max_sms, input.num_device_sms) : input.num_device_sms;
    const double nvlink_time = nvlink_bytes / bw.nvlink_gbps, rdma_time = rdma_bytes / bw.rdma_gbps;
    if (nvlink_time <= 0 && rdma_time <= 0) {
        // Nothing crosses a link (one rank): the copy is local and read-bound.
        result.bottleneck = "none";
        result.exact_sms = 0;
        result.num_sms = std::min(budget, std::max(2, input.num_device_sms / 8));
        result.num_sms -= result.num_sms % 2;
        return result;
    }
    const bool rdma_bound = input.num_nodes > 1 || rdma_time > nvlink_time;
    result.bottleneck = rdma_bound ? "rdma" : "nvlink";
    result.link_gbps = rdma_bound ? bw.rdma_gbps : bw.nvlink_gbps;
    result.link_bytes_per_token = rdma_bound ? rdma_bytes : nvlink_bytes;

    // Token bytes per second the link can absorb, and the SMs needed to read and write that much.
    const double token_rate = result.link_gbps / result.link_bytes_per_token;
    const double sms_for_reads = token_rate * result.sm_read_bytes_per_token / bw.sm_read_gbps;
    const double write_gbps =
        bw.sm_write_gbps * (input.op == SmModelOp::kCombine ? input.combine_send_fraction : 1.0);
    const double sms_for_writes = token_rate * result.sm_write_bytes_per_token / write_gbps;
    result.exact_sms = std::max(sms_for_reads, sms_for_writes);
    int sms = static_cast<int>(std::ceil(result.exact_sms * input.headroom));
    sms += sms % 2;  // even, so SM pairs (clusters of 2) stay whole
    result.num_sms = std::clamp(sms, 2, budget - budget % 2 > 0 ? budget - budget % 2 : budget);
    return result;
}

}  // namespace switchyard
