// Peers that die, and carrying on in the same processes. Ranks are processes on one GPU (the test
// binary starts one child per rank: fork + exec of itself, as test_multiprocess.cpp does); after a
// correct round trip, one rank kills itself (SIGKILL) just before an op:
//   - HT dispatch (EP2, EP4, and EP4 losing rank 0, which hosts the communicator's rendezvous) and
//     HT combine (EP4): every survivor's op ends with a TimeoutError naming the dead rank whose
//     message says its process is gone, within the timeout;
//   - LL dispatch without masking (EP2): the same; with masking (EP4): the survivors mask the dead
//     rank and carry on, bit-exact with the reference without it;
//   - with HT masking (EP4), before an HT dispatch and before an HT combine: the survivors mask the
//     dead rank (at the counts exchange; at the combine's entry) and carry on, bit-exact with the
//     reference without it, and a second round trip skips it.
// Then each survivor destroys its buffer (in well under a second: the communicator sees the dead
// process), forms the survivors' communicator (Communicator::shrink), builds a new buffer on it,
// carries its LL masks over as buffer.hpp documents, and runs a round trip that matches the
// reference over the survivors. The victim's exit by SIGKILL and every survivor's success are
// checked by the parent.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu_harness.hpp"
#include "core/stream_pool.hpp"
#include "round_trip_support.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/planning.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::round_trip;

