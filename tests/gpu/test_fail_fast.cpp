// Errors reach every rank at once, and say what they are:
//  - an expert id out of range on one rank (HT, both count modes; LL): that rank raises
//    InvalidArgument naming token, slot and id, every other rank a PeerFailedError naming it, all
//    in well under a second with the default 100 s timeout (the failure travels through the
//    exchange the peers already wait on); the next op refuses with PoisonedError quoting it; after
//    reset() a round trip is correct;
//  - topk_idx that is not device memory of the buffer's GPU (pageable, pinned, labelled cpu) is an
//    InvalidArgument at every entry point, get_dispatch_layout included;
//  - Buffer calls leave the caller's current device as they found it (2 GPUs).
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/gpu_harness.hpp"
#include "round_trip_support.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/planning.hpp"

using namespace switchyard;
using namespace switchyard::testing;
using namespace switchyard::testing::round_trip;

namespace {

constexpr auto kHostTimeout = std::chrono::seconds(60);
constexpr int kBadRank = 2, kBadToken = 5, kBadSlot = 2;

// Once for the process (the ranks are its threads), on every GPU, before any op: with ranks sharing
// a GPU, a kernel loaded at a first op could wait for a peer's kernel that waits for this rank.
void load_kernels(const Shape& shape) {
    HtDispatchShape ht;
    ht.hidden = shape.hidden, ht.topk = shape.topk, ht.num_experts = shape.experts;
    LlDispatchShape ll;
    ll.hidden = shape.hidden, ll.topk = shape.topk, ll.num_experts = shape.experts, ll.use_fp8 = false;
    for (int device = 0; device < cuda_device_count(); ++device) {
        for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertMasked}) {
            ht.layout = layout;
            ht_load_kernels(device, ht);
        }
        ll_load_kernels(device, ll);
    }
}

// What one rank saw of the failed op, and how long it took to see it.
struct Outcome {
    std::string kind = "no error", message;
    int peer = -2;
    double seconds = 0;
};

template <typename Op>
Outcome run_failing(Op&& op) {
    Outcome outcome;
    const auto start = std::chrono::steady_clock::now();
    try {
        op();
    } catch (const InvalidArgument& error) {
        outcome.kind = "InvalidArgument", outcome.message = error.what();
    } catch (const PeerFailedError& error) {
        outcome.kind = "PeerFailedError", outcome.message = error.what(), outcome.peer = error.peer();
    } catch (const TimeoutError& error) {
        outcome.kind = "TimeoutError", outcome.message = error.what(), outcome.peer = error.peer();
    } catch (const Error& error) {
        outcome.kind = "Error", outcome.message = error.what();
    }
    outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return outcome;
}

void check_outcome(const Outcome& outcome, int rank, int64_t bad_id, const std::string& what) {
    SY_CHECK_MSG(outcome.seconds < 1.0, what << ": rank " << rank << " raised after " << outcome.seconds
                                             << " s (timeout 100 s): " << outcome.message);
    if (rank == kBadRank) {
        const std::string entry = "topk_idx[" + std::to_string(kBadToken) + "][" + std::to_string(kBadSlot) +
                                  "] = " + std::to_string(bad_id) + " is outside";
        SY_CHECK_MSG(outcome.kind == "InvalidArgument" && outcome.message.find(entry) != std::string::npos,
                     what << ": rank " << rank << ": " << outcome.kind << ": " << outcome.message);
    } else {
        SY_CHECK_MSG(outcome.kind == "PeerFailedError" && outcome.peer == kBadRank,
                     what << ": rank " << rank << ": " << outcome.kind << " (peer " << outcome.peer
                          << "): " << outcome.message);
        SY_CHECK_MSG(outcome.message.find("rank " + std::to_string(kBadRank) + " failed") != std::string::npos,
                     outcome.message);
    }
}

// The next op on the poisoned buffer refuses to start, quoting the failure.
void check_poisoned(Buffer& buffer, RankEnv& env, const DispatchArgs& args) {
    bool refused = false;
    try {
        buffer.dispatch(args, env.stream);
    } catch (const PoisonedError& error) {
        refused = true;
        SY_CHECK_MSG(std::string(error.what()).find("poisoned") != std::string::npos, error.what());
        if (env.rank == kBadRank)
            SY_CHECK_THROWS(std::rethrow_exception(error.cause()), InvalidArgument);
        else
            SY_CHECK_THROWS(std::rethrow_exception(error.cause()), PeerFailedError);
    }
    SY_CHECK_MSG(refused, "rank " << env.rank << ": an op on a poisoned buffer started");
}

