// What every communicator shares: the defaults of the optional queries, the survivors' ranks after
// a shrink, and the checks a shrink makes (communicator_common.hpp).
#include <algorithm>
#include <cstdint>

#include "comm/communicator_common.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {

PeerStatus Communicator::peer_status(int) const {
    return PeerStatus::kUnknown;
}

std::string Communicator::describe_process(int) const {
    return {};
}

std::shared_ptr<Communicator> Communicator::shrink(const std::vector<int>&, std::chrono::milliseconds) {
    throw UnsupportedError("switchyard: " + describe() +
                           ": this communicator cannot form a communicator of the surviving ranks; create "
                           "one over the survivors with the framework's own means and a new Buffer on it");
}

std::vector<int> Communicator::gone_ranks() const {
    std::vector<int> gone;
    for (int r = 0; r < size(); ++r)
        if (r != rank() && peer_status(r) == PeerStatus::kGone) gone.push_back(r);
    return gone;
}

int shrunk_rank(int old_rank, const std::vector<int>& gone) {
    int below = 0;
    for (int r : gone) {
        if (r == old_rank) return -1;
        if (r < old_rank) ++below;
    }
    return old_rank - below;
}

namespace comm_detail {

std::vector<int> checked_gone(const std::vector<int>& gone, int rank, int size, const std::string& who) {
    std::vector<int> sorted = gone;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    for (int r : sorted) {
        if (r < 0 || r >= size)
            throw InvalidArgument("switchyard: " + who + ": shrink: rank " + std::to_string(r) + " is outside [0, " +
                                  std::to_string(size) + ")");
        if (r == rank)
            throw InvalidArgument("switchyard: " + who + ": shrink: this rank is in the list of gone ranks; only "
                                  "survivors call shrink");
    }
    return sorted;
}

// FNV-1a over the sorted list: equal on every survivor that passed the same ranks.
static uint64_t hash_of(const std::vector<int>& ranks) {
    uint64_t hash = 1469598103934665603ull;
    for (int r : ranks)
        for (int byte = 0; byte < 4; ++byte) hash = (hash ^ ((uint32_t(r) >> (8 * byte)) & 0xffu)) * 1099511628211ull;
    return hash;
}

void verify_shrink(Communicator& survivors, int old_rank, const std::vector<int>& gone,
                   std::chrono::milliseconds timeout) {
    struct Entry {
        int64_t old_rank;
        uint64_t gone_hash;
        int64_t gone_count;
    };
    const Entry mine{old_rank, hash_of(gone), int64_t(gone.size())};
    const std::vector<Entry> all = survivors.all_gather_value(mine, timeout);
    for (size_t r = 0; r < all.size(); ++r) {
        if (all[r].gone_hash != mine.gone_hash || all[r].gone_count != mine.gone_count)
            throw InvalidArgument("switchyard: shrink: the survivors disagree on which ranks are gone: old rank " +
                                  std::to_string(all[r].old_rank) + " passed a different list than old rank " +
                                  std::to_string(old_rank) + " (" + std::to_string(all[r].gone_count) + " vs " +
                                  std::to_string(gone.size()) + " ranks); every survivor must pass the same ranks");
        if (shrunk_rank(int(all[r].old_rank), gone) != int(r))
            throw InvalidArgument("switchyard: shrink: old rank " + std::to_string(all[r].old_rank) +
                                  " took the survivors' rank " + std::to_string(r) + ", expected " +
                                  std::to_string(shrunk_rank(int(all[r].old_rank), gone)));
    }
}

}  // namespace comm_detail

}  // namespace switchyard
