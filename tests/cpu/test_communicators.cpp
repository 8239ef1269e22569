// Tests of the host communicators: in-process (threads), local-process (fork) and the NCCL
// wrapper (library loading on any machine; collectives only where a GPU is present).
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>

#include <cuda_runtime_api.h>

#include "comm/nccl_library.hpp"
#include "common/testing.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

bool contains(const std::string& text, const std::string& needle) {
    return text.find(needle) != std::string::npos;
}

// Runs body(rank, communicator) on one thread per rank; rethrows the first failure on this thread.
void run_threads(const std::vector<std::shared_ptr<Communicator>>& comms,
                 const std::function<void(int, Communicator&)>& body) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(comms.size());
    for (size_t r = 0; r < comms.size(); ++r) {
        threads.emplace_back([&, r] {
            try {
                body(static_cast<int>(r), *comms[r]);
            } catch (...) {
                errors[r] = std::current_exception();
            }
        });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
        if (e) std::rethrow_exception(e);
    }
}

// Failure inside a child process or a rank thread: carries the text back as an exception.
void expect(bool condition, const std::string& what) {
    if (!condition) throw std::runtime_error("expectation failed: " + what);
}

struct Outcome {  // what a rank saw, for checks on the main thread
    std::string kind = "none";
    std::string message;
    int rank = -2, peer = -2;
    std::string phase;
    double seconds = 0;
};

}  // namespace

// --- In-process -----------------------------------------------------------------------------------------

SY_TEST(InProcess, AllGatherDistinctValues) {
    for (int size : {1, 2, 4, 8}) {
        auto comms = make_in_process_communicators(size);
        SY_CHECK_EQ(comms.size(), static_cast<size_t>(size));
        run_threads(comms, [&](int rank, Communicator& comm) {
            expect(comm.rank() == rank && comm.size() == size, "rank/size");
            expect(
                comm.describe() == "in-process rank " + std::to_string(rank) + " of " + std::to_string(size),
                "describe: " + comm.describe());
            const uint64_t mine[2] = {static_cast<uint64_t>(rank), 1000003ull * rank + 7};
            std::vector<uint64_t> all(2 * static_cast<size_t>(size), 0);
            comm.all_gather(mine, sizeof mine, all.data(), 2s);
            for (int r = 0; r < size; ++r) {
                expect(all[2 * r] == static_cast<uint64_t>(r) && all[2 * r + 1] == 1000003ull * r + 7,
                       "all_gather value of rank " + std::to_string(r));
            }
            const auto values = comm.all_gather_value<int32_t>(-rank, 2s);
            for (int r = 0; r < size; ++r) expect(values[r] == -r, "all_gather_value");
        });
    }
}

SY_TEST(InProcess, BackToBackCollectivesWithRandomSleeps) {
    constexpr int kSize = 6, kRounds = 200;
    auto comms = make_in_process_communicators(kSize);
    run_threads(comms, [&](int rank, Communicator& comm) {
        std::mt19937 rng(1234 + rank);
        for (int round = 0; round < kRounds; ++round) {
            if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
            if (round % 10 == 9) {
                comm.barrier(5s);
                continue;
            }
            // The size changes every round (equal on all ranks), so a rank mixing up rounds fails.
            const size_t words = 1 + round % 7;
            std::vector<uint32_t> mine(words), all(words * kSize);
            for (size_t w = 0; w < words; ++w) mine[w] = static_cast<uint32_t>(round * 1000 + rank * 10 + w);
            comm.all_gather(mine.data(), words * 4, all.data(), 5s);
            for (int r = 0; r < kSize; ++r) {
                for (size_t w = 0; w < words; ++w) {
                    expect(all[r * words + w] == static_cast<uint32_t>(round * 1000 + r * 10 + w),
                           "round " + std::to_string(round) + " rank " + std::to_string(r));
                }
            }
        }
    });
}

SY_TEST(InProcess, BarrierHoldsEveryoneUntilAllArrive) {
    constexpr int kSize = 4, kRounds = 50;
    auto comms = make_in_process_communicators(kSize);
    std::vector<std::atomic<int>> entered(kRounds);
    run_threads(comms, [&](int rank, Communicator& comm) {
        for (int round = 0; round < kRounds; ++round) {
            if ((round + rank) % 4 == 0) std::this_thread::sleep_for(200us);
            entered[round].fetch_add(1);
            comm.barrier(5s);
            expect(entered[round].load() == kSize, "left barrier " + std::to_string(round) + " early");
        }
    });
}

