// Small helpers shared by the communicator implementations (messages, argument checks).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "switchyard/errors.hpp"

namespace switchyard {
class Communicator;
}

namespace switchyard::comm_detail {

// shrink's `gone` list, sorted and checked against this rank and the size (InvalidArgument).
std::vector<int> checked_gone(const std::vector<int>& gone, int rank, int size, const std::string& who);

// On the survivors' new communicator: every survivor passed the same `gone` list and took the rank
// shrunk_rank gives it (InvalidArgument otherwise).
void verify_shrink(Communicator& survivors, int old_rank, const std::vector<int>& gone,
                   std::chrono::milliseconds timeout);

// "500 ms" below a second, "2.0 s" above: the unit a person would use when setting the timeout.
inline std::string format_duration(std::chrono::milliseconds duration) {
    char text[48];
    if (duration.count() < 1000) {
        std::snprintf(text, sizeof text, "%lld ms", static_cast<long long>(duration.count()));
    } else {
        std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(duration.count()) / 1000.0);
    }
    return text;
}

// The message every TimeoutError of a communicator uses, so logs of all ranks read alike.
inline std::string timeout_message(int rank, std::chrono::milliseconds timeout, const std::string& phase,
                                   const std::string& waiting_for, const std::string& where) {
    return "switchyard: rank " + std::to_string(rank) + " timed out after " + format_duration(timeout) +
           " in " + phase + " waiting for " + waiting_for + " (" + where + ")";
}

inline void check_collective_args(const void* send, size_t bytes, const void* recv,
                                  std::chrono::milliseconds timeout, const std::string& who) {
    if (bytes > 0 && (send == nullptr || recv == nullptr)) {
        throw InvalidArgument("switchyard: " + who + ": all_gather of " + std::to_string(bytes) +
                              " bytes got a null send or recv pointer");
    }
    if (timeout.count() < 0) {
        throw InvalidArgument("switchyard: " + who + ": negative timeout (" +
                              std::to_string(timeout.count()) + " ms)");
    }
}

}  // namespace switchyard::comm_detail
