// The routing kernel (Buffer::get_dispatch_layout) against the CPU: counts, token-in-rank mask,
// slots (prefix sums in token order) and per-expert positions, for int32 and int64 ids, both of its
// counting paths (per-warp histogram or warps taking turns), T in {0, 1, odd, T_max}, `-1` slots,
// all tokens to one expert, and invalid ids caught on the GPU.
#include <cstdio>
#include <random>

#include "common/gpu_harness.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard;
using namespace switchyard::testing;

namespace {

struct ExpectedLayout {
    std::vector<int32_t> per_rank, per_expert, slot, position;
    std::vector<uint8_t> in_rank;
};

// The layout written out plainly: a token's slot at rank q counts the earlier tokens that also
// go to q; a (t, k)'s position counts the earlier (t', k') naming the same expert.
ExpectedLayout expected_layout(const std::vector<int64_t>& idx, int tokens, int topk, int experts,
                               int ranks) {
    const int local = experts / ranks;
    ExpectedLayout e;
    e.per_rank.assign(ranks, 0);
    e.per_expert.assign(experts, 0);
    e.slot.assign(size_t(tokens) * ranks, -1);
    e.in_rank.assign(size_t(tokens) * ranks, 0);
    e.position.assign(size_t(tokens) * topk, -1);
    for (int t = 0; t < tokens; ++t) {
        for (int k = 0; k < topk; ++k) {
            const int64_t expert = idx[size_t(t) * topk + k];
            if (expert < 0) continue;
            e.position[size_t(t) * topk + k] = e.per_expert[expert]++;
            const int rank = int(expert / local);
            if (!e.in_rank[size_t(t) * ranks + rank]) {
                e.in_rank[size_t(t) * ranks + rank] = 1;
                e.slot[size_t(t) * ranks + rank] = e.per_rank[rank]++;
            }
        }
    }
    return e;
}

std::vector<int64_t> random_routing(std::mt19937& rng, int tokens, int topk, int experts, bool one_expert) {
    std::vector<int64_t> idx(size_t(tokens) * topk, -1);
    for (int t = 0; t < tokens; ++t) {
        std::vector<int> chosen;
        for (int k = 0; k < topk; ++k) {
            if (one_expert) {
                idx[size_t(t) * topk + k] = k == 0 ? experts - 1 : -1;
                continue;
            }
            if (rng() % 7 == 0) continue;  // an empty slot
            int expert;
            do expert = int(rng() % experts);
            while (std::find(chosen.begin(), chosen.end(), expert) != chosen.end() &&
                   int(chosen.size()) < experts);
            chosen.push_back(expert);
            idx[size_t(t) * topk + k] = expert;
        }
    }
    return idx;
}

template <typename Index>
void run_case(Buffer& buffer, cudaStream_t stream, const std::vector<int64_t>& idx, int tokens, int topk,
              int experts) {
    const int ranks = buffer.num_ranks();
    std::vector<Index> narrow(idx.begin(), idx.end());
    DeviceArray<Index> d_idx(std::max<size_t>(narrow.size(), 1));
    d_idx.upload(narrow);
    DeviceArray<int32_t> per_rank(ranks), per_expert(experts), slot(std::max(1, tokens * ranks)),
        position(std::max(1, tokens * topk));
    DeviceArray<uint8_t> in_rank(std::max(1, tokens * ranks));
    slot.fill_bytes(0x55);  // poison: every entry must be written
    position.fill_bytes(0x55);
    in_rank.fill_bytes(0x55);
    const DType index_type = sizeof(Index) == 8 ? DType::kInt64 : DType::kInt32;
    DispatchLayoutViews out;
    const Device device = Device::cuda(buffer.device());
    out.num_tokens_per_rank = TensorView::contiguous(per_rank.data(), DType::kInt32, {ranks}, device);
    out.num_tokens_per_expert = TensorView::contiguous(per_expert.data(), DType::kInt32, {experts}, device);
    out.token_rank_slot = TensorView::contiguous(slot.data(), DType::kInt32, {tokens, ranks}, device);
    out.token_in_rank = TensorView::contiguous(in_rank.data(), DType::kUInt8, {tokens, ranks}, device);
    out.token_expert_pos = TensorView::contiguous(position.data(), DType::kInt32, {tokens, topk}, device);
    buffer.get_dispatch_layout(TensorView::contiguous(d_idx.data(), index_type, {tokens, topk}, device),
                               experts, out, stream);
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
    buffer.check_errors();
    const ExpectedLayout e = expected_layout(idx, tokens, topk, experts, ranks);
    SY_CHECK(per_rank.download() == e.per_rank);
    SY_CHECK(per_expert.download() == e.per_expert);
    if (tokens > 0) {
        SY_CHECK(slot.download() == e.slot);
        SY_CHECK(in_rank.download() == e.in_rank);
        SY_CHECK(position.download() == e.position);
    }
}

BufferConfig layout_config() {
    BufferConfig config;
    config.max_tokens_per_rank = 1024;
    config.max_hidden = 128;
    config.max_topk = 9;
    config.max_experts = 512;
    config.timeout_seconds = 20;
    return config;
}

}  // namespace