// Ranks 0..size-1 except `missing` run `op`; returns what each saw.
std::vector<Outcome> run_with_missing_rank(int size, int missing, bool barrier,
                                           std::chrono::milliseconds timeout) {
    auto comms = make_in_process_communicators(size);
    std::vector<Outcome> outcomes(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
        if (r == missing) continue;
        threads.emplace_back([&, r] {
            const auto start = Clock::now();
            try {
                int value = r, out[16];
                if (barrier) {
                    comms[r]->barrier(timeout);
                } else {
                    comms[r]->all_gather(&value, sizeof value, out, timeout);
                }
                outcomes[r].kind = "returned";
            } catch (const TimeoutError& e) {
                outcomes[r] = {"timeout", e.what(), e.rank(), e.peer(), e.phase(), seconds_since(start)};
            } catch (const std::exception& e) {
                outcomes[r].kind = "other";
                outcomes[r].message = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    // The group is unusable afterwards, also for the rank that never came.
    SY_CHECK_THROWS_WITH(comms[missing]->barrier(100ms), Error, "unusable");
    return outcomes;
}

SY_TEST(InProcess, TimeoutNamesMissingRank) {
    const auto timeout = 300ms;
    const auto outcomes = run_with_missing_rank(4, 3, false, timeout);
    for (int r = 0; r < 3; ++r) {
        const Outcome& o = outcomes[r];
        SY_CHECK_MSG(o.kind == "timeout", "rank " << r << ": " << o.kind << " " << o.message);
        SY_CHECK_EQ(o.rank, r);
        SY_CHECK_EQ(o.peer, 3);
        SY_CHECK_EQ(o.phase, std::string("all_gather"));
        SY_CHECK_MSG(contains(o.message, "rank " + std::to_string(r) +
                                             " timed out after 300 ms in all_gather "
                                             "waiting for rank 3"),
                     o.message);
        SY_CHECK(o.seconds >= 0.29 && o.seconds < 0.3 + 1.0);
    }
}

SY_TEST(InProcess, BarrierTimeoutNamesFirstMissingRank) {
    const auto outcomes = run_with_missing_rank(3, 1, true, 200ms);
    for (int r : {0, 2}) {
        SY_CHECK_MSG(outcomes[r].kind == "timeout", outcomes[r].message);
        SY_CHECK_EQ(outcomes[r].peer, 1);
        SY_CHECK_EQ(outcomes[r].phase, std::string("barrier"));
        SY_CHECK(contains(outcomes[r].message, "in barrier waiting for rank 1"));
        SY_CHECK(outcomes[r].seconds < 1.2);
    }
}

SY_TEST(InProcess, TimeoutCountsOtherMissingRanks) {
    auto comms = make_in_process_communicators(4);
    int value = 0, out[4];
    try {
        comms[2]->all_gather(&value, sizeof value, out, 50ms);
        SY_CHECK_MSG(false, "did not time out");
    } catch (const TimeoutError& e) {
        SY_CHECK_EQ(e.peer(), 0);
        SY_CHECK_MSG(contains(e.what(), "waiting for rank 0 (and 2 more)"), e.what());
    }
}

SY_TEST(InProcess, MismatchedSizesNameBothRanks) {
    auto comms = make_in_process_communicators(2);
    std::vector<std::string> messages(2);
    run_threads(comms, [&](int rank, Communicator& comm) {
        if (rank == 1) std::this_thread::sleep_for(50ms);  // rank 0 opens the collective
        const size_t bytes = rank == 0 ? 4 : 8;
        std::vector<char> send(bytes, 'x'), recv(2 * bytes);
        try {
            comm.all_gather(send.data(), bytes, recv.data(), 2s);
            messages[rank] = "returned";
        } catch (const InvalidArgument& e) {
            messages[rank] = e.what();
        }
    });
    for (const auto& m : messages) {
        SY_CHECK_MSG(contains(m, "rank 1 entered all_gather with 8 bytes but rank 0 with 4 bytes"), m);
    }
    SY_CHECK_THROWS_WITH(comms[0]->barrier(100ms), Error, "unusable");
}

SY_TEST(InProcess, MismatchedSizesWithLateRank) {
    // The rank arriving after the mismatch was detected gets the same InvalidArgument.
    auto comms = make_in_process_communicators(3);
    std::atomic<int> invalid{0};
    run_threads(comms, [&](int rank, Communicator& comm) {
        if (rank == 2) std::this_thread::sleep_for(100ms);
        const size_t bytes = rank == 1 ? 16 : 8;
        std::vector<char> send(bytes), recv(3 * bytes);
        try {
            comm.all_gather(send.data(), bytes, recv.data(), 2s);
        } catch (const InvalidArgument& e) {
            if (contains(e.what(), "16 bytes") && contains(e.what(), "8 bytes")) ++invalid;
        }
    });
    SY_CHECK_EQ(invalid.load(), 3);
}

SY_TEST(InProcess, BarrierPairedWithAllGatherIsRejected) {
    auto comms = make_in_process_communicators(2);
    std::atomic<int> invalid{0};
    run_threads(comms, [&](int rank, Communicator& comm) {
        if (rank == 1) std::this_thread::sleep_for(30ms);
        try {
            if (rank == 0) {
                comm.barrier(2s);
            } else {
                int v = 0, out[2];
                comm.all_gather(&v, sizeof v, out, 2s);
            }
        } catch (const InvalidArgument& e) {
            if (contains(e.what(), "rank 1 entered all_gather but rank 0 entered barrier")) ++invalid;
        }
    });
    SY_CHECK_EQ(invalid.load(), 2);
}

SY_TEST(InProcess, InvalidArguments) {
    SY_CHECK_THROWS_WITH(make_in_process_communicators(0), InvalidArgument, "size >= 1");
    auto comms = make_in_process_communicators(1);
    int out = 0;
    SY_CHECK_THROWS_WITH(comms[0]->all_gather(nullptr, 4, &out, 1s), InvalidArgument, "null");
    SY_CHECK_THROWS_WITH(comms[0]->barrier(-1ms), InvalidArgument, "negative timeout");
}

// Survivors of a group form a smaller one in the same threads: ranks renumbered in the old order.
SY_TEST(InProcess, ShrinkToSurvivors) {
    auto comms = make_in_process_communicators(4);
    expect(comms[0]->peer_status(3) == PeerStatus::kAlive, "threads of a live process");
    SY_CHECK(shrunk_rank(3, {2}) == 2 && shrunk_rank(2, {2}) == -1 && shrunk_rank(1, {2, 0}) == 0);
    std::vector<std::shared_ptr<Communicator>> survivors = {comms[0], comms[1], comms[3]};
    run_threads(survivors, [&](int index, Communicator& comm) {
        auto shrunk = comm.shrink({2}, 5s);
        expect(shrunk->size() == 3 && shrunk->rank() == index, "rank " + std::to_string(shrunk->rank()));
        const int old_rank = comm.rank();
        std::vector<int> all(3);
        shrunk->all_gather(&old_rank, sizeof old_rank, all.data(), 5s);
        expect(all == std::vector<int>({0, 1, 3}), "old ranks in order");
        shrunk->barrier(5s);
    });
    SY_CHECK_THROWS_WITH(comms[2]->shrink({2}, 1s), InvalidArgument, "this rank is in the list of gone ranks");
    SY_CHECK_THROWS_WITH(comms[0]->shrink({4}, 1s), InvalidArgument, "rank 4 is outside [0, 4)");
}

// --- Local-process (fork) ----------------------------------------------------------------------------------

namespace {

std::string unique_key(const std::string& name) {
    static int counter = 0;
    return "sy-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + name;
}

// Forks one child per entry of `ranks` running body(rank); the child exits 0 if body returns and 1
// (after printing why) if it throws. Returns the exit codes. Children still running after
// `watchdog` are killed and reported as 99.
std::vector<int> run_processes(const std::vector<int>& ranks, const std::function<void(int)>& body,
                               std::chrono::seconds watchdog = 20s) {
    std::fflush(stdout);
    std::fflush(stderr);
    std::vector<pid_t> pids;
    for (int rank : ranks) {
        const pid_t pid = ::fork();
        if (pid < 0) throw std::runtime_error("fork failed");
        if (pid == 0) {
            int code = 0;
            try {
                body(rank);
            } catch (const std::exception& e) {
                std::fprintf(stderr, "  [child rank %d] %s\n", rank, e.what());
                code = 1;
            }
            std::fflush(stderr);
            ::_exit(code);  // no atexit handlers or test-harness output from the child
        }
        pids.push_back(pid);
    }
    std::vector<int> codes(pids.size(), -1);
    const auto deadline = Clock::now() + watchdog;
    size_t left = pids.size();
    while (left > 0) {
        for (size_t i = 0; i < pids.size(); ++i) {
            if (codes[i] != -1) continue;
            int status = 0;
            const pid_t done = ::waitpid(pids[i], &status, WNOHANG);
            if (done == pids[i]) {
                codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                --left;
            }
        }
        if (left > 0 && Clock::now() > deadline) {
            for (size_t i = 0; i < pids.size(); ++i) {
                if (codes[i] != -1) continue;
                ::kill(pids[i], SIGKILL);
                ::waitpid(pids[i], nullptr, 0);
                codes[i] = 99;
            }
            left = 0;
        }
        if (left > 0) std::this_thread::sleep_for(2ms);
    }
    return codes;
}

void check_all_zero(const std::vector<int>& codes) {
    for (size_t i = 0; i < codes.size(); ++i)
        SY_CHECK_MSG(codes[i] == 0, "child " << i << " exited " << codes[i]);
}

// Runs `call` and checks it throws TimeoutError with rank/phase as given, a peer in `peers`, and
// within `limit` seconds.
void expect_timeout(const std::function<void()>& call, int rank, std::vector<int> peers,
                    const std::string& phase, double limit, const std::string& needle = "") {
    const auto start = Clock::now();
    try {
        call();
    } catch (const TimeoutError& e) {
        const double seconds = seconds_since(start);
        const std::string what = e.what();
        expect(e.rank() == rank, "rank() " + std::to_string(e.rank()) + ": " + what);
        expect(std::find(peers.begin(), peers.end(), e.peer()) != peers.end(),
               "peer() " + std::to_string(e.peer()) + ": " + what);
        expect(contains(what, "rank " + std::to_string(e.peer())), "message names the peer: " + what);
        expect(e.phase() == phase && contains(what, phase), "phase " + e.phase() + ": " + what);
        expect(seconds <= limit, "took " + std::to_string(seconds) + " s: " + what);
        expect(needle.empty() || contains(what, needle), "message lacks '" + needle + "': " + what);
        return;
    }
    throw std::runtime_error("expected TimeoutError in " + phase);
}

}  // namespace

SY_TEST(LocalProcess, FourProcessesAllGather) {
    const std::string key = unique_key("gather");
    check_all_zero(run_processes({0, 1, 2, 3}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, 4, 5s);
        expect(comm->rank() == rank && comm->size() == 4, "rank/size");
        expect(contains(comm->describe(), "local-process rank " + std::to_string(rank) + " of 4"),
               comm->describe());
        const uint64_t mine[3] = {static_cast<uint64_t>(rank), 77ull * rank, 0xABCDull};
        uint64_t all[12] = {};
        comm->all_gather(mine, sizeof mine, all, 5s);
        for (int r = 0; r < 4; ++r) {
            expect(all[3 * r] == uint64_t(r) && all[3 * r + 1] == 77ull * r && all[3 * r + 2] == 0xABCD,
                   "value");
        }
        comm->barrier(5s);
    }));
}

SY_TEST(LocalProcess, RepeatedCollectivesIncludingLargeBlobs) {
    const std::string key = unique_key("repeat");
    constexpr int kSize = 4, kRounds = 200;
    check_all_zero(run_processes({0, 1, 2, 3}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, kSize, 5s);
        std::mt19937 rng(99 + rank);
        for (int round = 0; round < kRounds; ++round) {
            if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
            if (round % 7 == 3) {
                comm->barrier(5s);
                continue;
            }
            // Every 50th round sends 1 MiB per rank: more than a socket buffer, so reads and writes
            // are partial and interleaved.
            const size_t bytes = round % 50 == 0 ? (1u << 20) : 1 + (round * 13) % 300;
            std::vector<unsigned char> mine(bytes), all(bytes * kSize);
            for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<unsigned char>(round + rank * 31 + i);
            comm->all_gather(mine.data(), bytes, all.data(), 5s);
            for (int r = 0; r < kSize; ++r) {
                for (size_t i = 0; i < bytes; i += 1 + bytes / 64) {
                    expect(all[r * bytes + i] == static_cast<unsigned char>(round + r * 31 + i),
                           "round " + std::to_string(round) + " rank " + std::to_string(r));
                }
            }
        }
    }));
}

