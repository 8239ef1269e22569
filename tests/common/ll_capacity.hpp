// The capacities of a buffer with only the LL path enabled, for the CPU tests of its layout: what a
// Buffer computes from such a configuration (core::buffer_capacity).
#pragma once

#include "core/buffer_sizing.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/config.hpp"

namespace switchyard::testing {

// `ranks` split into `nodes`; LL ops of up to `tokens` tokens of `hidden`, `topk` of `experts`.
inline device::BufferCapacity ll_capacity(int ranks, int nodes = 1, int tokens = 128, int hidden = 7168,
                                          int experts = 256, int topk = 8) {
    BufferConfig config;
    config.max_experts = experts;
    config.max_tokens_per_rank = 4096;
    config.max_hidden = hidden;
    config.max_topk = topk;
    config.ll_max_tokens_per_rank = tokens;
    config.enable_high_throughput = false;
    config.enable_low_latency = true;
    return core::buffer_capacity(config, ranks, nodes);
}

}  // namespace switchyard::testing
