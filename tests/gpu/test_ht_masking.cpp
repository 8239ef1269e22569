// HT rank masking (BufferConfig::ht_mask_unresponsive_ranks), EP4 with ranks as threads on one GPU:
//   - rank 3 stops taking part: the others' next dispatch masks it at the counts exchange (after the
//     timeout) and their dispatch and combine equal the reference with rank 3 absent; then, with
//     rank 3 masked, a host-synced dispatch, the expert-major layout with the flat and the
//     hierarchical weighted combines, and a captured CUDA graph (replayed twice, outputs poisoned
//     before each replay) equal it too, without waiting for rank 3;
//   - rank 2 dispatches and then skips the combine: ranks 0 and 1 mask it at the combine's entry
//     and their combine equals the reference with rank 2 absent from the combine;
//   - the mask API: what the ops decided, set and clear, and its errors.
// Masking at the process level (a killed rank) is in test_process_death.cpp.
#include <chrono>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "common/gpu_harness.hpp"
#include "round_trip_support.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/planning.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::round_trip;

namespace {

constexpr int kRanks = 4;
constexpr double kTimeoutSeconds = 1.0;

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int32_t> mask_of(std::initializer_list<int> ranks) {
    std::vector<int32_t> mask(kRanks, 0);
    for (int r : ranks) mask[r] = 1;
    return mask;
}

std::vector<bool> absent_of(std::initializer_list<int> ranks) {
    std::vector<bool> absent(kRanks, false);
    for (int r : ranks) absent[r] = true;
    return absent;
}

// Poisons a tensor's bytes (0xff: a NaN pattern no reference output holds).
void poison(const DeviceTensor& tensor, cudaStream_t stream) {
    const TensorView view = tensor.view();
    SY_CUDA_CHECK(cudaMemsetAsync(view.ptr(), 0xff, size_t(view.numel()) * view.element_size(), stream));
}

// Ranks 0-2 after rank 3 stopped: masking at the dispatch, then a host-synced round trip that
// skips rank 3 without waiting. Returns the round's reference, for the graph replays.
HtRound mask_rank_three(Buffer& buffer, RankEnv& env, const Shape& shape, const DeviceInputs& device) {
    const std::vector<bool> absent = absent_of({3});
    auto start = std::chrono::steady_clock::now();
    HtRound round =
        ht_dispatch_checked(buffer, env, shape, "rank 3 stopped", device, CountMode::kDevice, absent);
    const double masked_after = seconds_since(start);
    SY_CHECK_MSG(masked_after >= kTimeoutSeconds * 0.9,
                 "rank " << env.rank << ": the dispatch went on after " << masked_after << " s");
    ht_combine_checked(buffer, env, shape, "rank 3 stopped", round, absent);
    SY_CHECK(buffer.ht_query_mask() == mask_of({3}));

    start = std::chrono::steady_clock::now();
    round = ht_dispatch_checked(buffer, env, shape, "rank 3 masked, host-synced", device,
                                CountMode::kHostSynced, absent);
    ht_combine_checked(buffer, env, shape, "rank 3 masked, host-synced", round, absent);
    const double skipped_in = seconds_since(start);
    SY_CHECK_MSG(skipped_in < kTimeoutSeconds * 0.5,
                 "rank " << env.rank << ": a round trip with rank 3 masked took " << skipped_in << " s");

    // The expert-major layout: rank 3's slots stay empty in the flat weighted and the hierarchical
    // reductions (the flat one finds them per top-k entry, the hierarchical one per rank).
    for (const HtForm form : {HtForm{RecvLayout::kExpertContiguous, true, false},
                              HtForm{RecvLayout::kExpertContiguous, true, true}}) {
        const std::string what =
            std::string("rank 3 masked, expert-major, ") + (form.hierarchical ? "hierarchical" : "flat");
        const HtRound expert_major =
            ht_dispatch_checked(buffer, env, shape, what, device, CountMode::kDevice, absent, form);
        ht_combine_checked(buffer, env, shape, what, expert_major, absent);
    }
    return round;
}

// A captured dispatch (device counts) and combine of this rank's inputs.
struct CapturedRound {
    DispatchResult dispatched;
    CombineResult combined;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;

    CapturedRound(Buffer& buffer, RankEnv& env, const Shape& shape, const DeviceInputs& device) {
        SY_CUDA_CHECK(cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal));
        dispatched = buffer.dispatch(device.ht_args(shape.experts), env.stream);
        CombineArgs combine;
        combine.y = dispatched.recv_x.view();
        combined = buffer.combine(combine, dispatched.handle, env.stream);
        SY_CUDA_CHECK(cudaStreamEndCapture(env.stream, &graph));
        SY_CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    }
    ~CapturedRound() {
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
    }

