// A dispatch and combine round trip through Switchyard's public API.
//
// On the CPU: the reference implementation moves the tokens of two ranks to the ranks owning
// their top-2 experts and combines them back; the rank-major combine of untouched rows is each
// token times the number of ranks it reached. With a GPU: the same round trip on one rank through
// a Buffer (dispatch, combine, compared with the reference bit for bit). Without a GPU that part
// is skipped with a message.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <set>
#include <vector>

#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/reference.hpp"
#include "switchyard/version.hpp"

namespace ref = switchyard::reference;

namespace {

ref::DispatchInput random_input(int tokens, int hidden, int topk, int experts, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> value(0.0f, 1.0f);
    ref::DispatchInput input;
    input.num_tokens = tokens;
    input.payload = ref::Payload::kBF16;
    for (int i = 0; i < tokens * hidden; ++i) input.x_bf16.push_back(ref::float_to_bf16(value(rng)));
    for (int t = 0; t < tokens; ++t) {
        std::set<int64_t> chosen;
        while (int(chosen.size()) < topk) chosen.insert(int64_t(rng() % uint32_t(experts)));
        input.topk_idx.insert(input.topk_idx.end(), chosen.begin(), chosen.end());
    }
    return input;
}

// Rank-major combine of the dispatch's own rows: token t comes back as x[t] * (ranks it reached).
int64_t count_round_trip_mismatches(const ref::Problem& problem, const std::vector<ref::DispatchInput>& inputs,
                                    const std::vector<ref::CombineOutput>& outputs) {
    int64_t mismatches = 0;
    for (int s = 0; s < problem.num_ranks; ++s) {
        for (int t = 0; t < inputs[s].num_tokens; ++t) {
            std::set<int64_t> ranks;
            for (int k = 0; k < problem.topk; ++k) {
                const int64_t e = inputs[s].topk_idx[size_t(t) * problem.topk + k];
                if (e >= 0) ranks.insert(e / problem.local_experts());
            }
            for (int h = 0; h < problem.hidden; ++h) {
                const size_t i = size_t(t) * problem.hidden + h;
                const float x = ref::bf16_to_float(inputs[s].x_bf16[i]);
                mismatches += outputs[s].out[i] != ref::float_to_bf16(x * float(ranks.size()));
            }
        }
    }
    return mismatches;
}

int cpu_round_trip() {
    ref::Problem problem;
    problem.num_ranks = 2;
    problem.num_experts = 8;
    problem.hidden = 256;
    problem.topk = 2;
    problem.max_tokens_per_rank = 16;
    std::vector<ref::DispatchInput> inputs;
    for (int s = 0; s < problem.num_ranks; ++s) inputs.push_back(random_input(16, 256, 2, 8, 1234u + s));

    const ref::GlobalDispatch dispatched = ref::dispatch(problem, inputs, ref::DispatchOptions{});
    std::vector<ref::CombineInput> rows(problem.num_ranks);
    for (int q = 0; q < problem.num_ranks; ++q) rows[q].y = dispatched.outputs[q].x_bf16;
    const auto combined = ref::combine(dispatched.routing, rows,
                                       std::vector<ref::CombineHomeInput>(problem.num_ranks), {});
    const int64_t mismatches = count_round_trip_mismatches(problem, inputs, combined);
    std::printf("CPU reference: 2 ranks, 8 experts, top-2: rank 0 receives %lld rows, rank 1 %lld; "
                "round trip %s\n",
                static_cast<long long>(dispatched.outputs[0].num_rows),
                static_cast<long long>(dispatched.outputs[1].num_rows), mismatches ? "MISMATCH" : "exact");
    return mismatches ? 1 : 0;
}

int gpu_round_trip() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("GPU round trip: skipped (no GPU on this machine)\n");
        return 0;
    }
    ref::Problem problem;
    problem.num_ranks = 1;
    problem.num_experts = 8;
    problem.hidden = 512;
    problem.topk = 2;
    problem.max_tokens_per_rank = 64;
    const ref::DispatchInput input = random_input(64, 512, 2, 8, 99u);

    switchyard::BufferConfig config;
    config.max_tokens_per_rank = 64;
    config.max_hidden = 512;
    config.max_topk = 2;
    config.max_experts = 8;
    switchyard::Buffer buffer(switchyard::make_in_process_communicators(1)[0], 0, config);

    void *x = nullptr, *idx = nullptr;
    cudaMalloc(&x, input.x_bf16.size() * 2);
    cudaMalloc(&idx, input.topk_idx.size() * 8);
    cudaMemcpy(x, input.x_bf16.data(), input.x_bf16.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(idx, input.topk_idx.data(), input.topk_idx.size() * 8, cudaMemcpyHostToDevice);
    const auto device = switchyard::Device::cuda(0);
    switchyard::DispatchArgs args;
    args.x = switchyard::TensorView::contiguous(x, switchyard::DType::kBFloat16, {64, 512}, device);
    args.topk_idx = switchyard::TensorView::contiguous(idx, switchyard::DType::kInt64, {64, 2}, device);
    args.num_experts = 8;
    const cudaStream_t stream = nullptr;
    const switchyard::DispatchResult dispatched = buffer.dispatch(args, stream);
    switchyard::CombineArgs combine;
    combine.y = dispatched.recv_x.view();
    const switchyard::CombineResult combined = buffer.combine(combine, dispatched.handle, stream);
    std::vector<uint16_t> out(input.x_bf16.size());
    cudaStreamSynchronize(stream);
    cudaMemcpy(out.data(), combined.out.view().ptr(), out.size() * 2, cudaMemcpyDeviceToHost);
    buffer.synchronize();

    const ref::GlobalDispatch expected_rows = ref::dispatch(problem, {input}, ref::DispatchOptions{});
    const auto expected = ref::combine(expected_rows.routing, {{expected_rows.outputs[0].x_bf16, {}}},
                                       std::vector<ref::CombineHomeInput>(1), {});
    int64_t mismatches = 0;
    for (size_t i = 0; i < out.size(); ++i) mismatches += out[i] != expected[0].out[i];
    std::printf("GPU round trip on one rank: %lld rows dispatched, combine %s the reference\n",
                static_cast<long long>(dispatched.host_num_recv_rows), mismatches ? "DIFFERS FROM" : "matches");
    cudaFree(x);
    cudaFree(idx);
    return mismatches ? 1 : 0;
}

}  // namespace

int main() {
    std::printf("Switchyard %s\n", switchyard::kVersionString);
    try {
        const int cpu = cpu_round_trip();
        const int gpu = gpu_round_trip();
        return cpu || gpu;
    } catch (const switchyard::Error& error) {
        std::fprintf(stderr, "switchyard error: %s\n", error.what());
        return 1;
    }
}
