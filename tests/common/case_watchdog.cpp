// See case_watchdog.hpp.
#include "common/case_watchdog.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>

namespace switchyard::testing {

namespace {

std::chrono::seconds configured_limit(std::chrono::seconds limit) {
    const char* value = std::getenv("SWITCHYARD_TEST_WATCHDOG_SECONDS");
    if (value == nullptr || *value == '\0') return limit;
    char* end = nullptr;
    const long seconds = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || seconds < 0) {
        std::fprintf(stderr, "[watchdog] SWITCHYARD_TEST_WATCHDOG_SECONDS=%s is not a whole number of seconds; "
                             "keeping %lld s\n",
                     value, static_cast<long long>(limit.count()));
        return limit;
    }
    return std::chrono::seconds(seconds);
}

}  // namespace

CaseWatchdog::CaseWatchdog(std::string case_name, int num_ranks, std::chrono::seconds limit)
    : case_name_(std::move(case_name)), limit_(configured_limit(limit)), ranks_(size_t(num_ranks > 0 ? num_ranks : 0)) {
    const Clock::time_point now = Clock::now();
    for (Rank& rank : ranks_) rank.since = now;
    if (limit_.count() > 0) thread_ = std::thread([this] { watch(); });
}

CaseWatchdog::~CaseWatchdog() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void CaseWatchdog::step(int rank, std::string what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank < 0 || size_t(rank) >= ranks_.size()) return;
    ranks_[size_t(rank)].what = std::move(what);
    ranks_[size_t(rank)].since = Clock::now();
}

void CaseWatchdog::done(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank < 0 || size_t(rank) >= ranks_.size()) return;
    Rank& r = ranks_[size_t(rank)];
    r.what = "done";
    r.since = Clock::now();
    r.done = true;
    r.details = nullptr;
}

void CaseWatchdog::describe(int rank, std::function<std::string()> details) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank < 0 || size_t(rank) >= ranks_.size()) return;
    ranks_[size_t(rank)].details = std::move(details);
}

std::string CaseWatchdog::report(Clock::time_point now) {
    std::vector<Rank> ranks;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        ranks = ranks_;
    }
    std::ostringstream out;
    for (size_t r = 0; r < ranks.size(); ++r)
        out << "  rank " << r << ", " << std::chrono::duration<double>(now - ranks[r].since).count()
            << " s in: " << ranks[r].what << "\n";
    for (size_t r = 0; r < ranks.size(); ++r) {
        if (!ranks[r].details) continue;
        std::string text;
        try {
            text = ranks[r].details();
        } catch (const std::exception& error) {
            text = std::string("(its description failed: ") + error.what() + ")";
        }
        out << "  rank " << r << ": " << text << "\n";
    }
    return out.str();
}

void CaseWatchdog::watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        if (wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) return;
        const Clock::time_point now = Clock::now();
        int stuck = -1;
        for (size_t r = 0; r < ranks_.size(); ++r)
            if (!ranks_[r].done && now - ranks_[r].since > limit_) {
                stuck = int(r);
                break;
            }
        if (stuck < 0) continue;
        lock.unlock();
        const std::string text = report(now);
        std::fprintf(stderr,
                     "[watchdog] %s: rank %d has spent more than %lld s in one step; every wait of the library "
                     "is bounded well below that, so something waits without a bound (the ranks' steps below "
                     "say where). Ending the process (exit code %d): a CUDA call waiting for a kernel that "
                     "never ends cannot be interrupted.\n%s",
                     case_name_.c_str(), stuck, static_cast<long long>(limit_.count()), kWatchdogExitCode,
                     text.c_str());
        std::fflush(stderr);
        std::fflush(stdout);
        std::_Exit(kWatchdogExitCode);
    }
}

}  // namespace switchyard::testing