    // Poisons the outputs, replays, and checks them against `round` (absent: rank 3).
    void replay_and_check(Buffer& buffer, RankEnv& env, const Shape& shape, const HtRound& round,
                          int replay) {
        poison(dispatched.recv_x, env.stream);
        poison(combined.out, env.stream);
        SY_CUDA_CHECK(cudaGraphLaunch(exec, env.stream));
        SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
        buffer.check_errors();
        const ref::DispatchOutput& mine = round.expected.outputs[env.rank];
        const int64_t row_bytes = int64_t(shape.hidden) * 2;
        const auto rows = download_rows(dispatched.recv_x.view(), mine.num_rows, row_bytes);
        SY_CHECK_MSG(
            std::equal(rows.begin(), rows.end(), reinterpret_cast<const uint8_t*>(mine.x_bf16.data())),
            "rank " << env.rank << ": replay " << replay << ": received rows differ");
        std::vector<ref::CombineInput> y(kRanks);
        for (int q = 0; q < kRanks; ++q) y[q].y = round.expected.outputs[q].x_bf16;
        ref::CombineOptions options;
        options.absent_ranks = absent_of({3});
        const auto want =
            ref::combine(round.expected.routing, y, std::vector<ref::CombineHomeInput>(kRanks), options);
        const auto got = download_rows(combined.out.view(), round.inputs[env.rank].num_tokens, row_bytes);
        SY_CHECK_MSG(
            std::equal(got.begin(), got.end(), reinterpret_cast<const uint8_t*>(want[env.rank].out.data())),
            "rank " << env.rank << ": replay " << replay << ": combine differs");
    }
};

}  // namespace

SY_TEST(HtMasking, Ep4ThreadsMaskAtDispatchAndAtCombine) {
    require_gpus(1);
    Shape shape;
    shape.seed = 5;
    HtDispatchShape ht;
    ht.hidden = shape.hidden, ht.topk = shape.topk, ht.num_experts = shape.experts;
    for (const CountMode counts : {CountMode::kDevice, CountMode::kHostSynced})
        for (const RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous}) {
            ht.counts = counts, ht.layout = layout, ht.has_weights = layout != RecvLayout::kRankMajor;
            ht_load_kernels(0, ht);  // before any op: the ranks share the GPU
        }
    run_ranks(kRanks, 1, [&](RankEnv& env) {
        BufferConfig config = config_for(shape, kTimeoutSeconds);
        config.ht_mask_unresponsive_ranks = true;
        Buffer buffer(env.communicator, env.device, config);
        SY_CHECK(buffer.ht_query_mask() == mask_of({}));
        SY_CHECK_THROWS_WITH(buffer.ht_set_mask(env.rank, true), InvalidArgument, "never itself");
        SY_CHECK_THROWS_WITH(buffer.ht_set_mask(kRanks, true), InvalidArgument, "outside [0, 4)");
        ht_round_trip(buffer, env, shape, "every rank");
        {
            const auto inputs = make_inputs(shape, kRanks);
            const DeviceInputs device(inputs[env.rank], shape, env.device);
            env.communicator->barrier(std::chrono::seconds(60));  // uploads before any rank's op
            // Rank 3 stops taking part in HT ops (it still meets the others on the host).
            std::unique_ptr<CapturedRound> captured;
            HtRound round;
            if (env.rank != 3) {
                round = mask_rank_three(buffer, env, shape, device);
                captured = std::make_unique<CapturedRound>(buffer, env, shape, device);
            }
            // Instantiation may synchronize the device: no rank replays before all are done.
            env.communicator->barrier(std::chrono::seconds(60));
            if (captured)
                for (int replay = 1; replay <= 2; ++replay)
                    captured->replay_and_check(buffer, env, shape, round, replay);
            env.communicator->barrier(std::chrono::seconds(60));  // no graph destroyed during a replay
            captured.reset();
            env.communicator->barrier(std::chrono::seconds(60));
            if (env.rank <= 2) {
                // Rank 2 dispatches, then stops: ranks 0 and 1 mask it at the combine's entry.
                const std::vector<bool> absent = absent_of({3});
                const HtRound last = ht_dispatch_checked(buffer, env, shape, "rank 2 skips the combine",
                                                         device, CountMode::kDevice, absent);
                if (env.rank != 2) {
                    ht_combine_checked(buffer, env, shape, "rank 2 skipped the combine", last,
                                       absent_of({2, 3}));
                    SY_CHECK(buffer.ht_query_mask() == mask_of({2, 3}));
                }
            }
            SY_CUDA_CHECK(cudaStreamSynchronize(env.stream));
            // Device memory is freed after every rank's ops (DESIGN.md §4): rank 2 freeing its inputs
            // while ranks 0 and 1 wait in the combine would hold their launches until the kernels end.
            env.communicator->barrier(std::chrono::seconds(60));
        }
        // The mask API (rank 0's view; the others' masks stay as the ops left them).
        if (env.rank == 0) {
            buffer.ht_set_mask(2, false);
            SY_CHECK(buffer.ht_query_mask() == mask_of({3}));
            buffer.ht_set_mask(1, true);
            SY_CHECK(buffer.ht_query_mask() == mask_of({1, 3}));
            buffer.ht_clear_mask();
            SY_CHECK(buffer.ht_query_mask() == mask_of({}));
        }
        env.communicator->barrier(std::chrono::seconds(60));
        if (env.rank == 0)
            std::printf(
                "  EP4 on one GPU: rank 3 masked at the dispatch, rank 2 at the combine; device and "
                "host-synced counts and graph replays bit-exact with the reference without them\n");
    });
}

SY_TEST(HtMasking, MaskApiNeedsTheConfig) {
    require_gpus(1);
    run_ranks(2, 1, [&](RankEnv& env) {
        Shape shape;
        Buffer buffer(env.communicator, env.device, config_for(shape, kTimeoutSeconds));
        SY_CHECK_THROWS_WITH(buffer.ht_query_mask(), InvalidArgument, "ht_mask_unresponsive_ranks = true");
        SY_CHECK_THROWS_WITH(buffer.ht_set_mask(1 - env.rank, true), InvalidArgument,
                             "ht_mask_unresponsive_ranks = true");
        env.communicator->barrier(std::chrono::seconds(60));
    });
}

SY_TEST_MAIN()
