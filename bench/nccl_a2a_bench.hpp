// NCCL all-to-all on the MoE dispatch and combine payloads: the baseline our kernels must beat
// (DESIGN.md §9: speedup_vs_nccl).
//
// One process drives every GPU: communicators come from ncclCommInitAll and each all-to-all is
// one ncclGroupStart/End around every rank's ncclSend/ncclRecv (the self-copy included, as NCCL's
// own all-to-all does).
#pragma once

#include <cstdint>
#include <vector>

#include "a2a_payload.hpp"
#include "comm/nccl_library.hpp"
#include "stats.hpp"

namespace switchyard::bench {

struct NcclA2aOptions {
    A2aShape shape;  // shape.ranks = GPUs used, devices 0..ranks-1
    int warmup = 3;
    int iters = 20;
};

struct NcclA2aResult {
    A2aPhase phase = A2aPhase::kDispatch;
    // Per iteration: the slowest rank's time between the aligned start and its last byte.
    TimingStats time_us;
    int64_t max_bytes_received = 0;     // over ranks, self-copy included
    int64_t max_remote_bytes_sent = 0;  // over ranks, bytes that left the GPU
};

// Sets NCCL_NVLS_ENABLE=0 unless the caller already chose a value: the GPU machine forbids
// NVLink multicast, and NCCL would otherwise try it on NVSwitch systems. Call before NCCL init.
void disable_nvls_unless_set();

// Measures dispatch then combine. Throws CudaError / Error with NCCL's message on failure.
std::vector<NcclA2aResult> measure_nccl_a2a(const NcclA2aOptions& options, const A2aPayload& payload,
                                            const NcclLibrary& nccl);

}  // namespace switchyard::bench