SY_TEST(LocalProcess, SingleRankNeedsNoPeers) {
    auto comm = make_local_process_communicator(unique_key("single"), 0, 1, 1s);
    const auto values = comm->all_gather_value<int>(42, 1s);
    SY_CHECK_EQ(values.size(), size_t{1});
    SY_CHECK_EQ(values[0], 42);
    comm->barrier(1s);
}

SY_TEST(LocalProcess, ProcessThatNeverConnects) {
    // Rank 3 never starts: rank 0 names it; the others name it too if rank 0's verdict reaches them
    // first, otherwise rank 0 (all they can see).
    const std::string key = unique_key("noconnect");
    const auto timeout = 800ms;
    check_all_zero(run_processes({0, 1, 2}, [&](int rank) {
        const std::vector<int> peers = rank == 0 ? std::vector<int>{3} : std::vector<int>{0, 3};
        expect_timeout([&] { make_local_process_communicator(key, rank, 4, timeout); }, rank, peers,
                       "connect", 0.8 + 1.0);
    }));
}

SY_TEST(LocalProcess, RankZeroNeverStarts) {
    const std::string key = unique_key("noroot");
    check_all_zero(run_processes({1, 2}, [&](int rank) {
        expect_timeout([&] { make_local_process_communicator(key, rank, 3, 500ms); }, rank, {0}, "connect",
                       1.5, "waiting for rank 0");
    }));
}