namespace {

constexpr const char* kChildVariable = "SWITCHYARD_TEST_DEATH_CHILD";
constexpr double kTimeoutSeconds = 4.0;
constexpr auto kHostTimeout = std::chrono::seconds(120);

enum class Point { kHtDispatch = 0, kHtCombine = 1, kLlDispatch = 2 };

struct Scenario {
    Point point = Point::kHtDispatch;
    int ranks = 2;
    int victim = 1;
    bool ll_masking = false;
    bool ht_masking = false;
};

const char* point_name(Point point) {
    switch (point) {
        case Point::kHtDispatch:
            return "an HT dispatch";
        case Point::kHtCombine:
            return "an HT combine";
        case Point::kLlDispatch:
            return "an LL dispatch";
    }
    return "?";
}

void load_kernels(const Shape& shape) {
    HtDispatchShape ht;
    ht.hidden = shape.hidden, ht.topk = shape.topk, ht.num_experts = shape.experts;
    ht_load_kernels(0, ht);
    LlDispatchShape ll;
    ll.hidden = shape.hidden, ll.topk = shape.topk, ll.num_experts = shape.experts, ll.use_fp8 = false;
    ll_load_kernels(0, ll);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A survivor's failed op: a TimeoutError naming the victim, saying its process is gone, within
// the timeout (plus the host's slack).
template <typename Op>
void expect_dead_peer_timeout(Op&& op, int rank, int victim, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    try {
        op();
    } catch (const TimeoutError& error) {
        const std::string text = error.what();
        const double seconds = seconds_since(start);
        std::fprintf(stderr, "  rank %d after %.2f s: %s\n", rank, seconds, text.c_str());
        SY_CHECK_MSG(error.peer() == victim,
                     "rank " << rank << ": " << what << ": names rank " << error.peer());
        SY_CHECK_MSG(text.find("rank " + std::to_string(victim) + "'s process") != std::string::npos &&
                         text.find("is gone") != std::string::npos,
                     "rank " << rank << ": the message does not say the process is gone: " << text);
        SY_CHECK_MSG(seconds < kTimeoutSeconds + 3.0,
                     "rank " << rank << ": raised after " << seconds << " s");
        return;
    }
    SY_CHECK_MSG(false, "rank " << rank << ": " << what << " did not raise TimeoutError");
}

// One rank process. Returns its exit code (the victim does not return).
int run_child(const Scenario& scenario, int rank, const std::string& key) {
    try {
        Shape shape;
        shape.seed = 21;
        const int device = 0;
        SY_CUDA_CHECK(cudaSetDevice(device));
        load_kernels(shape);  // before any op: ranks share the GPU (the parent warmed the disk cache)
        auto communicator = make_local_process_communicator(key, rank, scenario.ranks, kHostTimeout);
        RankEnv env;
        env.rank = rank, env.num_ranks = scenario.ranks, env.num_gpus = 1, env.device = device;
        env.communicator = communicator;
        env.stream = core::acquire_stream(device);
        BufferConfig config = config_for(shape, kTimeoutSeconds);
        config.ll_mask_unresponsive_ranks = scenario.ll_masking;
        config.ht_mask_unresponsive_ranks = scenario.ht_masking;
        auto buffer = std::make_unique<Buffer>(communicator, device, config);
        // The inputs the survivors' LL ops use after the death, uploaded while every rank is alive.
        const auto inputs = make_inputs(shape, scenario.ranks);
        DeviceInputs ll_inputs(inputs[rank], shape, device);
        ht_round_trip(*buffer, env, shape, "before the death");
        ll_round_trip(*buffer, env, shape, "before the death");

        // The victim dies just before the op (for the combine: after every rank's dispatch).
        HtRound dispatched;
        if (scenario.point == Point::kHtCombine)
            dispatched = ht_dispatch_checked(*buffer, env, shape, "the dispatch before the death", ll_inputs);
        communicator->barrier(kHostTimeout);
        if (rank == scenario.victim) ::raise(SIGKILL);
        // Let the process die before the op, so the op's report can already tell.
        const auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (communicator->peer_status(scenario.victim) != PeerStatus::kGone &&
               std::chrono::steady_clock::now() < gone_by)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));

        std::vector<int32_t> mask;
        std::vector<bool> absent(scenario.ranks, false);
        absent[scenario.victim] = true;
        if (scenario.ht_masking) {
            // The survivors mask the dead rank (at the dispatch's counts, or at the combine's entry)
            // and carry on, bit-exact; a second round trip skips it.
            if (scenario.point == Point::kHtCombine)
                ht_combine_checked(*buffer, env, shape, "HT combine masked after the death", dispatched,
                                   absent);
            else
                ht_combine_checked(
                    *buffer, env, shape, "HT masked after the death",
                    ht_dispatch_checked(*buffer, env, shape, "HT dispatch masked after the death", ll_inputs,
                                        CountMode::kDevice, absent),
                    absent);
            const std::vector<int32_t> ht_mask = buffer->ht_query_mask();
            for (int r = 0; r < scenario.ranks; ++r)
                SY_CHECK_MSG(ht_mask[r] == (r == scenario.victim ? 1 : 0),
                             "rank " << rank << ": HT mask of " << r);
            ht_combine_checked(*buffer, env, shape, "HT masked, a second time",
                               ht_dispatch_checked(*buffer, env, shape, "HT masked, a second time", ll_inputs,
                                                   CountMode::kHostSynced, absent),
                               absent);
        } else if (scenario.point == Point::kHtDispatch) {
            expect_dead_peer_timeout(
                [&] {
                    buffer->dispatch(ll_inputs.ht_args(shape.experts), env.stream);
                    buffer->synchronize();
                },
                rank, scenario.victim, "the HT dispatch");
        } else if (scenario.point == Point::kHtCombine) {
            CombineArgs combine;
            combine.y = dispatched.result.recv_x.view();
            expect_dead_peer_timeout(
                [&] {
                    buffer->combine(combine, dispatched.result.handle, env.stream);
                    buffer->synchronize();
                },
                rank, scenario.victim, "the HT combine");
        } else if (!scenario.ll_masking) {
            expect_dead_peer_timeout(
                [&] {
                    buffer->ll_dispatch(ll_inputs.ll_args(shape.experts), env.stream);
                    buffer->synchronize();
                },
                rank, scenario.victim, "the LL dispatch");
        } else {
            // Masking: the survivors carry on without the dead rank, bit-exact.
            ll_round_trip(*buffer, env, shape, "LL masked after the death", absent, &ll_inputs);
            mask = buffer->ll_query_mask();
            for (int r = 0; r < scenario.ranks; ++r)
                SY_CHECK_MSG(mask[r] == (r == scenario.victim ? 1 : 0), "rank " << rank << ": mask of " << r);
            ll_round_trip(*buffer, env, shape, "LL masked, a second time", absent, &ll_inputs);
            // A survivor masked on every rank (no op runs with it): carried over to the new buffer.
            const int masked_survivor = scenario.victim == 0 ? 1 : 0;
            buffer->ll_set_mask(masked_survivor, true);
            mask = buffer->ll_query_mask();
        }

        // Rebuild over the survivors in this process.
        const std::vector<int> gone = communicator->gone_ranks();
        SY_CHECK_MSG(gone == std::vector<int>{scenario.victim},
                     "rank " << rank << ": gone_ranks has " << gone.size() << " ranks");
        dispatched = {};
        const auto destroy_start = std::chrono::steady_clock::now();
        buffer.reset();
        const double destroy_seconds = seconds_since(destroy_start);
        SY_CHECK_MSG(destroy_seconds < 1.0,
                     "rank " << rank << ": destroying the buffer took " << destroy_seconds << " s");
        auto survivors = communicator->shrink(gone, kHostTimeout);
        SY_CHECK_EQ(survivors->rank(), shrunk_rank(rank, gone));
        config.ll_mask_unresponsive_ranks = false;
        config.ht_mask_unresponsive_ranks = false;
        buffer = std::make_unique<Buffer>(survivors, device, config);
        for (int r = 0; r < int(mask.size()); ++r)
            if (mask[r] && shrunk_rank(r, gone) >= 0) buffer->ll_set_mask(shrunk_rank(r, gone), true);
        if (!mask.empty()) {
            std::vector<int32_t> carried(survivors->size(), 0);
            carried[shrunk_rank(scenario.victim == 0 ? 1 : 0, gone)] = 1;
            SY_CHECK_MSG(buffer->ll_query_mask() == carried,
                         "rank " << rank << ": the mask was not carried over");
            buffer->ll_clear_mask();
        }
        RankEnv rebuilt = env;
        rebuilt.rank = survivors->rank(), rebuilt.num_ranks = survivors->size(),
        rebuilt.communicator = survivors;
        ht_round_trip(*buffer, rebuilt, shape, "HT over the survivors");
        ll_round_trip(*buffer, rebuilt, shape, "LL over the survivors");
        buffer.reset();
        core::release_stream(device, env.stream);
        return 0;
    } catch (const TestFailure& failure) {
        std::fprintf(stderr, "rank %d: %s\n", rank, failure.message.c_str());
    } catch (const std::exception& error) {
        std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
    }
    return 1;
}

