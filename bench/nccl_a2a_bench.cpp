#include "nccl_a2a_bench.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "util/cuda_check.hpp"
#include "harness/cuda_raii.hpp"
#include "event_timer.hpp"
#include "l2_flush.hpp"
#include "stream_alignment.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

void check_nccl(const NcclLibrary& nccl, nccl::Result result, const char* what) {
    if (result == nccl::kSuccess) return;
    throw Error(std::string("switchyard-bench: ") + what + " failed: " + nccl.describe_error(result));
}

// Communicators of devices 0..ranks-1, destroyed on scope exit.
class Communicators {
  public:
    Communicators(const NcclLibrary& nccl, int ranks) : nccl_(nccl), comms_(ranks, nullptr) {
        std::vector<int> devices(ranks);
        for (int r = 0; r < ranks; ++r) devices[r] = r;
        check_nccl(nccl_, nccl_.comm_init_all(comms_.data(), ranks, devices.data()), "ncclCommInitAll");
    }
    ~Communicators() {
        for (nccl::Comm comm : comms_) {
            if (comm) nccl_.comm_destroy(comm);
        }
    }
    Communicators(const Communicators&) = delete;
    Communicators& operator=(const Communicators&) = delete;

    nccl::Comm operator[](int rank) const { return comms_[rank]; }

  private:
    const NcclLibrary& nccl_;
    std::vector<nccl::Comm> comms_;
};

// Per-rank device state of the benchmark.
struct RankState {
    RankState(int rank, int64_t buffer_bytes)
        : send(rank, static_cast<size_t>(buffer_bytes)),
          recv(rank, static_cast<size_t>(buffer_bytes)),
          stream(rank),
          flush(rank),
          timer(rank) {}
    harness::DeviceBuffer send, recv;
    harness::Stream stream;
    L2Flusher flush;
    EventTimer timer;
};

// Enqueues one all-to-all of `phase` for every rank inside one NCCL group.
void enqueue_all_to_all(const NcclLibrary& nccl, const Communicators& comms, std::vector<RankState>& ranks,
                        const A2aPayload& payload, A2aPhase phase) {
    const int R = payload.ranks();
    check_nccl(nccl, nccl.group_start(), "ncclGroupStart");
    for (int r = 0; r < R; ++r) {
        int64_t send_offset = 0, recv_offset = 0;
        for (int peer = 0; peer < R; ++peer) {
            const int64_t send_bytes = payload.bytes(phase, r, peer);
            const int64_t recv_bytes = payload.bytes(phase, peer, r);
            check_nccl(nccl,
                       nccl.send(ranks[r].send.bytes_ptr() + send_offset, static_cast<size_t>(send_bytes),
                                 nccl::kUint8, peer, comms[r], ranks[r].stream.get()),
                       "ncclSend");
            check_nccl(nccl,
                       nccl.recv(ranks[r].recv.bytes_ptr() + recv_offset, static_cast<size_t>(recv_bytes),
                                 nccl::kUint8, peer, comms[r], ranks[r].stream.get()),
                       "ncclRecv");
            send_offset += send_bytes;
            recv_offset += recv_bytes;
        }
    }
    check_nccl(nccl, nccl.group_end(), "ncclGroupEnd");
}

void check_async_errors(const NcclLibrary& nccl, const Communicators& comms, int ranks) {
    if (!nccl.comm_get_async_error) return;
    for (int r = 0; r < ranks; ++r) {
        nccl::Result async_error = nccl::kSuccess;
        check_nccl(nccl, nccl.comm_get_async_error(comms[r], &async_error), "ncclCommGetAsyncError");
        check_nccl(nccl, async_error, ("NCCL on rank " + std::to_string(r)).c_str());
    }
}

// One aligned, L2-flushed iteration; returns the slowest rank's microseconds.
double time_iteration(const NcclLibrary& nccl, const Communicators& comms, std::vector<RankState>& ranks,
                      StreamAligner& aligner, const std::vector<int>& devices, const A2aPayload& payload,
                      A2aPhase phase) {
    synchronize_devices(devices);
    std::vector<cudaStream_t> streams;
    for (RankState& rank : ranks) {
        rank.flush.flush(rank.stream.get());
        streams.push_back(rank.stream.get());
    }
    aligner.align(streams);
    for (RankState& rank : ranks) rank.timer.start(rank.stream.get());
    enqueue_all_to_all(nccl, comms, ranks, payload, phase);
    for (RankState& rank : ranks) rank.timer.stop(rank.stream.get());
    double slowest = 0.0;
    for (RankState& rank : ranks) slowest = std::max(slowest, rank.timer.elapsed_us());
    check_async_errors(nccl, comms, payload.ranks());
    return slowest;
}

}  // namespace

void disable_nvls_unless_set() {
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
}

std::vector<NcclA2aResult> measure_nccl_a2a(const NcclA2aOptions& options, const A2aPayload& payload,
                                            const NcclLibrary& nccl) {
    const int R = payload.ranks();
    disable_nvls_unless_set();
    std::vector<int> devices(R);
    for (int r = 0; r < R; ++r) devices[r] = r;

    Communicators comms(nccl, R);
    std::vector<RankState> ranks;
    ranks.reserve(R);
    const int64_t buffer_bytes = std::max<int64_t>(payload.max_buffer_bytes(), 1);
    for (int r = 0; r < R; ++r) {
        ranks.emplace_back(r, buffer_bytes);
        harness::DeviceGuard guard(r);
        // Defined contents; the values do not matter to NCCL's byte copies.
        SY_CUDA_CHECK(cudaMemsetAsync(ranks[r].send.get(), r + 1, buffer_bytes, ranks[r].stream.get()));
    }
    StreamAligner aligner(devices);

    std::vector<NcclA2aResult> results;
    for (const A2aPhase phase : {A2aPhase::kDispatch, A2aPhase::kCombine}) {
        for (int i = 0; i < options.warmup; ++i)
            time_iteration(nccl, comms, ranks, aligner, devices, payload, phase);
        std::vector<double> samples;
        for (int i = 0; i < options.iters; ++i) {
            samples.push_back(time_iteration(nccl, comms, ranks, aligner, devices, payload, phase));
        }
        NcclA2aResult result;
        result.phase = phase;
        result.time_us = summarize(std::move(samples));
        for (int r = 0; r < R; ++r) {
            result.max_bytes_received =
                std::max(result.max_bytes_received, payload.bytes_received(phase, r, false));
            result.max_remote_bytes_sent =
                std::max(result.max_remote_bytes_sent, payload.bytes_sent(phase, r, true));
        }
        results.push_back(result);
    }
    synchronize_devices(devices);
    return results;
}

}  // namespace switchyard::bench
