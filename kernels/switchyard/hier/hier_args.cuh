// Argument structs of the hierarchical HT kernels (ranks on several nodes), shared by the host
// launchers (src/launch/hier_*) and the device code. Each embeds the single-node kernel's struct
// (ht/ht_args.cuh): the hierarchical kernels reuse its roles (staging, counts publication, row
// sends) and add the network context and what the streams of records need.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/hier/hier_layout.cuh"
#include "switchyard/ht/ht_args.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

template <class Backend>
struct HierDispatchArgs {
    HtDispatchArgs ht;  // inputs, routing, receive summary, host counts, trace (ht.common: this node's peers)
    typename Backend::Context net;
    int64_t forward_bytes;               // the op's forward record (hier_forward_record)
    const int32_t* token_node_slot;      // [T, N] slot of each token in the stream to each node, -1
    const int32_t* num_tokens_per_node;  // [N] records of each stream
    int32_t* forward_meta;               // handle: [N][T_max][HierForwardMeta words] of forwarded records
    int32_t* forward_counts;             // handle: [N] records forwarded from each source node
};

template <class Backend>
struct HierCombineArgs {
    HtCombineArgs ht;  // rows, handle arrays, home inputs and outputs (ht.common: this node's peers)
    typename Backend::Context net;
    // Forwarder side (the dispatch's handle).
    const int32_t* forward_meta;    // [N][T_max][HierForwardMeta words]
    const int32_t* forward_counts;  // [N]
    // Home side.
    const int32_t* token_node_slot;      // [T, N]
    const int32_t* num_tokens_per_node;  // [N]
    int32_t weights_travel;  // flat weighted: the homes' weights (ht.home_weights) go to the forwarders
};

}  // namespace switchyard::device