SY_TEST(LocalProcess, ProcessThatNeverJoinsCollective) {
    const std::string key = unique_key("nojoin");
    const auto timeout = 600ms;
    check_all_zero(run_processes({0, 1, 2, 3}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, 4, 5s);
        if (rank == 3) {
            std::this_thread::sleep_for(1500ms);  // outlives everyone's timeout, then leaves
            return;
        }
        const std::vector<int> peers = rank == 0 ? std::vector<int>{3} : std::vector<int>{0, 3};
        int value = rank, out[4];
        expect_timeout([&] { comm->all_gather(&value, sizeof value, out, timeout); }, rank, peers,
                       "all_gather", 0.6 + 1.0);
        bool unusable = false;
        try {
            comm->barrier(100ms);
        } catch (const Error& e) {
            unusable = contains(e.what(), "unusable");
        }
        expect(unusable, "communicator refuses calls after a timeout");
    }));
}

SY_TEST(LocalProcess, PeerThatExitsEarly) {
    // Rank 2 leaves right after connecting. Rank 0 sees the connection close at once and relays
    // the verdict, so rank 1 also names rank 2, long before the 3 s timeout.
    const std::string key = unique_key("exit");
    check_all_zero(run_processes({0, 1, 2}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, 3, 5s);
        if (rank == 2) ::_exit(0);
        int value = rank, out[3];
        expect_timeout([&] { comm->all_gather(&value, sizeof value, out, 3s); }, rank, {2}, "all_gather", 1.0,
                       "closed");
    }));
}

