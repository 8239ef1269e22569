// The host's reading of the kernels' error record: a timeout names the rank, the peer and the
// phase, and says what the waiter saw of the peer (its latest kernel, whether it is poisoned, has
// masked this rank, or raised its arrivals), so a report tells a late peer from a failed one.
#include <string>

#include "common/testing.hpp"
#include "core/error_state.hpp"
#include "net/network.hpp"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/transport/net_types.cuh"

using namespace switchyard;

namespace {

device::ErrorRecord ll_dispatch_timeout() {
    device::ErrorRecord record{};
    record.kind = device::kErrorTimeout;
    record.rank = 1;
    record.peer = 0;
    record.phase = device::kPhaseLlDispatch;
    record.expected = (uint64_t(1) << 32) | 1u;  // op 1 complete, on set 1
    record.observed = 0;
    record.elapsed_ns = 10'000'000'000ull;
    for (int64_t& word : record.detail) word = device::kDetailUnknown;
    return record;
}

std::string message_of(const device::ErrorRecord& record) {
    try {
        core::throw_error_record(record, 10.0);
    } catch (const TimeoutError& error) {
        SY_CHECK_EQ(error.rank(), record.rank);
        SY_CHECK_EQ(error.peer(), record.peer);
        return error.what();
    }
    SY_CHECK(false);  // not a TimeoutError
    return {};
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

}  // namespace

SY_TEST(error_reports, ll_timeout_says_what_the_peer_did) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.detail[device::kPeerDetailOp] = 1;
    record.detail[device::kPeerDetailSinceStart] = 10'000'500'000;
    record.detail[device::kPeerDetailArrived] = 0;
    record.detail[device::kPeerDetailPoisoned] = 1;
    record.detail[device::kPeerDetailMasksMe] = 0;
    const std::string text = message_of(record);
    SY_CHECK(contains(text, "rank 1 timed out"));
    SY_CHECK(contains(text, "waiting for rank 0 in phase 'low-latency dispatch'"));
    SY_CHECK(contains(text,
                      "waited for the arrivals of its low-latency dispatch #1 (set 1); on that set none of "
                      "its ops had arrived"));
    SY_CHECK(contains(text, "(its op #1) started 10.0005 s before this report"));
    SY_CHECK(contains(text, "its block 0 last raised its arrivals for op #0"));
    SY_CHECK(contains(text, "rank 0's own buffer is poisoned"));
    SY_CHECK(!contains(text, "has masked"));
}

SY_TEST(error_reports, unknown_details_are_left_out) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.detail[device::kPeerDetailSinceStart] = device::kPeerKernelNeverStarted;
    record.detail[device::kPeerDetailMasksMe] = 1;
    const std::string text = message_of(record);
    SY_CHECK(contains(text, "rank 0 has not started a low-latency dispatch send on this buffer"));
    SY_CHECK(contains(text, "rank 0 has masked rank 1"));
    SY_CHECK(!contains(text, "poisoned (it failed"));
    SY_CHECK(!contains(text, "last raised its arrivals"));
}

SY_TEST(error_reports, barrier_timeout_names_the_peer_kernel) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.phase = device::kPhaseBarrier;
    record.expected = 3;
    record.observed = 2;
    record.detail[device::kPeerDetailOp] = 2;
    record.detail[device::kPeerDetailSinceStart] = 2'000'000'000;
    record.detail[device::kPeerDetailPoisoned] = 0;
    const std::string text = message_of(record);
    SY_CHECK(contains(text, "phase 'barrier' (waited for its signal of op #3; its latest here is op #2"));
    SY_CHECK(contains(text, "rank 0's latest barrier kernel (its op #2) started 2 s before this report"));
    SY_CHECK(!contains(text, "poisoned (it failed"));
}

SY_TEST(error_reports, invalid_routing_names_the_entry) {
    device::ErrorRecord record{};
    record.kind = device::kErrorInvalidRouting;
    record.rank = 0;
    record.peer = -1;
    record.phase = device::kPhaseLayout;
    record.expected = 256;
    record.observed = 300;
    record.detail[0] = 7;
    record.detail[1] = 3;
    SY_CHECK_THROWS_WITH(core::throw_error_record(record, 10.0), InvalidArgument,
                         "topk_idx[7][3] = 300 is outside [-1, 256)");
}

