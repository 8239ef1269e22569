// Error record translation (see error_state.hpp).
#include "core/error_state.hpp"

#include <cstring>
#include <sstream>

#include "util/cuda_check.hpp"
#include "util/mapped_host.hpp"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::core {

const char* phase_name(int32_t phase) {
    switch (phase) {
        case device::kPhaseBarrier:
            return "barrier";
        case device::kPhaseHtNotify:
            return "high-throughput notify";
        case device::kPhaseHtData:
            return "high-throughput dispatch data";
        case device::kPhaseHtCombine:
            return "high-throughput combine";
        case device::kPhaseLlDispatch:
            return "low-latency dispatch";
        case device::kPhaseLlCombine:
            return "low-latency combine";
        case device::kPhaseLlFlowControl:
            return "low-latency buffer reuse";
        case device::kPhaseLayout:
            return "dispatch layout";
        case device::kPhaseNetwork:
            return "network";
        case device::kPhaseHierCounts:
            return "high-throughput network counts";
        case device::kPhaseHierDispatch:
            return "high-throughput network dispatch data";
        case device::kPhaseHierCombine:
            return "high-throughput network combine";
        case device::kPhaseHierEntry:
            return "high-throughput network combine entry";
        case device::kPhaseLocalCopy:
            return "bulk copy into shared memory";
        default:
            return "unknown phase";
    }
}

ErrorState::ErrorState() {
    const auto record = util::allocate_mapped_host<device::ErrorRecord>(1);
    host_record_ = record.host;
    device_record_ = record.device;
}

ErrorState::~ErrorState() {
    if (host_record_) cudaFreeHost(host_record_);
}

bool ErrorState::has_error() const {
    return reinterpret_cast<volatile device::ErrorRecord*>(host_record_)->kind != device::kErrorNone;
}

void ErrorState::clear() {
    std::memset(host_record_, 0, sizeof(device::ErrorRecord));
}

// A timeout record's details about the silent peer (peer_kernel_details.cuh): its latest `what`
// on this buffer and when it started (or that it never started one), whether the peer's buffer is
// poisoned, and for LL whether the peer has masked this rank and the latest op it arrived for.
static void describe_peer_kernel(std::ostream& message, const device::ErrorRecord& record, const char* what) {
    const int64_t* detail = record.detail;
    if (detail[device::kPeerDetailSinceStart] == device::kPeerKernelNeverStarted)
        message << "; rank " << record.peer << " has not started a " << what << " on this buffer";
    else if (detail[device::kPeerDetailSinceStart] > 0)
        message << "; rank " << record.peer << "'s latest " << what << " (its op #"
                << detail[device::kPeerDetailOp] << ") started "
                << detail[device::kPeerDetailSinceStart] / 1e9 << " s before this report";
    if (detail[device::kPeerDetailArrived] != device::kDetailUnknown)
        message << "; its block 0 last raised its arrivals for op #" << detail[device::kPeerDetailArrived];
    if (detail[device::kPeerDetailPoisoned] == 1)
        message << "; rank " << record.peer << "'s own buffer is poisoned (it failed and sends nothing more)";
    if (detail[device::kPeerDetailMasksMe] == 1)
        message << "; rank " << record.peer << " has masked rank " << record.rank << " (it skips this rank)";
}

// A record from a wait of the scale-out transport (transport/net.cuh) carries the marker.
static bool is_network_record(const device::ErrorRecord& record) {
    return record.detail[device::kNetDetailTransport] == device::kNetTransportMarker;
}

// What a network wait was for, and from which node.
static void describe_network_wait(std::ostream& message, const device::ErrorRecord& record) {
    const int64_t* detail = record.detail;
    const int64_t node = detail[device::kNetDetailPeerNode], id = detail[device::kNetDetailId],
                  context = detail[device::kNetDetailContext];
    switch (detail[device::kNetDetailWhat]) {
        case device::kNetWaitSignal:
            message << "signal " << id << " on context " << context << ", raised over the network by rank "
                    << record.peer << " on node " << node;
            break;
        case device::kNetWaitCounter:
            message << "counter " << id << " on context " << context
                    << ": this rank's own puts reading their sources, over the network";
            break;
        case device::kNetWaitFlush:
            message << "a flush of context " << context
                    << ": this rank's own puts reading their sources, over the "
                    << "network";
            break;
        case device::kNetWaitRelay:
            message << "rank " << record.peer << "'s data from node " << node
                    << ", relayed over NVLink by this node's rail peer of it once its network signal came";
            break;
        case device::kNetWaitRingSpace:
            message << "space in the emulated network's request ring of context " << context
                    << " (requests to node " << node
                    << "): this rank's network engine is not taking requests";
            break;
        default:
            message << "the network";
    }
    const bool ll = record.phase == device::kPhaseLlDispatch || record.phase == device::kPhaseLlCombine;
    if (ll && record.expected >= (uint64_t(1) << 32)) {
        // LL signals count 2^32 per complete op on their set, plus partial arrivals (ll_arrivals.cuh).
        message << "; expected " << (record.expected >> 32) << " complete ops on that signal's set, seen "
                << (record.observed >> 32);
        if ((record.observed & 0xffffffffu) != 0)
            message << " and " << (record.observed & 0xffffffffu) << " partial arrivals of the next";
        return;
    }
    message << "; expected " << record.expected << ", last seen " << record.observed;
}