SY_TEST(LocalProcess, RootThatExitsEarly) {
    const std::string key = unique_key("rootexit");
    check_all_zero(run_processes({0, 1, 2}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, 3, 5s);
        if (rank == 0) ::_exit(0);
        expect_timeout([&] { comm->barrier(3s); }, rank, {0}, "barrier", 1.0, "closed");
    }));
}

// A rank's process killed: the others see it gone through /proc (no communication), name its
// process, and the survivors form a communicator of their own in the same processes, also when the
// dead rank hosted the rendezvous (rank 0).
SY_TEST(LocalProcess, SurvivorsOfAKilledProcessShrink) {
    for (int victim : {2, 0}) {
        const std::string key = unique_key("shrink" + std::to_string(victim));
        const std::vector<int> codes = run_processes({0, 1, 2}, [&](int rank) {
            auto comm = make_local_process_communicator(key, rank, 3, 5s);
            for (int r = 0; r < 3; ++r) expect(comm->peer_status(r) == PeerStatus::kAlive, "alive at first");
            expect(contains(comm->describe_process((rank + 1) % 3), "on this host"), comm->describe_process(1));
            comm->barrier(5s);
            if (rank == victim) ::raise(SIGKILL);
            const auto start = Clock::now();
            while (comm->peer_status(victim) != PeerStatus::kGone) {
                expect(seconds_since(start) < 5.0, "rank " + std::to_string(victim) + " never seen gone");
                std::this_thread::sleep_for(1ms);
            }
            expect(comm->gone_ranks() == std::vector<int>({victim}), "gone_ranks");
            const int other = 3 - rank - victim;  // the other survivor (ranks 0 + 1 + 2 = 3)
            expect(comm->peer_status(other) == PeerStatus::kAlive, "the other survivor is alive");
            auto shrunk = comm->shrink({victim}, 5s);
            expect(shrunk->size() == 2 && shrunk->rank() == shrunk_rank(rank, {victim}), "survivors' rank");
            const int old_rank = rank;
            int all[2] = {};
            shrunk->all_gather(&old_rank, sizeof old_rank, all, 5s);
            expect(all[0] == (victim == 0 ? 1 : 0) && all[1] == (victim == 0 ? 2 : 1), "old ranks in order");
            shrunk->barrier(5s);
        });
        for (int r = 0; r < 3; ++r)
            SY_CHECK_MSG(codes[r] == (r == victim ? 128 + SIGKILL : 0), "child " << r << " exited " << codes[r]);
    }
}

