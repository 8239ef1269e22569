// Measured winners, frozen: every tuning constant of the kernel families, beside the SM model
// (sm_model.cpp) that uses some of them. Each was chosen by an A/B measurement recorded in
// docs/decisions.md; the losing variants are deleted, not kept behind switches. Launchers read
// these and pass them to the kernels as template arguments or launch dimensions, so each value is
// written once. Values derived from others are computed here, not repeated.
#pragma once

#include <cstdint>

namespace switchyard::tuning {

// --- High-throughput dispatch -------------------------------------------------------------------
// Warps of a dispatch block claim tokens one at a time, the next claim issued a token ahead (a
// static split of the tokens over the warps, and claims of 2 or 8 tokens, were slower).
constexpr int kHtDispatchClaimTokens = 1;
// Shared memory a dispatch block gives its warps' two-stage token pipelines, and the most warps.
constexpr int kHtDispatchSharedBudget = 200 * 1024;
constexpr int kHtDispatchMaxWarps = 16;
// Warps of a dispatch block whose stages hold `stage_bytes` each (one record's payload and scales):
// as many two-stage pipelines as the budget holds (fewer warps were no faster).
constexpr int ht_dispatch_warps(int64_t stage_bytes) {
    const int64_t fit = kHtDispatchSharedBudget / (2 * stage_bytes);
    return fit < 1 ? 1 : (fit > kHtDispatchMaxWarps ? kHtDispatchMaxWarps : int(fit));
}

// --- High-throughput combine --------------------------------------------------------------------
// Warps of a combine block: kHtCombineSendWarps send rows, one publishes their arrivals, the others
// reduce. Senders that never stall in their own fences need few warps.
constexpr int kHtCombineWarps = 16;
constexpr int kHtCombineSendWarps = 4;
// Rows a combine sender warp claims and queues at a time: small grids have fewer senders, and each
// then needs more rows in flight.
constexpr int kHtCombineSmallGridSms = 16;
constexpr int kHtCombineSendGroupSmallGrid = 4;  // grids of at most kHtCombineSmallGridSms blocks
constexpr int kHtCombineSendGroupLargeGrid = 2;
constexpr int ht_combine_send_group(int num_sms) {
    return num_sms <= kHtCombineSmallGridSms ? kHtCombineSendGroupSmallGrid : kHtCombineSendGroupLargeGrid;
}
// The share of a combine block's write throughput the SM model counts (a calibration the bench's
// SM sweep checks): ten warps' worth of a block. The senders, which never stall in fences and claim
// their rows, and the reducers' writes move that much.
constexpr double kHtCombineSendFraction = 10.0 / kHtCombineWarps;

// --- High-throughput receive (expert-major expansion) --------------------------------------------
// No waits on other ranks: blocks several deep per SM of the rank's budget.
constexpr int kHtReceiveThreads = 256;
constexpr int kHtReceiveBlocksPerSm = 4;

// --- Hierarchical HT (ranks on several nodes) ---------------------------------------------------------
// A dispatch block's warps split into senders (tokens into the node streams) and forwarders
// (arrived records to the ranks of this node); both stage records, so the block has as many
// warps as the direct path's stage budget holds (at least one of each). A forwarder writes each
// record to about as many ranks as the token reaches in the node, and forwards the records of
// every source node into this one, so it gets two thirds of the warps.
constexpr int hier_dispatch_warps(int64_t stage_bytes) {
    const int warps = ht_dispatch_warps(stage_bytes);
    return warps < 2 ? 2 : warps;
}
constexpr int hier_dispatch_send_warps(int warps) {
    return warps / 3 < 1 ? 1 : warps / 3;
}
// Tokens a sender warp claims and walks as one run: after a run it makes the run's records visible
// and adds them to their batches (a system fence and an atomic per node), so runs are not single
// tokens; a batch is sent when its last run is added.
constexpr int kHierDispatchClaimTokens = 8;

// --- Low latency --------------------------------------------------------------------------------
// Warps per block of every LL kernel: a template argument of the kernels and the launch's block.
constexpr int kLlWarps = 8;
// Work items per sending warp: an LL kernel sends from as few blocks as give each warp this many
// items. Fewer sending blocks mean fewer system fences and remote arrivals per op, more mean fewer
// items in a row per warp; one item per warp won.
constexpr int kLlSendItemsPerWarp = 1;

// --- SM budget ---------------------------------------------------------------------------------
// SMs per rank left out of the budgets of the ranks sharing a GPU when the emulated network runs
// on it: its engine moves the payload with a copy kernel of its own (transport/net_copy.cuh) of at
// most kNetCopyBlocksPerSm blocks per SM of this reserve, and the ranks' kernels wait for those
// deliveries. Without the reserve, at
// top-8 of 256 experts (EP2 on one H200, LL-across-nodes kernels at 192-248 registers a thread, one
// block per SM) 2 x 66 blocks filled the GPU and every combine timed out with its copies queued.
constexpr int kEmulatedNetworkSmsPerRank = 4;

// SMs one rank may use: the device's SMs divided among the ranks that share it, less the emulated
// network's share (at least one).
constexpr int rank_sm_budget(int device_sms, int ranks_on_gpu, bool emulated_network) {
    const int ranks = ranks_on_gpu > 1 ? ranks_on_gpu : 1;
    const int usable = emulated_network ? device_sms - ranks * kEmulatedNetworkSmsPerRank : device_sms;
    return usable / ranks > 1 ? usable / ranks : 1;
}

// Whether the dispatch chained after the routing kernel may be scheduled as the routing starts (its
// blocks then wait beside the routing's) rather than once every routing block has published its
// chunk: only when both grids, one block an SM, fit the rank's share, so that no co-located rank's
// routing waits for SMs that idle dispatch blocks hold (four ranks on one H200 lost 12-13 us so).
constexpr bool dispatch_scheduled_with_routing(int routing_blocks, int dispatch_blocks, int sm_budget) {
    return routing_blocks + dispatch_blocks <= sm_budget;
}

}  // namespace switchyard::tuning
