// The marks of every traced op (common/op_trace.cuh), in one place so the host prints them by the
// same numbering the kernels record. A "first" mark records the earliest time any thread reached
// it; every other mark the latest.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/workspace_layout.cuh"

namespace switchyard::device {

// HT dispatch: its three kernels (routing, dispatch, receive) share one timeline.
enum HtDispatchMark : int32_t {
    kHtRoutingStart = 0,     // first: the first routing block started
    kHtRoutingEnd,           // the last routing block ended
    kHtRoutingLoaded,        // the last routing block has its chunk's routing staged
    kHtRoutingPublished,     // the last routing block published its chunk's totals
    kHtRoutingLookedBack,    // the last routing block has every earlier chunk's totals
    kHtDispatchStart,        // first: the first dispatch block started (the routing may still run)
    kHtDispatchRoutingDone,  // every dispatch block past its wait for the routing kernel
    kHtDispatchNotified,     // the counts went to every peer
    kHtDispatchCounts,       // every block has all peers' counts (the entry handshake)
    kHtDispatchSent,         // the last warp's rows issued and drained
    kHtDispatchFirstSent,    // first: the first warp's rows issued and drained (with Sent: the spread)
    kHtDispatchSignalled,    // the last block raised "done" at every destination
    kHtDispatchArrived,      // every source's "done" seen here
    kHtDispatchEnd,          // the last dispatch block ended
    kHtReceiveStart,         // first: a receive block past its wait for the dispatch kernel
    kHtReceiveEnd,           // the last receive block ended
    // Across nodes only (hier/): the network's part of the op at this rank.
    kHtDispatchFirstPut,     // first: a sender put the first batch of a stream to another node
    kHtDispatchFirstLanded,  // first: a forwarder had the first batch from another node
    kHtDispatchLastLanded,   // a forwarder had the last batch from another node
    kHtDispatchFirstStaged,  // first: a sender had its first token staged (loaded, or quantized)
    kHtDispatchFirstRun,     // first: a sender's first run of tokens was written and visible
    kHtDispatchMarks,
};
constexpr uint32_t kHtDispatchFirstMarks = (1u << kHtRoutingStart) | (1u << kHtDispatchStart) |
                                           (1u << kHtDispatchFirstSent) | (1u << kHtReceiveStart) |
                                           (1u << kHtDispatchFirstPut) | (1u << kHtDispatchFirstLanded) |
                                           (1u << kHtDispatchFirstStaged) | (1u << kHtDispatchFirstRun);

enum HtCombineMark : int32_t {
    kHtCombineStart = 0,     // first: the first block started
    kHtCombineEntered,       // every block past the entry handshake
    kHtCombineSent,          // the last sender warp's rows written
    kHtCombinePublished,     // the last publisher's arrivals raised
    kHtCombineReduced,       // the last warp finished reducing
    kHtCombineFirstReduced,  // first: the first warp found nothing left to reduce
    kHtCombineEnd,           // the last block ended
    // Across nodes only (hier/): the network's part of the op at this rank.
    kHtCombineFirstPut,     // first: a forwarder put the first batch of partials to another node
    kHtCombineFirstLanded,  // first: the home had the first batch of partials from another node
    kHtCombineLastLanded,   // the home had the last batch of partials from another node
    kHtCombineMarks,
};
constexpr uint32_t kHtCombineFirstMarks = (1u << kHtCombineStart) | (1u << kHtCombineFirstReduced) |
                                          (1u << kHtCombineFirstPut) | (1u << kHtCombineFirstLanded);

// LL dispatch and combine: one kernel each, or a send and a receive half (hook mode), each half
// then traced as an op of its own. A mark a half does not reach stays empty.
enum LlDispatchMark : int32_t {
    kLlDispatchStart = 0,  // first: the first block started
    kLlDispatchEntered,    // every block past its prologue (sequences and mask read)
    kLlDispatchRouted,     // every sending block has its routing masks
    kLlDispatchSent,       // the last sending warp's slices stored
    kLlDispatchArrived,    // the last arrival raised at a destination
    kLlDispatchWaited,     // every block has every source's arrivals
    kLlDispatchPlanned,    // every block knows where each source's rows go
    kLlDispatchReceived,   // the last warp's records copied into the output
    kLlDispatchEnd,        // the last block ended
    kLlDispatchMarks,
};
constexpr uint32_t kLlDispatchFirstMarks = 1u << kLlDispatchStart;

enum LlCombineMark : int32_t {
    kLlCombineStart = 0,  // first: the first block started
    kLlCombineEntered,    // every block past its prologue
    kLlCombinePlanned,    // every block has the send half's row (or record) prefixes
    kLlCombineSent,       // the last sending warp's rows (or partials) stored
    kLlCombineArrived,    // the last arrival raised at a home rank
    kLlCombineWaited,     // every block has every source's arrivals
    kLlCombineReduced,    // the last warp's tokens reduced into the output
    kLlCombineEnd,        // the last block ended
    kLlCombineMarks,
};
constexpr uint32_t kLlCombineFirstMarks = 1u << kLlCombineStart;

static_assert(kHtDispatchMarks <= kTraceMaxMarks && kHtCombineMarks <= kTraceMaxMarks);
static_assert(kLlDispatchMarks <= kTraceMaxMarks && kLlCombineMarks <= kTraceMaxMarks);

}  // namespace switchyard::device