SY_TEST(LocalProcess, MismatchedSizesAreInvalid) {
    // Rank 1 sends 4 MiB while the others send 8 bytes: it is still writing when rank 0 rejects it,
    // and must read the verdict instead of blocking until the timeout.
    const std::string key = unique_key("mismatch");
    check_all_zero(run_processes({0, 1, 2}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, 3, 5s);
        const size_t bytes = rank == 1 ? (4u << 20) : 8;
        std::vector<char> send(bytes), recv(3 * bytes);
        const auto start = Clock::now();
        try {
            comm->all_gather(send.data(), bytes, recv.data(), 3s);
        } catch (const InvalidArgument& e) {
            expect(contains(e.what(), "rank 1 entered all_gather with 4194304 bytes but rank 0 with 8 bytes"),
                   e.what());
            expect(seconds_since(start) < 1.5, "mismatch reported promptly");
            return;
        }
        throw std::runtime_error("expected InvalidArgument");
    }));
}

SY_TEST(LocalProcess, DuplicateRanksAreInvalid) {
    const std::string key = unique_key("dup");
    check_all_zero(run_processes({0, 1, 1}, [&](int rank) {
        try {
            make_local_process_communicator(key, rank, 3, 2s);
        } catch (const InvalidArgument& e) {
            expect(contains(e.what(), "two processes claim rank 1"), e.what());
            return;
        }
        throw std::runtime_error("expected InvalidArgument");
    }));
}

SY_TEST(LocalProcess, DifferentSizesAreInvalid) {
    const std::string key = unique_key("size");
    check_all_zero(run_processes({0, 1}, [&](int rank) {
        try {
            make_local_process_communicator(key, rank, rank == 0 ? 2 : 3, 2s);
        } catch (const InvalidArgument& e) {
            expect(contains(e.what(), "rank 1 was created with size 3 but rank 0 with size 2"), e.what());
            return;
        }
        throw std::runtime_error("expected InvalidArgument");
    }));
}

SY_TEST(LocalProcess, KeyAlreadyInUse) {
    const std::string key = unique_key("inuse");
    const auto codes = run_processes({0, 1}, [&](int which) {
        if (which == 0) {  // a rank 0 that waits for a peer that never comes
            expect_timeout([&] { make_local_process_communicator(key, 0, 2, 700ms); }, 0, {1}, "connect",
                           1.7);
            return;
        }
        std::this_thread::sleep_for(200ms);
        try {
            make_local_process_communicator(key, 0, 2, 200ms);
        } catch (const InvalidArgument& e) {
            expect(contains(e.what(), "already in use"), e.what());
            return;
        }
        throw std::runtime_error("expected InvalidArgument");
    });
    check_all_zero(codes);
}

SY_TEST(LocalProcess, LongKeyIsHashed) {
    const std::string key = unique_key(std::string(300, 'k'));
    check_all_zero(run_processes({0, 1}, [&](int rank) {
        auto comm = make_local_process_communicator(key, rank, 2, 5s);
        const auto values = comm->all_gather_value<int>(rank + 10, 5s);
        expect(values[0] == 10 && values[1] == 11, "values");
    }));
}

