// A per-case watchdog for multi-rank GPU tests. Every wait of the library is bounded, but a kernel
// that never ends (a defect: a spin outside the bounded waits) leaves its rank's host thread, and
// soon every co-located rank's, inside a CUDA call that cannot be interrupted; the case then runs
// until an outer time limit kills it, with nothing printed. So each rank says what it is doing
// (step()); when one rank has spent longer than the limit in one step, the watchdog prints every
// rank's step and how long it has been in it, then what each rank registered (describe(): its
// network's counters, its buffer's error record), and ends the process with kWatchdogExitCode.
//
//   CaseWatchdog watchdog("HierHt.TwoNodesOfTwo", ranks, limit);
//   ... on rank r: watchdog.step(r, "case 3: cached dispatch: synchronize");
//
// The limit should exceed the longest bounded wait a step can contain (device timeouts, host
// barriers, teardown); SWITCHYARD_TEST_WATCHDOG_SECONDS replaces the default (a test tool
// variable; 0 disables the watchdog).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace switchyard::testing {

constexpr int kWatchdogExitCode = 124;

class CaseWatchdog {
  public:
    using Clock = std::chrono::steady_clock;

    // `limit`: the longest a rank may stay in one step; SWITCHYARD_TEST_WATCHDOG_SECONDS, when set,
    // replaces it (0: no watchdog).
    CaseWatchdog(std::string case_name, int num_ranks, std::chrono::seconds limit);
    ~CaseWatchdog();
    CaseWatchdog(const CaseWatchdog&) = delete;
    CaseWatchdog& operator=(const CaseWatchdog&) = delete;

    // Rank `rank` starts `what` now.
    void step(int rank, std::string what);
    // Rank `rank` finished its part of the case: it is no longer watched.
    void done(int rank);
    // Printed for rank `rank` when the watchdog fires, after the steps; it runs on the watchdog's
    // thread while the rank may be stuck in a CUDA call, so it must read host memory only (no CUDA
    // call that could wait for the device). Cleared by done().
    void describe(int rank, std::function<std::string()> details);

    std::chrono::seconds limit() const { return limit_; }

    // The report the watchdog prints (every rank's step and time in it, then the descriptions).
    std::string report(Clock::time_point now);

  private:
    struct Rank {
        std::string what = "not started";
        Clock::time_point since;
        bool done = false;
        std::function<std::string()> details;
    };
    void watch();

    std::string case_name_;
    std::chrono::seconds limit_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::vector<Rank> ranks_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace switchyard::testing