void invalid_id_on_one_rank_ht(int ranks, int gpus, CountMode counts) {
    Shape shape;
    shape.seed = 11;
    load_kernels(shape);
    const auto inputs = make_inputs(shape, ranks);
    const int64_t bad_id = shape.experts + 3;
    const std::string what = "EP" + std::to_string(ranks) + " on " + std::to_string(gpus) + " GPU(s), " +
                             (counts == CountMode::kDevice ? "device counts" : "host-synced counts");
    run_ranks(ranks, gpus, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, config_for(shape, 100.0));
        ref::DispatchInput mine = inputs[env.rank];
        if (env.rank == kBadRank) mine.topk_idx[size_t(kBadToken) * shape.topk + kBadSlot] = bad_id;
        DeviceInputs device(mine, shape, env.device);
        env.communicator->barrier(kHostTimeout);  // allocations before any rank's op
        const DispatchArgs args = device.ht_args(shape.experts, counts);
        const Outcome outcome = run_failing([&] {
            buffer.dispatch(args, env.stream);  // host-synced: throws here
            buffer.synchronize();
        });
        check_outcome(outcome, env.rank, bad_id, "HT " + what);
        check_poisoned(buffer, env, args);
        env.communicator->barrier(kHostTimeout);
        buffer.reset();
        ht_round_trip(buffer, env, shape, "HT after reset, " + what);
        if (env.rank == 0)
            std::printf("  HT %s: InvalidArgument on rank %d, PeerFailedError naming it on the others (< 1 s), "
                        "PoisonedError next, correct after reset\n",
                        what.c_str(), kBadRank);
    });
}

}  // namespace

SY_TEST(FailFast, InvalidIdReachesEveryRankHtDeviceCounts) {
    require_gpus(1);
    invalid_id_on_one_rank_ht(4, 1, CountMode::kDevice);
    if (cuda_device_count() >= 2) invalid_id_on_one_rank_ht(4, 2, CountMode::kDevice);
}

SY_TEST(FailFast, InvalidIdReachesEveryRankHtHostSynced) {
    require_gpus(1);
    invalid_id_on_one_rank_ht(4, 1, CountMode::kHostSynced);
    invalid_id_on_one_rank_ht(3, 1, CountMode::kHostSynced);
}

SY_TEST(FailFast, InvalidIdReachesEveryRankLl) {
    require_gpus(1);
    Shape shape;
    shape.seed = 12;
    load_kernels(shape);
    const int ranks = 4;
    const auto inputs = make_inputs(shape, ranks);
    const int64_t bad_id = -7;
    run_ranks(ranks, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, config_for(shape, 100.0));
        ref::DispatchInput mine = inputs[env.rank];
        if (env.rank == kBadRank) mine.topk_idx[size_t(kBadToken) * shape.topk + kBadSlot] = bad_id;
        DeviceInputs device(mine, shape, env.device);
        env.communicator->barrier(kHostTimeout);
        const Outcome outcome = run_failing([&] {
            buffer.ll_dispatch(device.ll_args(shape.experts), env.stream);
            buffer.synchronize();
        });
        check_outcome(outcome, env.rank, bad_id, "LL EP4");
        SY_CHECK_THROWS(buffer.ll_dispatch(device.ll_args(shape.experts), env.stream), PoisonedError);
        env.communicator->barrier(kHostTimeout);
        buffer.reset();
        ll_round_trip(buffer, env, shape, "LL after reset");
        if (env.rank == 0)
            std::printf("  LL EP4: InvalidArgument on rank %d, PeerFailedError naming it on the others (< 1 s), "
                        "correct after reset\n",
                        kBadRank);
    });
}

