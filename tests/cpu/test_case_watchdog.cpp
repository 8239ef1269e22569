// The GPU tests' per-case watchdog (tests/common/case_watchdog.hpp): its report names every rank's
// step, how long the rank has been in it, and what the ranks registered; a rank that stays in one
// step past the limit ends the process with kWatchdogExitCode and that report on stderr, so a case
// whose kernel never ends fails with the place it hung instead of running until it is killed.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/case_watchdog.hpp"
#include "common/testing.hpp"

using namespace switchyard::testing;
using namespace std::chrono_literals;

namespace {

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

}  // namespace

SY_TEST(CaseWatchdog, ReportNamesEveryRanksStepAndDescription) {
    unsetenv("SWITCHYARD_TEST_WATCHDOG_SECONDS");
    CaseWatchdog watchdog("Suite.Case", 3, 600s);
    watchdog.step(0, "case 1: dispatch: synchronize");
    watchdog.step(2, "case 1: combine");
    watchdog.describe(2, [] { return std::string("network: 3 puts"); });
    watchdog.describe(1, [] { return std::string("never printed: rank 1 is done"); });
    watchdog.done(1);
    const std::string text = watchdog.report(CaseWatchdog::Clock::now() + 5s);
    SY_CHECK_MSG(contains(text, "rank 0, 5") && contains(text, "s in: case 1: dispatch: synchronize"), text);
    SY_CHECK_MSG(contains(text, "rank 1, 5") && contains(text, "s in: done"), text);
    SY_CHECK_MSG(contains(text, "rank 2: network: 3 puts"), text);
    SY_CHECK_MSG(!contains(text, "never printed"), text);
}

SY_TEST(CaseWatchdog, DescriptionsThatThrowAreReportedNotFatal) {
    unsetenv("SWITCHYARD_TEST_WATCHDOG_SECONDS");
    CaseWatchdog watchdog("Suite.Case", 1, 600s);
    watchdog.describe(0, []() -> std::string { throw std::runtime_error("poisoned"); });
    SY_CHECK(contains(watchdog.report(CaseWatchdog::Clock::now()), "its description failed: poisoned"));
}

SY_TEST(CaseWatchdog, AStuckRankEndsTheProcessWithTheReport) {
    std::fflush(stdout);
    std::fflush(stderr);
    int pipe_fds[2];
    SY_CHECK_EQ(pipe(pipe_fds), 0);
    const pid_t child = fork();
    SY_CHECK(child >= 0);
    if (child == 0) {
        dup2(pipe_fds[1], STDERR_FILENO);
        close(pipe_fds[0]);
        unsetenv("SWITCHYARD_TEST_WATCHDOG_SECONDS");
        CaseWatchdog watchdog("Suite.Stuck", 2, 1s);
        watchdog.step(0, "making progress");
        watchdog.step(1, "waiting for a kernel that never ends");
        for (int i = 0; i < 100; ++i) {  // rank 0 keeps stepping; rank 1 never does again
            watchdog.step(0, "making progress " + std::to_string(i));
            std::this_thread::sleep_for(100ms);
        }
        std::_Exit(0);  // the watchdog did not fire
    }
    close(pipe_fds[1]);
    std::string output;
    char buffer[512];
    for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) output.append(buffer, size_t(n));
    close(pipe_fds[0]);
    int status = 0;
    SY_CHECK_EQ(waitpid(child, &status, 0), child);
    SY_CHECK(WIFEXITED(status));
    SY_CHECK_EQ(WEXITSTATUS(status), kWatchdogExitCode);
    SY_CHECK_MSG(contains(output, "Suite.Stuck: rank 1 has spent more than 1 s in one step"), output);
    SY_CHECK_MSG(contains(output, "s in: waiting for a kernel that never ends"), output);
}

SY_TEST(CaseWatchdog, ZeroSecondsDisablesIt) {
    setenv("SWITCHYARD_TEST_WATCHDOG_SECONDS", "0", 1);
    CaseWatchdog watchdog("Suite.Case", 1, 1s);
    SY_CHECK_EQ(watchdog.limit().count(), 0);
    unsetenv("SWITCHYARD_TEST_WATCHDOG_SECONDS");
}

SY_TEST_MAIN()
