// Bounded waits and the error record (DESIGN.md §5).
//
// Every spin-wait on another rank goes through wait_until(), which has a time budget. On expiry
// the first failing thread claims the buffer's poison word, writes an ErrorRecord (kind, rank,
// peer, phase, counter values) to mapped host memory and returns false; the kernel then winds
// down instead of trapping. The host turns the record into switchyard::TimeoutError. Waits in
// other threads see the poison word and give up at once, so a stalled peer ends the whole op.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/ptx.cuh"

namespace switchyard::device {

enum ErrorKind : uint32_t {
    kErrorNone = 0,
    kErrorTimeout = 1,
    kErrorInvalidRouting = 2,
    kErrorSequenceMismatch = 3,  // a peer published another op's sequence than this rank is running
    kErrorPeerTable = 4,         // the device peer table no longer holds what the host wrote
    kErrorNetworkRequest = 5,    // a network request out of bounds (transport/net.cuh): never sent
    kErrorPeerFailed = 6,        // a peer announced that it failed this op before moving data (`peer`;
                                 // `observed`: its PeerFailure)
};

// Why a rank announced that it fails an op before moving data (kErrorPeerFailed at its peers).
enum PeerFailure : uint32_t {
    kPeerFailureInvalidRouting = 1,  // its topk_idx holds ids outside [-1, E)
    kPeerFailurePoisoned = 2,        // its buffer was poisoned by an earlier failure
};

// Where a wait happened; the host prints these names.
enum Phase : int32_t {
    kPhaseNone = 0,
    kPhaseBarrier = 1,
    kPhaseHtNotify = 2,
    kPhaseHtData = 3,
    kPhaseHtCombine = 4,
    kPhaseLlDispatch = 5,
    kPhaseLlCombine = 6,
    kPhaseLlFlowControl = 7,
    kPhaseLayout = 8,
    kPhaseNetwork = 9,  // a wait of the scale-out transport (transport/net.cuh)
    // The hierarchical HT path's waits on the network (hier/): a rail peer's counts, a batch of its
    // records, a batch of a node's combine partials, its combine entry or its combine weights.
    kPhaseHierCounts = 10,
    kPhaseHierDispatch = 11,
    kPhaseHierCombine = 12,
    kPhaseHierEntry = 13,
    // A wait for this block's own bulk copy into shared memory (a stage barrier's phase): no peer
    // is involved, so only a kernel defect leaves it pending (wait_stage_barrier).
    kPhaseLocalCopy = 14,
};

// Words of kind-specific detail in an error record. Invalid routing: token, slot (the value is in
// `observed`). Timeout (peer_kernel_details.cuh): the peer's latest op of the kernel family, ns
// since it started, whether the peer's own buffer is poisoned, whether the peer has masked this
// rank (LL), and the peer's latest op whose arrivals its block 0 raised (LL); kDetailUnknown where
// a wait does not say.
constexpr int kErrorDetailWords = 5;
constexpr int64_t kDetailUnknown = -1;

struct ErrorDetails {
    int64_t word[kErrorDetailWords] = {kDetailUnknown, kDetailUnknown, kDetailUnknown, kDetailUnknown,
                                       kDetailUnknown};
};

// Written once per poisoning, in mapped (zero-copy) host memory.
struct ErrorRecord {
    uint32_t kind;                      // ErrorKind; written last, so a non-zero kind means the rest is valid
    int32_t rank;                       // the rank that observed the error
    int32_t peer;                       // the rank waited for (-1 if none)
    int32_t phase;                      // Phase
    uint64_t expected;                  // the value waited for
    uint64_t observed;                  // the last value seen
    uint64_t elapsed_ns;                // time spent waiting
    int64_t detail[kErrorDetailWords];  // kind-specific (ErrorDetails)
};

struct Diagnostics {
    ErrorRecord* record;  // device alias of the mapped host record
    uint32_t* poison;     // device word in this rank's workspace: 0 = healthy
    uint64_t timeout_ns;  // budget of one wait
    int32_t rank;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

SY_DEVICE bool is_poisoned(const Diagnostics& diagnostics) {
    return ptx::ld_relaxed_gpu(diagnostics.poison) != 0;
}

// An invalid-routing record's details: the entry's token and top-k slot.
SY_DEVICE ErrorDetails entry_details(int64_t token, int64_t slot) {
    ErrorDetails details;
    details.word[0] = token;
    details.word[1] = slot;
    return details;
}

// Claims the poison word and fills the host record; only the first caller writes it.
SY_DEVICE void report_error(const Diagnostics& diagnostics, uint32_t kind, int32_t phase, int32_t peer,
                            uint64_t expected, uint64_t observed, uint64_t elapsed_ns,
                            const ErrorDetails& details = {}) {
    if (atomicCAS(diagnostics.poison, 0u, 1u) != 0u) return;
    volatile ErrorRecord* record = diagnostics.record;
    record->rank = diagnostics.rank;
    record->peer = peer;
    record->phase = phase;
    record->expected = expected;
    record->observed = observed;
    record->elapsed_ns = elapsed_ns;
    for (int i = 0; i < kErrorDetailWords; ++i) record->detail[i] = details.word[i];
    __threadfence_system();
    record->kind = kind;
    __threadfence_system();
}

// What a timeout adds to its error record's details: nothing unless a caller says.
struct NoTimeoutDetails {
    SY_DEVICE void operator()(ErrorDetails&) const {}
};

// The scope of a waited-for signal: another GPU or the host may write it (system), or only this
// GPU's threads (gpu: a cheaper acquire).
enum class SignalScope { kSystem, kGpu };

template <SignalScope kScope>
SY_DEVICE uint64_t load_signal(const uint64_t* address) {
    if constexpr (kScope == SignalScope::kGpu)
        return ptx::ld_acquire_gpu(address);
    else
        return ptx::ld_acquire_sys(address);
}

// Spins until `ready(value)` holds for value = an acquire load of *address at kScope. Returns
// false on timeout (after reporting it, with `details` filling the record's detail words) or when
// another thread has poisoned the buffer.
template <SignalScope kScope = SignalScope::kSystem, typename Ready, typename Details = NoTimeoutDetails>
SY_DEVICE bool wait_until(const uint64_t* address, Ready ready, const Diagnostics& diagnostics, int32_t phase,
                          int32_t peer, uint64_t expected, Details details = {}) {
    uint64_t value = load_signal<kScope>(address);
    if (ready(value)) return true;
    const uint64_t start = ptx::globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
        value = load_signal<kScope>(address);
        if (ready(value)) return true;
        if ((spin & 63u) == 0) {
            if (is_poisoned(diagnostics)) return false;
            const uint64_t elapsed = ptx::globaltimer_ns() - start;
            if (elapsed > diagnostics.timeout_ns) {
                ErrorDetails words;
                details(words);
                report_error(diagnostics, kErrorTimeout, phase, peer, expected, value, elapsed, words);
                return false;
            }
        }
    }
}

// wait_until for a value that `load()` reads (with acquire semantics) rather than a plain word: a
// transport whose signals sit behind an API (NCCL GIN's readSignal). Same budget, poison check
// and report.
template <typename Load, typename Ready, typename Details = NoTimeoutDetails>
SY_DEVICE bool wait_until_loaded(Load load, Ready ready, const Diagnostics& diagnostics, int32_t phase,
                                 int32_t peer, uint64_t expected, Details details = {}) {
    uint64_t value = load();
    if (ready(value)) return true;
    const uint64_t start = ptx::globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
        value = load();
        if (ready(value)) return true;
        if ((spin & 63u) == 0) {
            if (is_poisoned(diagnostics)) return false;
            const uint64_t elapsed = ptx::globaltimer_ns() - start;
            if (elapsed > diagnostics.timeout_ns) {
                ErrorDetails words;
                details(words);
                report_error(diagnostics, kErrorTimeout, phase, peer, expected, value, elapsed, words);
                return false;
            }
        }
    }
}