// Host memory (pageable or pinned, even labelled cuda:0) and a cpu-labelled topk_idx: refused by
// get_dispatch_layout, dispatch, ll_dispatch and ll_combine before any kernel runs.
SY_TEST(FailFast, HostTopkIdxRejectedByEveryEntryPoint) {
    require_gpus(1);
    Shape shape;
    load_kernels(shape);
    run_ranks(1, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, config_for(shape, 10.0));
        const auto inputs = make_inputs(shape, 1);
        DeviceInputs device(inputs[0], shape, env.device);
        std::vector<int64_t> pageable(inputs[0].topk_idx);
        PinnedBuffer<int64_t> pinned(pageable.size());
        std::copy(pageable.begin(), pageable.end(), pinned.data());
        const int64_t T = device.tokens, K = shape.topk;
        struct Bad {
            TensorView idx;
            const char* says;
        };
        const Bad bad[] = {
            {TensorView::contiguous(pageable.data(), DType::kInt64, {T, K}, Device::cuda(env.device)),
             "pageable host memory"},
            {TensorView::contiguous(pinned.data(), DType::kInt64, {T, K}, Device::cuda(env.device)),
             "pinned host memory"},
            {TensorView::contiguous(pageable.data(), DType::kInt64, {T, K}), "topk_idx must be"},
        };
        DeviceArray<int32_t> per_rank(1), per_expert(shape.experts), slot(T);
        DispatchLayoutViews layout;
        layout.num_tokens_per_rank = TensorView::contiguous(per_rank.data(), DType::kInt32, {1}, Device::cuda(env.device));
        layout.num_tokens_per_expert =
            TensorView::contiguous(per_expert.data(), DType::kInt32, {shape.experts}, Device::cuda(env.device));
        layout.token_rank_slot = TensorView::contiguous(slot.data(), DType::kInt32, {T, 1}, Device::cuda(env.device));
        // A valid LL dispatch, whose combine gets the bad ids below.
        LowLatencyDispatchResult dispatched = buffer.ll_dispatch(device.ll_args(shape.experts), env.stream);
        for (const Bad& b : bad) {
            SY_CHECK_THROWS_WITH(buffer.get_dispatch_layout(b.idx, shape.experts, layout, env.stream),
                                 InvalidArgument, b.says);
            DispatchArgs ht = device.ht_args(shape.experts);
            ht.topk_idx = b.idx;
            SY_CHECK_THROWS_WITH(buffer.dispatch(ht, env.stream), InvalidArgument, b.says);
            LowLatencyDispatchArgs ll = device.ll_args(shape.experts);
            ll.topk_idx = b.idx;
            SY_CHECK_THROWS_WITH(buffer.ll_dispatch(ll, env.stream), InvalidArgument, b.says);
            LowLatencyCombineArgs combine;
            combine.y = dispatched.recv_x.view();
            combine.topk_idx = b.idx;
            combine.topk_weights = device.weights_view();
            SY_CHECK_THROWS_WITH(buffer.ll_combine(combine, dispatched.handle, env.stream), InvalidArgument, b.says);
        }
        buffer.synchronize();
        buffer.check_errors();  // nothing ran with the bad ids: nothing recorded
        buffer.get_dispatch_layout(device.idx_view(), shape.experts, layout, env.stream);
        buffer.synchronize();
    });
}

// Every Buffer call restores the caller's current device: the caller sits on GPU 1, the buffer
// lives on GPU 0.
SY_TEST(FailFast, BufferRestoresCurrentDevice) {
    require_gpus(2);
    Shape shape;
    load_kernels(shape);
    auto communicator = make_in_process_communicators(1)[0];
    SY_CUDA_CHECK(cudaSetDevice(1));
    auto current = [] {
        int device = -1;
        SY_CUDA_CHECK(cudaGetDevice(&device));
        return device;
    };
    cudaStream_t stream = nullptr;
    {
        harness::DeviceGuard on_zero(0);
        SY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    {
        Buffer buffer(communicator, 0, config_for(shape, 10.0));
        SY_CHECK_EQ(current(), 1);
        const auto inputs = make_inputs(shape, 1);
        std::unique_ptr<DeviceInputs> device;
        {
            harness::DeviceGuard on_zero(0);
            device = std::make_unique<DeviceInputs>(inputs[0], shape, 0);
        }
        SY_CHECK_EQ(current(), 1);
        DispatchResult dispatched = buffer.dispatch(device->ht_args(shape.experts, CountMode::kHostSynced), stream);
        SY_CHECK_EQ(current(), 1);
        CombineArgs combine;
        combine.y = dispatched.recv_x.view();
        buffer.combine(combine, dispatched.handle, stream);
        SY_CHECK_EQ(current(), 1);
        LowLatencyDispatchResult ll = buffer.ll_dispatch(device->ll_args(shape.experts), stream);
        SY_CHECK_EQ(current(), 1);
        buffer.ll_set_mask(0, false);
        buffer.ll_query_mask();
        buffer.synchronize();
        SY_CHECK_EQ(current(), 1);
        buffer.reset();
        SY_CHECK_EQ(current(), 1);
        harness::DeviceGuard on_zero(0);
        device.reset();
    }
    SY_CHECK_EQ(current(), 1);  // the destructor too
    SY_CUDA_CHECK(cudaSetDevice(0));
    SY_CUDA_CHECK(cudaStreamDestroy(stream));
}

SY_TEST_MAIN()
