// Measured winners, frozen: every tuning constant of the kernel families, beside the SM model
// (sm_model.cpp) that uses some of them. Each was chosen by an A/B measurement recorded in
// docs/decisions.md; the losing variants are deleted, not kept behind switches. Launchers read
// these and pass them to the kernels as template arguments or launch dimensions, so each value is
// written once. Values derived from others are computed here, not repeated.
#pragma once

#include <cstdint>

namespace switchyard::tuning {

// --- High-throughput dispatch -------------------------------------------------------------------
// Warps of a dispatch block claim tokens one at a time, the next claim issued a token ahead.
constexpr int kHtDispatchClaimTokens = 1;
// Shared memory a dispatch block gives its warps' two-stage token pipelines, and the most warps.
constexpr int kHtDispatchSharedBudget = 200 * 1024;
constexpr int kHtDispatchMaxWarps = 16;

// --- High-throughput combine --------------------------------------------------------------------
// Threads of a combine block: sender warps, one publisher warp, and reducers.
constexpr int kHtCombineWarps = 16;
constexpr int kHtCombineSendWarps = 4;
constexpr int kHtCombinePublisherWarps = 1;
// Rows a combine sender warp writes per publication: more in flight on small grids.
constexpr int ht_combine_send_group(int num_sms) { return num_sms <= 16 ? 4 : 2; }
// The share of a combine block's write throughput the SM model counts: the senders' and the
// publisher's warps plus the reducers' writes (the combine moves rows while it reduces).
constexpr double kHtCombineSendFraction = 10.0 / 16.0;

// --- High-throughput receive (expert-major expansion) --------------------------------------------
constexpr int kHtReceiveThreads = 256;
constexpr int kHtReceiveBlocksPerSm = 4;

// --- Low latency --------------------------------------------------------------------------------
// Warps per block of every LL kernel: a template argument of the kernels and the launch's block.
constexpr int kLlWarps = 8;
// Work items per sending warp: an LL kernel sends from as few blocks as give each warp this many
// items. Fewer sending blocks mean fewer system fences and remote arrivals per op, more mean fewer
// items in a row per warp; one item per warp won.
constexpr int kLlSendItemsPerWarp = 1;

}  // namespace switchyard::tuning