// The common case: a monotone 64-bit signal that must reach `target`.
template <SignalScope kScope = SignalScope::kSystem, typename Details = NoTimeoutDetails>
SY_DEVICE bool wait_at_least(const uint64_t* address, uint64_t target, const Diagnostics& diagnostics,
                             int32_t phase, int32_t peer, Details details = {}) {
    return wait_until<kScope>(
        address, [target](uint64_t value) { return value >= target; }, diagnostics, phase, peer, target,
        details);
}

// Waits until phase `parity` of this block's mbarrier `barrier` completes: a stage that a bulk copy
// of this block fills. Nothing of another rank is waited for, so the wait ends as soon as the copy
// lands, unless the barrier's arrivals and phases went out of step (a kernel defect: an arrival on
// a phase whose arrivals were all counted, a wait for the wrong parity), after which it never
// would. That must not hang the kernel, and with it every co-located rank and the host: after the
// timeout it reports kErrorTimeout in phase kPhaseLocalCopy (peer -1, `expected` the parity) and
// returns false. It does not give up on a poisoned buffer: the copy is in flight and will land.
SY_DEVICE bool wait_stage_barrier(uint64_t* barrier, uint32_t parity, const Diagnostics& diagnostics) {
    if (ptx::mbarrier_try_wait_parity(barrier, parity)) return true;
    const uint64_t start = ptx::globaltimer_ns();
    for (uint32_t spin = 1;; ++spin) {
        if (ptx::mbarrier_try_wait_parity(barrier, parity)) return true;
        if ((spin & 15u) == 0) {  // try_wait suspends the thread a while before it answers no
            const uint64_t elapsed = ptx::globaltimer_ns() - start;
            if (elapsed > diagnostics.timeout_ns) {
                report_error(diagnostics, kErrorTimeout, kPhaseLocalCopy, -1, parity, parity ^ 1u, elapsed);
                return false;
            }
        }
    }
}

// For lock-step protocols (high-throughput), where no peer can be past this rank's op while this
// rank waits: the signal must reach `target` and equal it. A larger value means the ranks' op
// sequences diverged (a rank skipped or repeated an op, or its workspace was written by someone
// else); consuming the data would give silently wrong results, so it is reported instead. The
// check is on the value the wait's own acquire load saw (a second load after the wait would put one
// more memory round trip on every waiter's path).
template <typename Details = NoTimeoutDetails>
SY_DEVICE bool wait_for_sequence(const uint64_t* address, uint64_t target, const Diagnostics& diagnostics,
                                 int32_t phase, int32_t peer, Details details = {}) {
    uint64_t value = 0;
    if (!wait_until(
            address,
            [target, &value](uint64_t seen) {
                value = seen;
                return seen >= target;
            },
            diagnostics, phase, peer, target, details))
        return false;
    if (value == target) return true;
    report_error(diagnostics, kErrorSequenceMismatch, phase, peer, target, value, 0);
    return false;
}

#endif

}  // namespace switchyard::device