// Starts the rank processes and waits for them (at most `watchdog`); checks that the victim died
// of SIGKILL and every survivor succeeded.
void run_scenario(const Scenario& scenario) {
    require_gpus(1);
    Shape shape;
    shape.seed = 21;
    load_kernels(shape);  // compiles into the disk cache once, before the children load from it
    const std::string key = "sy-death-" + std::to_string(getpid()) + "-" +
                            std::to_string(int(scenario.point)) + "-" + std::to_string(scenario.ranks) + "-" +
                            std::to_string(scenario.victim);
    std::fflush(stdout);
    std::vector<pid_t> children;
    for (int rank = 0; rank < scenario.ranks; ++rank) {
        const pid_t pid = fork();
        if (pid == 0) {
            const std::string value =
                std::to_string(int(scenario.point)) + ":" + std::to_string(scenario.ranks) + ":" +
                std::to_string(scenario.victim) + ":" +
                std::to_string(int(scenario.ll_masking) | 2 * int(scenario.ht_masking)) + ":" +
                std::to_string(rank) + ":" + key;
            setenv(kChildVariable, value.c_str(), 1);
            char* const argv[] = {const_cast<char*>("/proc/self/exe"), nullptr};
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        children.push_back(pid);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    std::vector<int> status(children.size(), -1);
    for (size_t left = children.size(); left > 0;) {
        for (size_t i = 0; i < children.size(); ++i) {
            if (status[i] != -1) continue;
            int raw = 0;
            if (waitpid(children[i], &raw, WNOHANG) == children[i]) {
                status[i] = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
                --left;
            }
        }
        if (left > 0 && std::chrono::steady_clock::now() > deadline) {
            for (size_t i = 0; i < children.size(); ++i) {
                if (status[i] != -1) continue;
                kill(children[i], SIGKILL);
                waitpid(children[i], nullptr, 0);
                status[i] = 99;  // hung
            }
            left = 0;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int rank = 0; rank < scenario.ranks; ++rank) {
        const int want = rank == scenario.victim ? 128 + SIGKILL : 0;
        SY_CHECK_MSG(status[rank] == want, "rank " << rank << " exited with " << status[rank]
                                                   << " (99: hung), "
                                                   << "expected " << want);
    }
    const bool carried_on =
        scenario.ht_masking || (scenario.point == Point::kLlDispatch && scenario.ll_masking);
    std::printf("  EP%d on one GPU, rank %d killed before %s%s: survivors %s, rebuilt and correct\n",
                scenario.ranks, scenario.victim, point_name(scenario.point),
                scenario.ll_masking   ? " (LL masking)"
                : scenario.ht_masking ? " (HT masking)"
                                      : "",
                carried_on ? "carried on bit-exact" : "raised TimeoutError (process gone)");
}

}  // namespace

SY_TEST(ProcessDeath, HtDispatchEp2) {
    run_scenario({Point::kHtDispatch, 2, 1, false});
}

SY_TEST(ProcessDeath, HtDispatchEp4) {
    run_scenario({Point::kHtDispatch, 4, 3, false});
}

SY_TEST(ProcessDeath, HtDispatchEp4RankZero) {
    run_scenario({Point::kHtDispatch, 4, 0, false});
}

SY_TEST(ProcessDeath, HtCombineEp4) {
    run_scenario({Point::kHtCombine, 4, 2, false});
}

SY_TEST(ProcessDeath, HtDispatchEp4Masked) {
    run_scenario({Point::kHtDispatch, 4, 1, false, true});
}

SY_TEST(ProcessDeath, HtCombineEp4Masked) {
    run_scenario({Point::kHtCombine, 4, 3, false, true});
}

SY_TEST(ProcessDeath, LlDispatchEp2) {
    run_scenario({Point::kLlDispatch, 2, 0, false});
}

SY_TEST(ProcessDeath, LlDispatchEp4Masked) {
    run_scenario({Point::kLlDispatch, 4, 1, true});
}

int main(int argc, char** argv) {
    if (const char* value = std::getenv(kChildVariable)) {
        int point = 0, ranks = 0, victim = 0, masking = 0, rank = 0;
        char key[160] = {};
        if (std::sscanf(value, "%d:%d:%d:%d:%d:%159s", &point, &ranks, &victim, &masking, &rank, key) != 6)
            return 2;
        return run_child({Point(point), ranks, victim, (masking & 1) != 0, (masking & 2) != 0}, rank, key);
    }
    return switchyard::testing::run_all(argc, argv);
}
