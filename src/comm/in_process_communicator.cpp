// Ranks as threads of one process, meeting at a shared rendezvous (mutex + condition variable).
//
// Collective n of the group is "open" while Rendezvous::generation == n. Each rank counts the
// collectives it has entered; since collective n cannot complete without every rank, a fast rank
// that enters n+1 while slow ones still copy out the result of n only touches n+1's state. Each
// contribution is copied into the rendezvous on arrival, so a rank that gives up leaves no pointer
// to its stack behind.
//
// Failures are sticky. A size or operation mismatch wakes every waiting rank of that collective
// with the same InvalidArgument. A timeout is local to the rank that gave up (the others time out
// on their own deadlines and name the same missing rank), but the group can no longer agree on
// which collective is open, so from then on every call on every rank throws Error: after a
// timeout or mismatch, make a new set of communicators.
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "comm/communicator_common.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<unsigned char>;

enum class Op { kAllGather, kBarrier };

const char* op_name(Op op) {
    return op == Op::kAllGather ? "all_gather" : "barrier";
}

struct Failure {
    uint64_t generation;    // the collective that failed
    bool invalid_argument;  // a mismatch (all ranks of that collective throw InvalidArgument)
    std::string message;
};

struct Rendezvous {
    explicit Rendezvous(int group_size) : size(group_size), present(group_size, false), staging(group_size) {}

    const int size;
    std::mutex mutex;
    std::condition_variable cv;

    uint64_t generation = 0;  // collectives completed so far, i.e. the index of the open one
    int arrived = 0;
    std::vector<bool> present;  // who has entered the open collective
    std::vector<Bytes> staging;
    Op open_op = Op::kAllGather;  // what the first arrival of the open collective asked for
    size_t open_bytes = 0;
    int first_rank = -1;

    // Result of collective generation - 1. It cannot be replaced before every rank has copied it,
    // because replacing it requires every rank to have entered the next collective.
    std::shared_ptr<const Bytes> result;

    std::optional<Failure> failure;

    // The survivors' rendezvous after shrink(gone), one per `gone` list: made by the first survivor
    // that asks, found by the others.
    std::map<std::vector<int>, std::shared_ptr<Rendezvous>> shrunk;
};

class InProcessCommunicator final : public Communicator {
  public:
    InProcessCommunicator(std::shared_ptr<Rendezvous> rendezvous, int rank)
        : rendezvous_(std::move(rendezvous)), rank_(rank) {}

    int rank() const override { return rank_; }
    int size() const override { return rendezvous_->size; }

    void all_gather(const void* send, size_t bytes, void* recv, std::chrono::milliseconds timeout) override {
        comm_detail::check_collective_args(send, bytes, recv, timeout, describe());
        run(Op::kAllGather, send, bytes, recv, timeout);
    }

    void barrier(std::chrono::milliseconds timeout) override {
        comm_detail::check_collective_args(nullptr, 0, nullptr, timeout, describe());
        run(Op::kBarrier, nullptr, 0, nullptr, timeout);
    }

    std::string describe() const override {
        return "in-process rank " + std::to_string(rank_) + " of " + std::to_string(size());
    }

    // Threads of this process: a rank that stops taking part is still a thread of a live process.
    PeerStatus peer_status(int) const override { return PeerStatus::kAlive; }

    std::shared_ptr<Communicator> shrink(const std::vector<int>& gone, std::chrono::milliseconds timeout) override {
        const std::vector<int> sorted = comm_detail::checked_gone(gone, rank_, size(), describe());
        std::shared_ptr<Rendezvous> survivors;
        {
            std::lock_guard<std::mutex> lock(rendezvous_->mutex);
            std::shared_ptr<Rendezvous>& slot = rendezvous_->shrunk[sorted];
            if (!slot) slot = std::make_shared<Rendezvous>(size() - int(sorted.size()));
            survivors = slot;
        }
        auto communicator = std::make_shared<InProcessCommunicator>(survivors, shrunk_rank(rank_, sorted));
        comm_detail::verify_shrink(*communicator, rank_, sorted, timeout);
        return communicator;
    }

  private:
    void run(Op op, const void* send, size_t bytes, void* recv, std::chrono::milliseconds timeout);
    [[noreturn]] void throw_failure(const Failure& failure, uint64_t generation, Op op) const;

    std::shared_ptr<Rendezvous> rendezvous_;
    const int rank_;
    uint64_t entered_ = 0;  // collectives this rank has entered
};