SY_TEST(Layout, MatchesCpuAllConfigs) {
    require_gpus(1);
    for (const RankConfig& rc : standard_rank_configs()) {
        std::printf("  %s\n", rc.name().c_str());
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            Buffer buffer(env.communicator, env.device, layout_config());
            std::mt19937 rng(1234 + env.rank);
            for (int tokens : {0, 1, 7, 333, 1024}) {
                for (int topk : {1, 4, 8, 9}) {
                    for (int experts : {rc.ranks * 2, 64, 256}) {
                        if (experts % rc.ranks) continue;
                        const auto idx = random_routing(rng, tokens, topk, experts, false);
                        if ((tokens + topk) % 2)
                            run_case<int64_t>(buffer, env.stream, idx, tokens, topk, experts);
                        else
                            run_case<int32_t>(buffer, env.stream, idx, tokens, topk, experts);
                    }
                }
            }
            // All tokens to one expert.
            run_case<int64_t>(buffer, env.stream, random_routing(rng, 1024, 8, 64, true), 1024, 8, 64);
        });
    }
}

SY_TEST(Layout, CountsAgreeWithReference) {
    require_gpus(1);
    // The reference's rank-major rows per source must equal the layout's per-rank counts.
    run_ranks(4, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, layout_config());
        reference::Problem problem;
        problem.num_ranks = 4;
        problem.num_experts = 32;
        problem.hidden = 128;
        problem.topk = 6;
        problem.max_tokens_per_rank = 200;
        std::vector<reference::DispatchInput> inputs(4);
        for (int s = 0; s < 4; ++s) {
            std::mt19937 rng(77 + s);
            inputs[s].num_tokens = 150 + s;
            inputs[s].x_bf16.assign(size_t(inputs[s].num_tokens) * 128, 0x3f80);
            inputs[s].topk_idx = random_routing(rng, inputs[s].num_tokens, 6, 32, false);
        }
        const auto result = reference::dispatch(problem, inputs, {});
        run_case<int64_t>(buffer, env.stream, inputs[env.rank].topk_idx, inputs[env.rank].num_tokens, 6, 32);
        const ExpectedLayout e =
            expected_layout(inputs[env.rank].topk_idx, inputs[env.rank].num_tokens, 6, 32, 4);
        for (int q = 0; q < 4; ++q)
            SY_CHECK_EQ(result.outputs[q].num_rows_per_source[env.rank], e.per_rank[q]);
    });
}

// More chunks than the kernel's grid (a block takes several chunks in turn: 37 chunks at top-9
// and 4,096 tokens against EP8's 16-SM budget on one GPU), and more experts than fit the per-warp
// counts in shared memory (warps take turns instead). Routing changes between calls, so a stale
// chunk flag or epoch would show as a wrong slot.
SY_TEST(Layout, ManyChunksAndManyExperts) {
    require_gpus(1);
    for (const RankConfig rc : {RankConfig{2, 1}, RankConfig{8, 1}}) {
        std::printf("  %s\n", rc.name().c_str());
        run_ranks(rc.ranks, rc.gpus, [&](RankEnv& env) {
            BufferConfig config = layout_config();
            config.max_tokens_per_rank = 4096;
            config.max_experts = 2048;
            config.enable_low_latency = false;
            Buffer buffer(env.communicator, env.device, config);
            std::mt19937 rng(99 + env.rank);
            for (int round = 0; round < 3; ++round) {
                run_case<int32_t>(buffer, env.stream, random_routing(rng, 4096, 9, 64, false), 4096, 9, 64);
                run_case<int64_t>(buffer, env.stream, random_routing(rng, 4096, 8, 2048, false), 4096, 8,
                                  2048);
                run_case<int32_t>(buffer, env.stream, random_routing(rng, 333, 9, 2048, false), 333, 9, 2048);
            }
        });
    }
}

SY_TEST(Layout, InvalidExpertIdCaughtOnGpu) {
    require_gpus(1);
    run_ranks(2, 1, [&](RankEnv& env) {
        Buffer buffer(env.communicator, env.device, layout_config());
        std::vector<int64_t> idx = {0, 1, 2, 3, 64, 5};  // E = 64: id 64 at token 2, slot 0
        bool thrown = false;
        try {
            run_case<int64_t>(buffer, env.stream, idx, 3, 2, 64);
        } catch (const InvalidArgument& error) {
            thrown = true;
            SY_CHECK(std::string(error.what()).find("topk_idx[2][0] = 64 is outside [-1, 64)") !=
                     std::string::npos);
        }
        SY_CHECK(thrown);
        buffer.reset();
        run_case<int64_t>(buffer, env.stream, {0, 1, 2, 3, 63, 5}, 3, 2, 64);
    });
}

SY_TEST_MAIN()