static const char* network_problem(int64_t what) {
    switch (what) {
        case device::kNetBadDestination:
            return "the destination range ends past the window";
        case device::kNetBadSource:
            return "the source range ends past the window";
        case device::kNetBadSignal:
            return "the signal id is out of range";
        case device::kNetBadCounter:
            return "the counter id is out of range";
        case device::kNetBadPeerNode:
            return "the peer node does not exist";
        case device::kNetBadContext:
            return "the context does not exist";
        default:
            return "the emulated network's engine refused it";
    }
}

void ErrorState::throw_if_error(double timeout_seconds) const {
    if (!has_error()) return;
    device::ErrorRecord record;
    std::memcpy(&record, host_record_, sizeof(record));
    throw_error_record(record, timeout_seconds, peer_note_);
}

void ErrorState::throw_if_poisoned(double timeout_seconds, const char* op) const {
    if (!has_error()) return;
    try {
        throw_if_error(timeout_seconds);
    } catch (const Error& recorded) {
        std::string cause = recorded.what();
        const std::string prefix = "switchyard: ";
        if (cause.rfind(prefix, 0) == 0) cause = cause.substr(prefix.size());
        const auto* record = reinterpret_cast<volatile device::ErrorRecord*>(host_record_);
        throw PoisonedError(
            "switchyard: rank " + std::to_string(record->rank) + ": " +
                (op ? op : std::string("the operation")) +
                " was not started: this buffer is poisoned by an earlier failure; call reset() "
                "on every rank (or destroy the buffer) before using it again. The failure: " +
                cause,
            std::current_exception());
    }
}

namespace {

// HT notify words carry the op's sequence in their high half (a count below it), or are the
// sequence word itself: either way, the op whose entry the peer last wrote.
uint64_t ht_notify_op(uint64_t word) {
    return word >= (uint64_t(1) << 32) ? word >> 32 : word;
}

std::string op_number(uint64_t op) {
    return op == 0 ? std::string("none") : "#" + std::to_string(op);
}

// LL arrival counters (transport/ll_arrivals.cuh): op n of a kind runs on set n & 1 and is the
// ceil(n / 2)-th op there; a counter holds 2^32 per complete op on its set plus one per sending
// block of the op in progress. Printed in the kind's op numbering, the one the peer details use.
void describe_ll_arrivals(std::ostream& message, const device::ErrorRecord& record, const char* kind) {
    const uint64_t set = record.expected & 1u;
    const uint64_t op = 2 * (record.expected >> 32) - set;
    const uint64_t complete = record.observed >> 32, blocks = record.observed & 0xffffffffu;
    message << "waited for the arrivals of its " << kind << " #" << op << " (set " << set
            << "); on that set ";
    if (complete == 0)
        message << "none of its ops had arrived";
    else
        message << "its ops had arrived up to #" << 2 * complete - set;
    if (blocks > 0) message << ", and " << blocks << " sending block(s) of #" << 2 * (complete + 1) - set;
}

const char* peer_failure_reason(uint64_t reason) {
    switch (reason) {
        case device::kPeerFailureInvalidRouting:
            return "its topk_idx holds expert ids outside [-1, num_experts); it raised InvalidArgument "
                   "naming "
                   "the entry";
        case device::kPeerFailurePoisoned:
            return "its buffer was already poisoned by an earlier failure, which it raised";
        default:
            return "it failed";
    }
}

}  // namespace

// A peer-wait timeout whose details (PeerKernelDetails) say the peer never started the kernel.
static bool peer_never_started(const device::ErrorRecord& record) {
    return record.kind == device::kErrorTimeout && !is_network_record(record) &&
           record.detail[device::kPeerDetailSinceStart] == device::kPeerKernelNeverStarted;
}