SY_TEST(LocalProcess, InvalidArguments) {
    SY_CHECK_THROWS_WITH(make_local_process_communicator("k", 2, 2, 1s), InvalidArgument, "0 <= rank < size");
    SY_CHECK_THROWS_WITH(make_local_process_communicator("", 0, 2, 1s), InvalidArgument, "non-empty key");
}

// --- NCCL ------------------------------------------------------------------------------------------------

SY_TEST(Nccl, LibraryLoadsOrThrowsUnsupported) {
    try {
        const NcclLibrary& lib = nccl_library();
        std::printf("  loaded %s, NCCL version code %d\n", lib.path.c_str(), lib.version);
        SY_CHECK(lib.version >= 20700);
        SY_CHECK(lib.get_unique_id && lib.comm_init_rank && lib.comm_init_all && lib.comm_destroy);
        SY_CHECK(lib.group_start && lib.group_end && lib.send && lib.recv && lib.all_gather);
        SY_CHECK(lib.comm_count && lib.comm_user_rank && lib.comm_get_async_error && lib.get_error_string);
        SY_CHECK(contains(lib.describe_error(2), "NCCL error 2 ("));
        SY_CHECK(&nccl_library() == &lib);  // cached
    } catch (const UnsupportedError& e) {
        SY_CHECK(contains(e.what(), "libnccl.so.2"));
        std::printf("  NCCL not available (allowed): %s\n", e.what());
    }
}

SY_TEST(Nccl, CandidatesIncludeToolkitDirectory) {
    const auto candidates = nccl::library_candidates();
    SY_CHECK_EQ(candidates.front(), std::string("libnccl.so.2"));
    SY_CHECK(std::find(candidates.begin(), candidates.end(), "/usr/local/cuda/lib64/libnccl.so.2") !=
             candidates.end());
}

SY_TEST(Nccl, OverrideVariable) {
    ::setenv("SWITCHYARD_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    SY_CHECK_THROWS_WITH(nccl::load_library(), UnsupportedError, "/nonexistent/libnccl.so.2");
    const char* toolkit_copy = "/usr/local/cuda/lib64/libnccl.so.2";
    if (::access(toolkit_copy, R_OK) == 0) {
        ::setenv("SWITCHYARD_NCCL_LIBRARY", toolkit_copy, 1);
        const auto lib = nccl::load_library();
        SY_CHECK_EQ(lib.path, std::string(toolkit_copy));
        SY_CHECK(lib.version > 0);
    }
    ::unsetenv("SWITCHYARD_NCCL_LIBRARY");
}

SY_TEST(Nccl, WrapRejectsBadArguments) {
    SY_CHECK_THROWS_WITH(wrap_nccl_communicator(nullptr, 0), InvalidArgument, "null ncclComm_t");
    int dummy = 0;
    SY_CHECK_THROWS_WITH(wrap_nccl_communicator(&dummy, -1), InvalidArgument, "device -1");
}

SY_TEST(Nccl, SingleRankAllGatherOnGpu) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess)
        SY_SKIP(std::string("no usable GPU: cudaGetDeviceCount: ") + cudaGetErrorString(status));
    if (devices == 0) SY_SKIP("no GPU: cudaGetDeviceCount returned 0");
    const NcclLibrary* lib = nullptr;
    try {
        lib = &nccl_library();
    } catch (const UnsupportedError& e) {
        SY_SKIP(std::string("NCCL not available: ") + e.what());
    }
    nccl::Comm comm = nullptr;
    const int device = 0;
    SY_CHECK_EQ(lib->comm_init_all(&comm, 1, &device), nccl::kSuccess);
    {
        auto wrapped = wrap_nccl_communicator(comm, device);
        SY_CHECK_EQ(wrapped->size(), 1);
        SY_CHECK_EQ(wrapped->rank(), 0);
        SY_CHECK_EQ(wrapped->all_gather_value<uint64_t>(0x1234567890ull, 10s)[0], 0x1234567890ull);
        std::vector<char> big(1 << 16, 'z'), out(1 << 16);
        wrapped->all_gather(big.data(), big.size(), out.data(), 10s);
        SY_CHECK(out == big);
        wrapped->barrier(10s);
    }
    lib->comm_destroy(comm);
}

SY_TEST_MAIN()
