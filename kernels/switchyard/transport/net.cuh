// The scale-out transport: how a kernel reaches ranks on other nodes (DESIGN.md §4, contract).
//
// A strict subset of the NCCL device API's GPU-initiated networking (GIN), with two backends
// behind one interface, chosen at compile time by the kernel's template argument:
//   NetEmulated  the emulated network between emulated nodes on one host (tests, benchmarks): a
//                CPU engine per rank executes the requests with a copy kernel (src/net/)
//   NetGin       NCCL GIN over an ncclComm_t spanning the nodes (production); these kernels are
//                compiled by nvcc against the NCCL headers the library was built with
// A kernel that talks to the network is a template on the backend, takes `typename
// Backend::Context` in its argument struct, and makes a NetPort where it needs one.
//
// Addressing. The network joins the ranks with the same local index on every node: a rank's rail
// peers, one per node. A request names its peer by node index; offsets are byte offsets into the
// destination rank's window (its symmetric buffer) and into this rank's own window. Kernels never
// hold a pointer into another node's memory.
//
// Contract (what a kernel may rely on, and nothing more):
//   1. put is asynchronous and unordered: it returns before anything moved; its source is read at
//      an undefined later time, so the source must stay unchanged until a counter of the put (or a
//      flush) says it was read; without a signal, when (and in which order) its bytes land at the
//      peer is unspecified.
//   2. A signal (attached to a put, or bare) is strong: the peer sees the add only after the put's
//      own payload and the payload of every earlier put on the same context to the same peer have
//      landed. "Earlier" is the issue order of the requests on this rank: program order within a
//      thread, and any order the kernel establishes between threads (__syncthreads() before the
//      signalling thread issues). Nothing orders requests on different contexts.
//   3. A counter attached to a put grows by one (on this rank) once that put's source was read.
//      It says nothing about the payload landing.
//   4. flush() returns once every put this thread issued earlier on the port's context has read
//      its source. It says nothing about remote completion either.
//   5. Data written by the kernel before a put (its source) must be written by the issuing thread,
//      or by threads whose writes it acquired before the put (__syncthreads(), __syncwarp(), or a
//      release and acquire at GPU scope through memory); the put releases them at the scope its
//      reader needs (the emulated engine's tag at system scope; GIN's put itself).
//   6. Signals are single-writer: each signal id of a receiving rank is raised by one source rank
//      only (callers lay signal ids out per source node). Each signal and counter id belongs to
//      one context: it is raised, read and waited for through ports on that context only (GIN
//      keeps signals and counters per context; the emulated network refuses an id raised on two
//      contexts). Signals and counters are monotone: they only grow (counters wrap at 2^56 on
//      GIN), are never reset during an op, and start at zero when the buffer is created or
//      reset(); ops wait for sequence-relative targets (the zero-or-monotone workspace rule).
//   7. Every wait is bounded (common/diagnostics.cuh): on timeout the error record names phase, the
//      peer rank and node, and "network" as the transport; the function returns false and the
//      kernel winds down. A request that would reach outside a window, an unknown node, signal or
//      counter is never sent: it is reported as kErrorNetworkRequest and returns false.
//   8. Contexts: 0 <= context < Context::num_contexts (at most kNetMaxContexts = 4).
//   9. A thread that waits must not hold back the progress of the puts it waits for (the backends
//      need no kernel to run for delivery: the engine or the NIC moves the bytes).
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <class Backend>
class NetPort {
  public:
    using Context = typename Backend::Context;

    // A port on context `context_index` of this rank's network. Cheap (it keeps references): make
    // one where needed. `diagnostics` receives the report of a failed wait.
    SY_DEVICE NetPort(const Context& context, int32_t context_index, const Diagnostics& diagnostics)
        : context_(context), index_(context_index), diagnostics_(diagnostics) {}

    // This rank's place on the network.
    SY_DEVICE int32_t node() const { return context_.node; }
    SY_DEVICE int32_t num_nodes() const { return context_.num_nodes; }
    SY_DEVICE int32_t local_index() const { return context_.local_index; }
    SY_DEVICE int32_t ranks_per_node() const { return context_.ranks_per_node; }
    // The global rank of this rank's rail peer on `peer_node`.
    SY_DEVICE int32_t rail_peer(int32_t peer_node) const {
        return peer_node * context_.ranks_per_node + context_.local_index;
    }

    // Copies `bytes` from this rank's window at `src_offset` to the window of the rail peer on
    // `peer_node` at `dst_offset` (contract 1). With `signal`, raises that signal at the peer once
    // this payload and every earlier put on the context to that peer landed (contract 2); with
    // `counter`, bumps this rank's counter once the source was read (contract 3). Returns false
    // when the request could not be issued (reported: contract 7).
    SY_DEVICE bool put(int32_t peer_node, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes,
                       NetSignal signal = {}, NetCounter counter = {}) const;

    // A bare signal add at the rail peer on `peer_node`, ordered like a put's signal.
    SY_DEVICE bool signal(int32_t peer_node, NetSignal signal) const;

    // Waits until every put this thread issued earlier on this context has read its source
    // (contract 4). False on timeout.
    SY_DEVICE bool flush() const;

    // The current value of this rank's signal `id` / counter `id` (acquire: data the signal covers
    // is visible after a read that saw it).
    SY_DEVICE uint64_t read_signal(uint32_t id) const;
    SY_DEVICE uint64_t read_counter(uint32_t id) const;