void throw_error_record(const device::ErrorRecord& record, double timeout_seconds,
                        const PeerNote& peer_note) {
    std::ostringstream message;
    const std::string note =
        peer_note && record.peer >= 0
            ? peer_note(PeerNoteQuery{record.peer, peer_never_started(record), is_network_record(record)})
            : std::string();
    if (record.kind == device::kErrorInvalidRouting) {
        message << "switchyard: rank " << record.rank << ": topk_idx[" << record.detail[0] << "]["
                << record.detail[1] << "] = " << static_cast<int64_t>(record.observed) << " is outside [-1, "
                << record.expected << ") (found on the GPU by the " << phase_name(record.phase) << " kernel "
                << (record.phase == device::kPhaseLlDispatch
                        ? "after sending the valid slots, so the peers' ops completed"
                        : "before any data moved")
                << "); call reset() on all ranks before reusing the buffer";
        throw InvalidArgument(message.str());
    }
    if (record.kind == device::kErrorPeerFailed) {
        message << "switchyard: rank " << record.rank << ": rank " << record.peer << " failed this "
                << (record.phase == device::kPhaseHtNotify ? "high-throughput op" : phase_name(record.phase))
                << " before any data moved (" << peer_failure_reason(record.observed)
                << ") and announced it in phase '" << phase_name(record.phase)
                << "', so this rank stopped at once";
        if (!note.empty()) message << "; " << note;
        message << "; the buffer is poisoned on every rank: call reset() on all ranks before reusing it";
        throw PeerFailedError(message.str(), record.rank, record.peer, phase_name(record.phase));
    }
    if (record.kind == device::kErrorPeerTable) {
        message << "switchyard: rank " << record.rank << ": the device peer table was overwritten after "
                << "creation (digest " << record.expected << " expected, " << record.observed
                << " found by the barrier kernel); the buffer is poisoned";
        throw Error(message.str());
    }
    if (record.kind == device::kErrorNetworkRequest) {
        message << "switchyard: rank " << record.rank << ": a network request was refused ("
                << network_problem(record.detail[device::kNetDetailWhat]) << ": limit " << record.expected
                << ", got " << record.observed << "; node " << record.detail[device::kNetDetailPeerNode]
                << ", context " << record.detail[device::kNetDetailContext]
                << ") and never sent; the buffer is poisoned: call reset() on all ranks or destroy it";
        throw Error(message.str());
    }
    if (record.kind == device::kErrorSequenceMismatch) {
        const uint64_t observed =
            record.phase == device::kPhaseHtNotify ? ht_notify_op(record.observed) : record.observed;
        message << "switchyard: rank " << record.rank << " is running op #" << record.expected << " but rank "
                << record.peer << " published op #" << observed << " in phase '" << phase_name(record.phase)
                << "': the ranks' operation sequences diverged (every rank must issue the same "
                   "operations in the same order on this buffer); the buffer is poisoned: call reset() "
                   "on all ranks or destroy it";
        throw Error(message.str());
    }
    if (record.kind == device::kErrorTimeout && record.phase == device::kPhaseLocalCopy) {
        message
            << "switchyard: rank " << record.rank << " timed out after " << record.elapsed_ns / 1e9
            << " s (limit " << timeout_seconds << " s) waiting for its own bulk copy into shared memory "
            << "(a stage barrier's phase of parity " << record.expected
            << " never completed: a defect of the kernel, not a peer's stall); the buffer is poisoned: call "
               "reset() on all ranks or destroy it";
        throw TimeoutError(message.str(), record.rank, -1, phase_name(record.phase));
    }
    const bool network = is_network_record(record);
    message << "switchyard: rank " << record.rank << " timed out after " << record.elapsed_ns / 1e9
            << " s (limit " << timeout_seconds << " s) waiting ";
    if (network && record.peer < 0)
        message << "for the network";
    else if (network)
        message << "for rank " << record.peer << " on node " << record.detail[device::kNetDetailPeerNode]
                << " over the network";
    else
        message << "for rank " << record.peer;
    message << " in phase '" << phase_name(record.phase) << "' (";
    const bool ll_arrivals =
        !network && (record.phase == device::kPhaseLlDispatch || record.phase == device::kPhaseLlCombine) &&
        record.expected >= (uint64_t(1) << 32);
    if (ll_arrivals) {
        const bool dispatch = record.phase == device::kPhaseLlDispatch;
        describe_ll_arrivals(message, record, dispatch ? "low-latency dispatch" : "low-latency combine");
        // The peer's latest send, in the same numbering (the sequence of its kind).
        describe_peer_kernel(message, record,
                             dispatch ? "low-latency dispatch send" : "low-latency combine send");
    } else if (is_network_record(record)) {
        describe_network_wait(message, record);
    } else if (record.phase == device::kPhaseHtNotify) {
        // Counts-exchange words carry their op's sequence above the count (counts_exchange.cuh).
        message << "waited for its counts-exchange entry of op #" << record.expected
                << "; its latest entry here is op " << op_number(ht_notify_op(record.observed));
        describe_peer_kernel(message, record, "high-throughput kernel");
    } else if (record.phase == device::kPhaseHtData || record.phase == device::kPhaseBarrier) {
        message << "waited for its signal of op #" << record.expected << "; its latest here is op "
                << op_number(record.observed);
        describe_peer_kernel(
            message, record,
            record.phase == device::kPhaseBarrier ? "barrier kernel" : "high-throughput kernel");
    } else {
        // Combine arrivals count rows, not ops (the peer's op is still the HT op it runs).
        message << "expected " << record.expected << ", last seen " << record.observed;
        if (record.phase == device::kPhaseHtCombine)
            describe_peer_kernel(message, record, "high-throughput kernel");
    }
    message << ")";
    if (!note.empty()) message << "; " << note;
    message << "; the buffer is poisoned: call reset() on all ranks or destroy it";
    throw TimeoutError(message.str(), record.rank, record.peer, phase_name(record.phase));
}

}  // namespace switchyard::core
