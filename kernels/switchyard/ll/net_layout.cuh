// LL across nodes (docs/architecture.md, "LL across nodes"): who writes what where, the network's
// signal and counter ids, and the argument structs of the kernels that reach other nodes.
//
// N nodes of G ranks; rank r is local index r % G of node r / G. A rank reaches the ranks of its
// node over NVLink (the peer table) and, over the scale-out transport (transport/net.cuh), only its
// rail peers: the ranks with its local index on the other nodes. For a rank on node n, the other
// nodes are numbered o = 0 .. N - 2 in node order (node m is o = m < n ? m : m - 1).
//
// Dispatch (source s on node n, a token routed to ranks of node m != n): the token crosses the
// network once per destination node. s writes one record per (token, node) into its own staging
// area for node m (slots in token order: the token's rank among its tokens routed to node m), then
// its last sending block puts all of them, and the node header, to its rail peer p on node m (the
// "gateway" of s's tokens into node m): records into p's received area of node n, the header
// into p's received node header of node n, with a signal add of 2^32 per op. The header says, per
// rank of node m, whether s sends to it (its mask), its tokens, its rows per local expert and the
// node slot of each of its tokens. p's receive half waits for that signal and relays it: it adds
// 2^32 to s's arrival counter at every rank of node m that s sends to (NVLink). A destination q
// then reads s's records where they landed, in p's memory, through the slot list of p's header.
// Record metadata across nodes names node-local experts (expert - m * G * L): every rank of the
// node reads the same record and keeps its own experts.
//
// Combine (expert rank q on node n; a home h on node m != n): rows (flat, one per (token, k)) or
// partials (hierarchical, one per (token, rank)) of h's tokens go to the rank that forwarded them
// into node n, h's rail peer p on node n (the "forwarder"), into its forward area [m][k][t]. After
// its own sends and arrivals, p waits for its node's arrivals and, per other node m: hierarchical,
// sums the partials of each token over its node's ranks ascending in fp32 and rounds to bf16
// (DESIGN.md §2, several nodes), in place, into the slot of the token's first k owned by a
// contributing rank of the node, and puts that one row; flat, puts every row as it is. Then its
// last block puts the network header (the node's contributing ranks) with a signal add of 2^32 to
// h, which waits for it directly (p is h's rail peer). Rows land in h's combine rows [k][t], as
// those of h's own node do.
//
// Reuse. Staging, received records, headers and flags are per set: ops n and n + 2 of a kind are
// never in flight together (ll/ll_layout.cuh), and op n's receivers have seen its signals, so its
// puts have read their sources. The forward area is one for both sets (it holds (N - 1) * K * T_ll
// rows, the largest part of the layout): a node-mate writes rows into p's forward area only once p
// has published, for that op, that its earlier forward puts have read their sources (a counter
// per put; kCounterLlNetForwardReady, workspace_layout.cuh).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/workspace_layout.cuh"
#include "switchyard/ll/ll_args.cuh"
#include "switchyard/ll/ll_layout.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

// Where this rank stands among the nodes.
struct LlNodes {
    int32_t num_nodes;       // N
    int32_t ranks_per_node;  // G
    int32_t node;            // this rank's node
    int32_t local_index;     // this rank's index in its node

    SY_HOST_DEVICE int32_t node_of(int32_t rank) const { return rank / ranks_per_node; }
    SY_HOST_DEVICE int32_t local_of(int32_t rank) const { return rank % ranks_per_node; }
    SY_HOST_DEVICE int32_t rank_of(int32_t node_index, int32_t local) const {
        return node_index * ranks_per_node + local;
    }
    SY_HOST_DEVICE bool on_my_node(int32_t rank) const { return node_of(rank) == node; }
    // Other node m (m != node) as this rank numbers them, and back.
    SY_HOST_DEVICE int32_t other_index(int32_t m) const { return m < node ? m : m - 1; }
    SY_HOST_DEVICE int32_t other_node(int32_t o) const { return o < node ? o : o + 1; }
    // This rank's node as node m numbers it.
    SY_HOST_DEVICE int32_t index_at(int32_t m) const { return node < m ? node : node - 1; }
    SY_HOST_DEVICE int32_t others() const { return num_nodes - 1; }
};