    // Waits (bounded) until signal `id` of this rank reaches `target`; `peer_node` is the node
    // whose rail peer raises it, for the report. `phase` names the op's phase in the report
    // (kPhaseNetwork by default). False on timeout or when the buffer is poisoned.
    SY_DEVICE bool wait_signal(uint32_t id, uint64_t target, int32_t peer_node,
                               int32_t phase = kPhaseNetwork) const;
    // Waits (bounded) until this rank's counter `id` reaches `target`.
    SY_DEVICE bool wait_counter(uint32_t id, uint64_t target, int32_t phase = kPhaseNetwork) const;

  private:
    // Checks a request against the windows and id ranges; reports and returns false if it is out.
    SY_DEVICE bool request_is_valid(int32_t peer_node, uint64_t dst_offset, uint64_t src_offset,
                                    uint64_t bytes, NetSignal signal, NetCounter counter) const;

    const Context& context_;
    int32_t index_;
    const Diagnostics& diagnostics_;
};

// --- What both backends share ------------------------------------------------------------------

// Fills a network timeout's detail words (NetDetailWord).
struct NetTimeoutDetails {
    int32_t peer_node;
    int64_t id;
    int32_t context;
    int32_t what;  // NetWaitKind
    SY_DEVICE void operator()(ErrorDetails& details) const {
        details.word[kNetDetailPeerNode] = peer_node;
        details.word[kNetDetailId] = id;
        details.word[kNetDetailContext] = context;
        details.word[kNetDetailWhat] = what;
        details.word[kNetDetailTransport] = kNetTransportMarker;
    }
};

template <class Backend>
SY_DEVICE bool NetPort<Backend>::request_is_valid(int32_t peer_node, uint64_t dst_offset, uint64_t src_offset,
                                                  uint64_t bytes, NetSignal signal, NetCounter counter) const {
    const uint64_t window = context_.window_bytes;
    int32_t problem = 0;
    uint64_t expected = 0, observed = 0;  // the limit, and the value that broke it
    if (index_ < 0 || index_ >= context_.num_contexts) {
        problem = kNetBadContext, expected = uint64_t(context_.num_contexts), observed = uint64_t(int64_t(index_));
    } else if (peer_node < 0 || peer_node >= context_.num_nodes) {
        problem = kNetBadPeerNode, expected = uint64_t(context_.num_nodes), observed = uint64_t(int64_t(peer_node));
    } else if (dst_offset > window || bytes > window - dst_offset) {
        problem = kNetBadDestination, expected = window, observed = dst_offset + bytes;
    } else if (src_offset > window || bytes > window - src_offset) {
        problem = kNetBadSource, expected = window, observed = src_offset + bytes;
    } else if (signal.present() && signal.id >= uint32_t(kNetNumSignals)) {
        problem = kNetBadSignal, expected = uint64_t(kNetNumSignals), observed = signal.id;
    } else if (counter.present() && counter.id >= uint32_t(kNetNumCounters)) {
        problem = kNetBadCounter, expected = uint64_t(kNetNumCounters), observed = counter.id;
    }
    if (problem == 0) return true;
    const bool peer_ok = problem != kNetBadPeerNode && problem != kNetBadContext;
    const NetTimeoutDetails details{peer_node, signal.present() ? int64_t(signal.id) : -1, index_, problem};
    ErrorDetails words;
    details(words);
    report_error(diagnostics_, kErrorNetworkRequest, kPhaseNetwork, peer_ok ? rail_peer(peer_node) : -1,
                 expected, observed, 0, words);
    return false;
}

// Backends define every member below for their tag; using a backend whose definitions were not
// compiled in (NetGin under NVRTC) stops at these.
template <class Backend>
struct NetBackendMissing {
    static constexpr bool value = false;
};
#define SY_NET_MISSING_BACKEND                                                                      \
    static_assert(NetBackendMissing<Backend>::value,                                                \
                  "this network backend is not compiled in: NetGin kernels are compiled by nvcc " \
                  "against the NCCL headers (jit::Compiler::kNvccNccl)")

template <class Backend>
SY_DEVICE bool NetPort<Backend>::put(int32_t, uint64_t, uint64_t, uint64_t, NetSignal, NetCounter) const {
    SY_NET_MISSING_BACKEND;
    return false;
}
template <class Backend>
SY_DEVICE bool NetPort<Backend>::signal(int32_t, NetSignal) const {
    SY_NET_MISSING_BACKEND;
    return false;
}
template <class Backend>
SY_DEVICE bool NetPort<Backend>::flush() const {
    SY_NET_MISSING_BACKEND;
    return false;
}
template <class Backend>
SY_DEVICE uint64_t NetPort<Backend>::read_signal(uint32_t) const {
    SY_NET_MISSING_BACKEND;
    return 0;
}
template <class Backend>
SY_DEVICE uint64_t NetPort<Backend>::read_counter(uint32_t) const {
    SY_NET_MISSING_BACKEND;
    return 0;
}
template <class Backend>
SY_DEVICE bool NetPort<Backend>::wait_signal(uint32_t, uint64_t, int32_t, int32_t) const {
    SY_NET_MISSING_BACKEND;
    return false;
}
template <class Backend>
SY_DEVICE bool NetPort<Backend>::wait_counter(uint32_t, uint64_t, int32_t) const {
    SY_NET_MISSING_BACKEND;
    return false;
}
#undef SY_NET_MISSING_BACKEND

#endif

}  // namespace switchyard::device

// The definitions, one file per backend.
#include "switchyard/transport/net_emulated.cuh"
#if defined(SY_NET_WITH_NCCL)
#include "switchyard/transport/net_gin.cuh"
#endif
