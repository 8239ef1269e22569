// Ranks as threads of this process, spread over the local GPUs: the one rank runner of the tests
// and the benchmark (DESIGN.md §4: several ranks per GPU is the test mechanism).
//
// Rank r of R on G GPUs uses GPU r * G / R, so ranks share a GPU when R > G. What the runner does
// for co-located ranks (the rules of DESIGN.md §4):
//   - CUDA_DEVICE_MAX_CONNECTIONS is set to 32 before CUDA starts (unless set), so each rank's
//     stream has its own hardware queue (rule 1; enough for up to 15 ranks per GPU);
//   - each rank's stream comes from the library's stream pool, warmed up before any op and
//     returned to the pool, never destroyed (rule 3);
//   - a rank's stream is synchronized when its body returns, and the group waits for every rank,
//     so calls made between two run()s (freeing memory, destroying buffers) cannot meet a peer's
//     kernel that is still waiting (rule 2). Inside a body, meet the peers with host_barrier()
//     before and after such calls.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::harness {

// GPU of rank `rank` when `num_ranks` ranks share `num_gpus` GPUs.
inline int device_of_rank(int rank, int num_ranks, int num_gpus) {
    return rank * num_gpus / num_ranks;
}

// What a rank's body gets. The communicator and the stream last as long as the group.
struct RankContext {
    int rank = 0;
    int num_ranks = 1;
    int num_gpus = 1;
    int device = 0;
    std::shared_ptr<Communicator> communicator;
    cudaStream_t stream = nullptr;

    // Waits until every rank of the group got here (an in-process host barrier).
    void host_barrier() const;
};

// Thrown by run() when ranks failed; what() lists every failing rank ("rank 1: ...").
class RankFailure : public Error {
  public:
    explicit RankFailure(const std::string& report) : Error(report) {}
};

// A set of ranks, kept across several run()s (a benchmark sets its ranks up, measures and tears
// them down in separate runs, with the same communicators and streams).
class RankGroup {
  public:
    RankGroup(int num_ranks, int num_gpus);
    ~RankGroup();
    RankGroup(const RankGroup&) = delete;
    RankGroup& operator=(const RankGroup&) = delete;

    int num_ranks() const { return int(ranks_.size()); }
    int num_gpus() const { return num_gpus_; }
    const RankContext& rank(int r) const { return ranks_.at(r); }

    // Runs `body` on one thread per rank, with the rank's device current, and waits for all of
    // them. When any rank threw, throws RankFailure naming every failing rank with its message:
    // the rank that failed first in time may not be the first to finish unwinding (its
    // destructors can wait for the others), so no single message is "the" cause.
    void run(const std::function<void(RankContext&)>& body);

  private:
    int num_gpus_;
    std::vector<RankContext> ranks_;
};

// One group, one run.
void run_ranks(int num_ranks, int num_gpus, const std::function<void(RankContext&)>& body);

}  // namespace switchyard::harness
