// The hierarchical HT path's predicted network bytes (include/switchyard/network.hpp), from the same
// record and counts layouts the kernels use (hier/hier_layout.cuh).
#include <string>

#include "switchyard/errors.hpp"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/network.hpp"

namespace switchyard {
namespace {

// Whether token `t` of a rank with ids `idx` goes to node `node` (one of its experts is owned there).
bool goes_to(const std::vector<int64_t>& idx, int t, int topk, int experts_per_node, int node) {
    for (int k = 0; k < topk; ++k) {
        const int64_t expert = idx[size_t(t) * topk + k];
        if (expert >= 0 && expert / experts_per_node == node) return true;
    }
    return false;
}

uint64_t tokens_to_node(const std::vector<int64_t>& idx, int topk, int experts_per_node, int node) {
    uint64_t count = 0;
    const int tokens = topk > 0 ? int(idx.size() / size_t(topk)) : 0;
    for (int t = 0; t < tokens; ++t) count += goes_to(idx, t, topk, experts_per_node, node);
    return count;
}

}  // namespace

std::vector<uint64_t> predict_ht_network_bytes(const HtNetworkShape& shape,
                                               const std::vector<std::vector<int64_t>>& topk_idx, int rank,
                                               HtNetworkOp op) {
    const int R = shape.num_ranks, N = shape.num_nodes, K = shape.topk;
    if (R < 1 || N < 1 || R % N != 0 || shape.num_experts % R != 0 || K < 1 || shape.hidden < 1 ||
        int(topk_idx.size()) != R || rank < 0 || rank >= R)
        throw InvalidArgument("switchyard: predict_ht_network_bytes: inconsistent shape (ranks " + std::to_string(R) +
                              ", nodes " + std::to_string(N) + ", experts " + std::to_string(shape.num_experts) +
                              ", " + std::to_string(topk_idx.size()) + " routing tables, rank " +
                              std::to_string(rank) + ")");
    std::vector<uint64_t> bytes(size_t(R), 0);
    if (N == 1) return bytes;
    const int G = R / N, L = shape.num_experts / R, node = rank / G, local = rank % G;
    const int experts_per_node = L * G;
    const int scale_kind = shape.records == ScaleFormat::kFloat32 ? device::kScaleFloat32
                           : shape.records == ScaleFormat::kUE8M0 ? device::kScaleUe8m0
                                                                  : device::kScaleNone;
    const int payload = scale_kind == device::kScaleNone ? device::kPayloadBf16 : device::kPayloadFp8;
    const uint64_t forward = uint64_t(device::hier_forward_record(shape.hidden, payload, scale_kind, K, G).total_bytes);
    const uint64_t counts = uint64_t(device::HierCounts{G, L}.bytes());
    const uint64_t partial = uint64_t(device::RecordLayout::combine(shape.hidden, K).total_bytes);
    const uint64_t tokens = uint64_t(topk_idx[size_t(rank)].size() / size_t(K));
    for (int m = 0; m < N; ++m) {
        if (m == node) continue;
        const int peer = m * G + local;
        if (op == HtNetworkOp::kDispatch) {
            bytes[size_t(peer)] = counts + tokens_to_node(topk_idx[size_t(rank)], K, experts_per_node, m) * forward;
        } else {
            // This rank forwarded the peer's tokens that go to this rank's node; one partial each goes back.
            bytes[size_t(peer)] = tokens_to_node(topk_idx[size_t(peer)], K, experts_per_node, node) * partial;
            if (op == HtNetworkOp::kCombineWithHomeWeights) bytes[size_t(peer)] += tokens * uint64_t(K) * 4;
        }
    }
    return bytes;
}

}  // namespace switchyard