// One numbering for LL: the sequence of the op kind, for the op waited for, the ops arrived and the
// peer's latest send (ops n and n + 2 share a set).
SY_TEST(error_reports, ll_timeout_uses_one_op_numbering) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.phase = device::kPhaseLlCombine;
    record.expected = (uint64_t(3) << 32) | 0u;  // combine #6, set 0
    record.observed = (uint64_t(2) << 32) | 5u;  // #2 and #4 arrived, 5 blocks of #6
    record.detail[device::kPeerDetailOp] = 6;
    record.detail[device::kPeerDetailSinceStart] = 1'000'000'000;
    const std::string text = message_of(record);
    SY_CHECK_MSG(
        contains(text,
                 "arrivals of its low-latency combine #6 (set 0); on that set its ops had arrived up "
                 "to #4, and 5 sending block(s) of #6"),
        text);
    SY_CHECK(contains(text, "latest low-latency combine send (its op #6)"));
    SY_CHECK(!contains(text, "21474836"));  // no raw counter words
}

// The HT counts exchange's words carry the op above the count: the report decodes them (at EP4 a
// peer's op-3 word with 10 rows is 12884901898).
SY_TEST(error_reports, ht_notify_timeout_decodes_tagged_words) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.phase = device::kPhaseHtNotify;
    record.expected = 4;
    record.observed = (uint64_t(3) << 32) | 10u;
    record.detail[device::kPeerDetailOp] = 3;
    record.detail[device::kPeerDetailSinceStart] = 5'000'000'000;
    std::string text = message_of(record);
    SY_CHECK_MSG(
        contains(text, "waited for its counts-exchange entry of op #4; its latest entry here is op #3"),
        text);
    SY_CHECK_MSG(!contains(text, "12884901898"), text);
    record.observed = 0;
    text = message_of(record);
    SY_CHECK_MSG(contains(text, "its latest entry here is op none"), text);
    // A sequence mismatch decodes the word it saw as well.
    record.kind = device::kErrorSequenceMismatch;
    record.observed = (uint64_t(5) << 32) | 2u;
    SY_CHECK_THROWS_WITH(core::throw_error_record(record, 10.0), Error, "but rank 0 published op #5");
}

// LL signals over the network count ops too: printed as ops, not as the counter's raw value.
SY_TEST(error_reports, ll_network_timeout_counts_ops) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.peer = 3;
    record.expected = uint64_t(2) << 32;
    record.observed = uint64_t(1) << 32;
    record.detail[device::kNetDetailPeerNode] = 1;
    record.detail[device::kNetDetailId] = 5;
    record.detail[device::kNetDetailContext] = 0;
    record.detail[device::kNetDetailWhat] = device::kNetWaitSignal;
    record.detail[device::kNetDetailTransport] = device::kNetTransportMarker;
    const std::string text = message_of(record);
    SY_CHECK_MSG(contains(text, "rank 3 on node 1 over the network"), text);
    SY_CHECK_MSG(contains(text, "expected 2 complete ops on that signal's set, seen 1"), text);
    SY_CHECK_MSG(!contains(text, "8589934592") && !contains(text, "4294967296"), text);
}

// A wait over the network tells the note so, and the note can say what this rank's network carried
// to the peer: two ranks waiting for each other then show which one never sent its signal.
SY_TEST(error_reports, a_network_wait_carries_the_traffic_note) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.peer = 1;
    record.expected = uint64_t(1) << 32;
    record.observed = 0;
    record.detail[device::kNetDetailPeerNode] = 1;
    record.detail[device::kNetDetailId] = 3713;
    record.detail[device::kNetDetailContext] = 3;
    record.detail[device::kNetDetailWhat] = device::kNetWaitSignal;
    record.detail[device::kNetDetailTransport] = device::kNetTransportMarker;
    NetworkStats stats;
    stats.accounted = true;
    stats.puts_to_rank = {0, 515};
    stats.bytes_to_rank = {0, 2 << 20};
    stats.bytes_requested_to_rank = {0, 3 << 20};
    stats.signals_to_rank = {0, 2};
    stats.engine.requests = 517;
    bool over_network = false;
    const core::PeerNote note = [&](const core::PeerNoteQuery& query) {
        over_network = query.over_network;
        return net::traffic_note(stats, query.peer);
    };
    try {
        core::throw_error_record(record, 5.0, note);
        SY_CHECK_MSG(false, "no exception");
    } catch (const TimeoutError& error) {
        SY_CHECK_MSG(contains(error.what(),
                              "this rank's network has carried to rank 1: 515 puts (2097152 of 3145728 bytes "
                              "delivered), 2 signal adds; 517 requests taken in all"),
                     error.what());
    }
    SY_CHECK(over_network);
    // GIN does not count: no note; nor for a rank outside the stats.
    stats.accounted = false;
    SY_CHECK(net::traffic_note(stats, 1).empty());
    stats.accounted = true;
    SY_CHECK(net::traffic_note(stats, -1).empty());
    SY_CHECK(contains(net::traffic_note(stats, 7), "carried to rank 7: 0 puts"));
}

