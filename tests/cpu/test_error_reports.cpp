// The host's reading of the kernels' error record: a timeout names the rank, the peer and the
// phase, and says what the waiter saw of the peer (its latest kernel, whether it is poisoned, has
// masked this rank, or raised its arrivals), so a report tells a late peer from a failed one.
#include <string>

#include "common/testing.hpp"
#include "core/error_state.hpp"
#include "switchyard/common/peer_kernel_details.cuh"
#include "switchyard/errors.hpp"

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
    SY_CHECK(contains(text, "expected op 1 on set 1 complete, seen 0 complete and 0 block arrivals"));
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
    SY_CHECK(contains(text, "phase 'barrier' (expected signal 3, last seen 2"));
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

SY_TEST_MAIN()