void InProcessCommunicator::throw_failure(const Failure& failure, uint64_t generation, Op op) const {
    if (failure.invalid_argument && failure.generation == generation) throw InvalidArgument(failure.message);
    throw Error("switchyard: rank " + std::to_string(rank_) + " cannot enter " + op_name(op) +
                ": the in-process communicator is unusable after an earlier failure (" + failure.message +
                "); create new communicators");
}

void InProcessCommunicator::run(Op op, const void* send, size_t bytes, void* recv,
                                std::chrono::milliseconds timeout) {
    Rendezvous& rdv = *rendezvous_;
    const auto deadline = Clock::now() + timeout;
    const uint64_t generation = entered_++;

    std::unique_lock<std::mutex> lock(rdv.mutex);
    if (rdv.failure) throw_failure(*rdv.failure, generation, op);
    if (generation != rdv.generation) {
        // Cannot happen while every rank is driven by one thread; guards against sharing one
        // communicator object between threads.
        throw Error("switchyard: " + describe() + " entered collective #" + std::to_string(generation) +
                    " while the group is at #" + std::to_string(rdv.generation) +
                    "; is one communicator used by several threads?");
    }

    if (rdv.arrived == 0) {
        rdv.open_op = op;
        rdv.open_bytes = bytes;
        rdv.first_rank = rank_;
    } else if (op != rdv.open_op || bytes != rdv.open_bytes) {
        std::string message = "switchyard: in-process communicator, collective #" +
                              std::to_string(generation) + ": rank " + std::to_string(rank_) + " entered " +
                              op_name(op);
        if (op == rdv.open_op) {
            message += " with " + std::to_string(bytes) + " bytes but rank " +
                       std::to_string(rdv.first_rank) + " with " + std::to_string(rdv.open_bytes) +
                       " bytes (every rank must pass the same size)";
        } else {
            message += " but rank " + std::to_string(rdv.first_rank) + " entered " + op_name(rdv.open_op) +
                       " (ranks must call the same collectives in the same order)";
        }
        rdv.failure = Failure{generation, true, message};
        rdv.cv.notify_all();
        throw InvalidArgument(message);
    }

    const auto* begin = static_cast<const unsigned char*>(send);
    rdv.staging[rank_].assign(begin, begin + bytes);
    rdv.present[rank_] = true;
    ++rdv.arrived;

    if (rdv.arrived == rdv.size) {
        // Last to arrive: publish the result and open the next collective.
        auto result = std::make_shared<Bytes>(static_cast<size_t>(rdv.size) * bytes);
        for (int r = 0; r < rdv.size; ++r) {
            if (bytes > 0)
                std::memcpy(result->data() + static_cast<size_t>(r) * bytes, rdv.staging[r].data(), bytes);
            rdv.staging[r].clear();
            rdv.present[r] = false;
        }
        rdv.result = std::move(result);
        rdv.arrived = 0;
        ++rdv.generation;
        rdv.cv.notify_all();
    } else {
        const bool finished = rdv.cv.wait_until(lock, deadline, [&] {
            return rdv.generation != generation ||
                   (rdv.failure && rdv.failure->invalid_argument && rdv.failure->generation == generation);
        });
        if (rdv.generation == generation) {
            if (finished) throw InvalidArgument(rdv.failure->message);
            int missing = -1, missing_count = 0;
            for (int r = 0; r < rdv.size; ++r) {
                if (rdv.present[r]) continue;
                if (missing < 0) missing = r;
                ++missing_count;
            }
            std::string waiting_for = "rank " + std::to_string(missing);
            if (missing_count > 1) waiting_for += " (and " + std::to_string(missing_count - 1) + " more)";
            const std::string message = comm_detail::timeout_message(rank_, timeout, op_name(op), waiting_for,
                                                                     "in-process communicator");
            if (!rdv.failure) rdv.failure = Failure{generation, false, message};
            throw TimeoutError(message, rank_, missing, op_name(op));
        }
    }

    std::shared_ptr<const Bytes> result = rdv.result;
    lock.unlock();
    if (bytes > 0) std::memcpy(recv, result->data(), result->size());
}

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_in_process_communicators(int size) {
    if (size < 1) {
        throw InvalidArgument("switchyard: make_in_process_communicators needs size >= 1, got " +
                              std::to_string(size));
    }
    auto rendezvous = std::make_shared<Rendezvous>(size);
    std::vector<std::shared_ptr<Communicator>> out;
    out.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) out.push_back(std::make_shared<InProcessCommunicator>(rendezvous, r));
    return out;
}

}  // namespace switchyard