// A peer that announced its failure: PeerFailedError naming it, saying why, no timeout.
SY_TEST(error_reports, peer_failure_names_the_failed_rank) {
    device::ErrorRecord record{};
    record.kind = device::kErrorPeerFailed;
    record.rank = 1;
    record.peer = 3;
    record.phase = device::kPhaseHtNotify;
    record.expected = 7;
    record.observed = device::kPeerFailureInvalidRouting;
    for (int64_t& word : record.detail) word = device::kDetailUnknown;
    bool thrown = false;
    try {
        core::throw_error_record(record, 100.0);
    } catch (const PeerFailedError& error) {
        thrown = true;
        const std::string text = error.what();
        SY_CHECK_EQ(error.rank(), 1);
        SY_CHECK_EQ(error.peer(), 3);
        SY_CHECK_EQ(error.phase(), std::string("high-throughput notify"));
        SY_CHECK_MSG(contains(text, "rank 1: rank 3 failed this high-throughput op before any data moved"),
                     text);
        SY_CHECK_MSG(contains(text, "expert ids outside [-1, num_experts)"), text);
        SY_CHECK_MSG(contains(text, "call reset() on all ranks"), text);
        SY_CHECK(!contains(text, "timed out"));
    }
    SY_CHECK(thrown);
    record.observed = device::kPeerFailurePoisoned;
    record.phase = device::kPhaseLlDispatch;
    SY_CHECK_THROWS_WITH(
        core::throw_error_record(record, 100.0), PeerFailedError,
        "rank 3 failed this low-latency dispatch before any data moved (its buffer was already "
        "poisoned");
}

// A stage barrier that never completed (wait_stage_barrier) waited for no peer: the report says it
// was this rank's own bulk copy, names no peer and no peer kernel.
SY_TEST(error_reports, local_copy_timeout_names_no_peer) {
    device::ErrorRecord record = ll_dispatch_timeout();
    record.peer = -1;
    record.phase = device::kPhaseLocalCopy;
    record.expected = 1;
    record.observed = 0;
    const std::string text = message_of(record);
    SY_CHECK_MSG(
        contains(text,
                 "rank 1 timed out after 10 s (limit 10 s) waiting for its own bulk copy into shared "
                 "memory (a stage barrier's phase of parity 1 never completed"),
        text);
    SY_CHECK(!contains(text, "for rank"));
}

// What the communicator knows of the peer's process joins the message.
SY_TEST(error_reports, a_gone_process_is_named) {
    device::ErrorRecord record = ll_dispatch_timeout();
    const core::PeerNote note = [](const core::PeerNoteQuery& query) {
        return query.peer == 0 ? std::string(
                                     "rank 0's process (process 4242 on this host) is gone: it exited or was "
                                     "killed")
                               : std::string();
    };
    bool thrown = false;
    try {
        core::throw_error_record(record, 10.0, note);
    } catch (const TimeoutError& error) {
        thrown = true;
        SY_CHECK_MSG(contains(error.what(), "rank 0's process (process 4242 on this host) is gone"),
                     error.what());
        SY_CHECK_EQ(error.peer(), 0);
    }
    SY_CHECK(thrown);
}

// The note learns whether the record says the peer never started the kernel this rank waited for.
SY_TEST(error_reports, the_note_learns_whether_the_peer_started) {
    for (bool started : {false, true}) {
        device::ErrorRecord record = ll_dispatch_timeout();
        record.detail[device::kPeerDetailSinceStart] = started ? 2000000000 : device::kPeerKernelNeverStarted;
        bool told = false, never_started = false;
        const core::PeerNote note = [&](const core::PeerNoteQuery& query) {
            told = true;
            never_started = query.never_started;
            SY_CHECK(!query.over_network);
            return std::string("a note about the peer");
        };
        try {
            core::throw_error_record(record, 10.0, note);
        } catch (const TimeoutError& error) {
            SY_CHECK_MSG(contains(error.what(), "; a note about the peer;"), error.what());
        }
        SY_CHECK(told);
        SY_CHECK_EQ(never_started, !started);
    }
}

SY_TEST_MAIN()