// --- Record areas of a set (LlSetLayout::record_areas = G + 2 (N - 1)) ----------------------------
SY_HOST_DEVICE int32_t ll_net_local_area(int32_t local_index) {
    return local_index;
}
SY_HOST_DEVICE int32_t ll_net_received_area(const LlNodes& nodes, int32_t other) {
    return nodes.ranks_per_node + other;
}
SY_HOST_DEVICE int32_t ll_net_staging_area(const LlNodes& nodes, int32_t other) {
    return nodes.ranks_per_node + nodes.others() + other;
}

// --- Node headers (LlSetLayout::node_header: received [o], staged [N - 1 + o]) ----------------------
// Int32 words: [0] records put (node slots used), then per local rank g of the destination node at
// ll_node_header_rank(g): {present (1: the source sends to g), tokens to g, rows of g's local
// experts [L], node slot of g's i-th token [T_ll]}.
SY_HOST_DEVICE int64_t ll_node_header_rank(int32_t local_index, int32_t max_local_experts, int32_t max_tokens) {
    return 1 + int64_t(local_index) * (2 + int64_t(max_local_experts) + max_tokens);
}
constexpr int32_t kLlNodeHeaderPresent = 0;
constexpr int32_t kLlNodeHeaderTokens = 1;
constexpr int32_t kLlNodeHeaderCounts = 2;  // + L: then the slot list

// --- Signals and counters on the network (transport/net.cuh, contract 6) ---------------------------
// Per receiving rank, one signal per (kind, set, source node): the rail peer on that node is its
// only writer. Below the network check's ids (net_check.cuh: the top 320 of each range); the HT
// kernels keep to lower ids. One counter: the forward puts of the combine (forward-area reuse).
constexpr int32_t kLlNetMaxNodes = 64;
constexpr uint32_t kLlNetSignalBase = uint32_t(kNetNumSignals) - kNetCheckIds - 4u * kLlNetMaxNodes;
static_assert(4 * kLlNetMaxNodes == kNetLlSignalIds, "the LL ids are the range net_types.cuh reserves");
constexpr uint32_t kLlNetForwardCounter = uint32_t(kNetNumCounters) - kNetCheckIds - 1u;
SY_HOST_DEVICE constexpr uint32_t ll_net_signal(int32_t kind, int32_t set, int32_t source_node) {
    return kLlNetSignalBase + uint32_t((kind * 2 + set) * kLlNetMaxNodes + source_node);
}
// The context of every LL request: the network's last (the HT kernels use the first ones), so LL
// signals never wait behind HT puts of the same context.
SY_HOST_DEVICE constexpr int32_t ll_net_context(int32_t num_contexts) {
    return num_contexts - 1;
}

// The forward area (BufferLayout::ll_forward_offset): [N - 1 other nodes][K][T_ll] combine rows of
// the op's row bytes (LlSetLayout::combine_row_bytes(H)), as the combine rows of a set.
struct LlForwardArea {
    int64_t offset;  // in every rank's buffer
    int32_t max_topk;
    int32_t max_tokens;
    SY_HOST_DEVICE int64_t row_offset(int32_t other, int32_t k, int32_t token, int64_t row_bytes) const {
        return offset + ((int64_t(other) * max_topk + k) * max_tokens + token) * row_bytes;
    }
};

// What each op adds to a network signal (once per op and destination), and what a gateway adds
// to a relayed arrival counter: a whole op's worth, as ll_arrival_target counts them.
constexpr uint64_t kLlNetOpAmount = uint64_t(1) << 32;

// What every LL kernel across nodes adds to its family's arguments.
template <class Backend>
struct LlNetArgs {
    typename Backend::Context net;
    LlNodes nodes;
    LlForwardArea forward;
};

template <class Backend>
struct LlNetDispatchArgs {
    LlDispatchArgs base;
    LlNetArgs<Backend> net;
    // The forwarder's routing, for the combine: per record received from each other node's rail
    // peer [N - 1][T_ll][K + 1] {home token, then per k the local index of its owner on this node,
    // or -1}, and the records [N - 1].
    int32_t* forward_rows;
    int32_t* forward_counts;
};

template <class Backend>
struct LlNetCombineArgs {
    LlCombineArgs base;
    LlNetArgs<Backend> net;
    const int32_t* forward_rows;
    const int32_t* forward_counts;
};

}  // namespace switchyard::device
