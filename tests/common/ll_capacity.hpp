// The capacities of a buffer with only the LL path enabled, for the CPU tests of its layout.
#pragma once

#include "switchyard/common/buffer_layout.cuh"

namespace switchyard::testing {

// `ranks` split into `nodes`; LL ops of up to `tokens` tokens of `hidden`, `topk` of `experts`.
inline device::BufferCapacity ll_capacity(int ranks, int nodes = 1, int tokens = 128, int hidden = 7168,
                                          int experts = 256, int topk = 8) {
    device::BufferCapacity capacity{};
    capacity.num_ranks = ranks;
    capacity.max_experts = experts;
    capacity.max_tokens_per_rank = 4096;
    capacity.max_hidden = hidden;
    capacity.max_topk = topk;
    capacity.ll_max_tokens_per_rank = tokens;
    capacity.high_throughput = false;
    capacity.low_latency = true;
    capacity.num_nodes = nodes;
    return capacity;
}

}  // namespace switchyard::testing
