// The planning API (switchyard/planning.hpp) without a GPU: the bytes of a BufferConfig by region
// (the documented formulas), the shapes of every HT and LL output for given arguments against what
// the CPU reference says the ops produce (its rows per layout, host-synced and worst case), and the
// argument checks. tests/gpu/test_planning.cpp checks the same shapes against real ops.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/ops.hpp"
#include "switchyard/planning.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard;
namespace ref = switchyard::reference;

namespace {

int64_t align_up(int64_t value, int64_t alignment) {
    return (value + alignment - 1) / alignment * alignment;
}

BufferConfig ht_config(int max_tokens, int hidden, int topk, int experts) {
    BufferConfig config;
    config.max_tokens_per_rank = max_tokens;
    config.max_hidden = hidden;
    config.max_topk = topk;
    config.max_experts = experts;
    return config;
}

// Random routing for every rank of `problem` (distinct experts per token, some slots empty, the
// last rank without tokens), with bf16 payloads: enough for the reference's layouts.
std::vector<ref::DispatchInput> random_inputs(const ref::Problem& p, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<ref::DispatchInput> inputs(p.num_ranks);
    std::vector<int64_t> experts(p.num_experts);
    for (int e = 0; e < p.num_experts; ++e) experts[e] = e;
    for (int s = 0; s < p.num_ranks; ++s) {
        ref::DispatchInput& in = inputs[s];
        in.num_tokens = s == p.num_ranks - 1 && p.num_ranks > 1 ? 0 : int(rng() % (p.max_tokens_per_rank + 1));
        in.x_bf16.assign(size_t(in.num_tokens) * p.hidden, 0x3f80);
        for (int t = 0; t < in.num_tokens; ++t) {
            std::shuffle(experts.begin(), experts.end(), rng);
            for (int k = 0; k < p.topk; ++k) in.topk_idx.push_back(rng() % 5 == 0 ? -1 : experts[k]);
        }
        in.topk_weights.assign(in.topk_idx.size(), 0.5f);
    }
    return inputs;
}

HtDispatchShape ht_shape(const ref::Problem& p, int tokens, RecvLayout layout, CountMode counts,
                         int alignment = 1) {
    HtDispatchShape shape;
    shape.num_tokens = tokens;
    shape.hidden = p.hidden;
    shape.topk = p.topk;
    shape.num_experts = p.num_experts;
    shape.has_weights = true;
    shape.layout = layout;
    shape.expert_alignment = alignment;
    shape.counts = counts;
    return shape;
}

void check_spec(const TensorSpec& spec, DType dtype, std::initializer_list<int64_t> shape, const char* what) {
    SY_CHECK_MSG(spec.defined(), what << " is not defined");
    SY_CHECK_MSG(spec.dtype == dtype, what << ": dtype " << dtype_name(spec.dtype));
    SY_CHECK_MSG(spec.ndim == int(shape.size()), what << ": ndim " << spec.ndim);
    int d = 0;
    for (int64_t extent : shape) {
        SY_CHECK_MSG(spec.shape[d] == extent, what << ": extent " << d << " is " << spec.shape[d] << ", want "
                                                   << extent);
        ++d;
    }
}

}  // namespace

SY_TEST(Planning, BufferSizesFollowTheFormulas) {
    // HT DeepSeek-V3 shape at EP8 and the LL one; regions as buffer_layout.cuh documents them.
    BufferConfig config = ht_config(4096, 7168, 8, 256);
    config.enable_low_latency = true;
    for (int ranks : {1, 2, 8}) {
        const BufferSizes sizes = buffer_sizes(config, ranks);
        // fp8 records are smaller than bf16 ones: the region takes the larger (bf16 + metadata).
        const int64_t bf16_record = align_up(7168 * 2, 32) + align_up(4 * (2 + 3 * 8), 32);
        SY_CHECK_EQ(sizes.ht_dispatch, int64_t(ranks) * 4096 * bf16_record);
        SY_CHECK(sizes.ht_combine >= int64_t(8) * 4096 * 7168 * 2);
        SY_CHECK(sizes.low_latency > 0 && sizes.ll_zero_copy == 0);
        SY_CHECK_EQ(sizes.symmetric % (2 << 20), int64_t(0));
        SY_CHECK(sizes.symmetric >= sizes.workspace + sizes.ht_dispatch + sizes.ht_combine + sizes.low_latency);
        SY_CHECK(sizes.symmetric <
                 sizes.workspace + sizes.ht_dispatch + sizes.ht_combine + sizes.low_latency + 4 * 4096 + (2 << 20));
        SY_CHECK_EQ(int64_t(buffer_bytes(config, ranks)), sizes.symmetric);
        SY_CHECK(sizes.output_pool_reserve > 0 && sizes.output_pool_reserve <= (int64_t(1) << 30));
        SY_CHECK(sizes.routing_scratch > 0);
        SY_CHECK_EQ(sizes.total, sizes.symmetric + sizes.output_pool_reserve + sizes.routing_scratch);
        std::printf("  EP%d: symmetric %.1f MiB, output pool %.1f MiB, routing scratch %lld bytes\n", ranks,
                    sizes.symmetric / 1048576.0, sizes.output_pool_reserve / 1048576.0,
                    (long long)sizes.routing_scratch);
    }
    // LL only: no HT region and no routing scratch beyond its minimum; zero-copy adds L*R*T_ll*H*2.
    BufferConfig ll = config;
    ll.enable_high_throughput = false;
    ll.ll_zero_copy_combine = true;
    const BufferSizes sizes = buffer_sizes(ll, 8);
    SY_CHECK_EQ(sizes.ht_dispatch, int64_t(0));
    SY_CHECK_EQ(sizes.ht_combine, int64_t(0));
    SY_CHECK_EQ(sizes.ll_zero_copy, int64_t(32) * 8 * 128 * 7168 * 2);
    ll.ll_zero_copy_combine = false;
    SY_CHECK(buffer_sizes(ll, 8).symmetric <= int64_t(64) << 20);  // DESIGN.md §9: LL EP8 <= 64 MiB
}

SY_TEST(Planning, BufferSizesRejectBadConfigs) {
    BufferConfig config = ht_config(0, 7168, 8, 256);
    SY_CHECK_THROWS_WITH(buffer_sizes(config, 2), InvalidArgument, "max_tokens_per_rank");
    SY_CHECK_THROWS_WITH(buffer_sizes(ht_config(16, 128, 2, 8), 0), InvalidArgument, "num_ranks must be >= 1");
}

// Rows of every HT layout, host-synced (the exact count the op returns) and worst case (what a
// device-count op allocates), against the reference's outputs on random routings.
SY_TEST(Planning, HtOutputRowsMatchTheReference) {
    for (int ranks : {1, 2, 4}) {
        const ref::Problem p{ranks, 4 * ranks, 256, 3, 37};
        const BufferConfig config = ht_config(p.max_tokens_per_rank, p.hidden, p.topk, p.num_experts);
        const auto inputs = random_inputs(p, 7 + ranks);
        for (RecvLayout layout : {RecvLayout::kRankMajor, RecvLayout::kExpertContiguous, RecvLayout::kExpertMasked}) {
            const int alignment = layout == RecvLayout::kExpertContiguous ? 8 : 1;
            ref::DispatchOptions options;
            options.layout = layout;
            options.expert_alignment = alignment;
            const ref::GlobalDispatch expected = ref::dispatch(p, inputs, options);
            for (int q = 0; q < ranks; ++q) {
                const ref::DispatchOutput& out = expected.outputs[q];
                const int tokens = inputs[q].num_tokens;
                const HtOutputShapes worst =
                    ht_output_shapes(config, ranks, ht_shape(p, tokens, layout, CountMode::kDevice, alignment));
                SY_CHECK(worst.num_recv_rows >= out.num_rows);
                const HtOutputShapes exact = ht_output_shapes(
                    config, ranks, ht_shape(p, tokens, layout, CountMode::kHostSynced, alignment), out.num_rows);
                SY_CHECK_EQ(exact.num_recv_rows, out.num_rows);
                SY_CHECK(exact.exact);
                const int64_t L = p.local_experts(), H = p.hidden, K = p.topk;
                const int64_t rows = out.num_rows;
                SY_CHECK_EQ(int64_t(out.x_bf16.size()), rows * H);
                if (layout == RecvLayout::kRankMajor) {
                    check_spec(exact.recv_x, DType::kBFloat16, {rows, H}, "recv_x");
                    check_spec(exact.recv_topk_idx, DType::kInt32, {rows, K}, "recv_topk_idx");
                    check_spec(exact.recv_topk_weights, DType::kFloat32, {rows, K}, "recv_topk_weights");
                    check_spec(exact.combine_y, DType::kBFloat16, {rows, H}, "combine_y");
                    check_spec(exact.combine_row_weights, DType::kFloat32, {rows, K}, "row_weights");
                    SY_CHECK_EQ(worst.num_recv_rows, int64_t(ranks) * p.max_tokens_per_rank);
                    SY_CHECK(exact.recv_x.strides[0] > H);  // one record per row
                } else if (layout == RecvLayout::kExpertContiguous) {
                    SY_CHECK_EQ(rows, out.expert_offsets.back());
                    check_spec(exact.recv_x, DType::kBFloat16, {std::max<int64_t>(rows, 1), H}, "recv_x");
                    check_spec(exact.combine_y, DType::kBFloat16, {rows, H}, "combine_y");
                    SY_CHECK(!exact.recv_topk_idx.defined());
                    SY_CHECK_EQ(worst.num_recv_rows,
                                int64_t(ranks) * p.max_tokens_per_rank * std::min<int64_t>(K, L) + L * (alignment - 1));
                } else {
                    const int64_t per_expert = int64_t(ranks) * p.max_tokens_per_rank;
                    SY_CHECK_EQ(rows, L * per_expert);
                    SY_CHECK_EQ(worst.num_recv_rows, rows);
                    SY_CHECK(worst.exact);
                    check_spec(worst.recv_x, DType::kBFloat16, {L, per_expert, H}, "recv_x");
                    check_spec(worst.combine_y, DType::kBFloat16, {L, per_expert, H}, "combine_y");
                    check_spec(worst.recv_topk_weights, DType::kFloat32, {rows}, "recv_topk_weights");
                }
                check_spec(exact.num_recv_tokens_per_expert, DType::kInt32, {L}, "num_recv_tokens_per_expert");
                check_spec(exact.num_recv_rows_tensor, DType::kInt32, {1}, "num_recv_rows");
                check_spec(exact.combine_out, DType::kBFloat16, {tokens, H}, "combine_out");
                check_spec(exact.combined_topk_weights, DType::kFloat32, {tokens, K}, "combined_topk_weights");
            }
        }
    }
}

// FP8 payloads: records carry scales; their dtype and column count follow the format.
SY_TEST(Planning, HtFp8Scales) {
    const ref::Problem p{2, 8, 1024, 4, 16};
    const BufferConfig config = ht_config(16, 1024, 4, 8);
    HtDispatchShape shape = ht_shape(p, 16, RecvLayout::kRankMajor, CountMode::kDevice);
    shape.quantize_fp8 = true;
    shape.quantize_format = ScaleFormat::kUE8M0;
    HtOutputShapes out = ht_output_shapes(config, 2, shape);
    check_spec(out.recv_x, DType::kFloat8E4M3, {32, 1024}, "recv_x");
    check_spec(out.recv_scales, DType::kInt32, {32, 2}, "recv_scales");
    shape.quantize_fp8 = false;
    shape.x_dtype = DType::kFloat8E4M3;
    shape.x_scales = ScaleFormat::kFloat32;
    shape.layout = RecvLayout::kExpertMasked;
    out = ht_output_shapes(config, 2, shape);
    check_spec(out.recv_scales, DType::kFloat32, {4, 32, 8}, "recv_scales");
    SY_CHECK(out.recv_x.span_bytes() == 4 * 32 * 1024);
    // The shape of a call, read from its tensors' extents only.
    DispatchArgs args;
    args.x = TensorView::contiguous(nullptr, DType::kFloat8E4M3, {16, 1024});
    args.x_scales = TensorView::contiguous(nullptr, DType::kInt32, {16, 2});
    args.topk_idx = TensorView::contiguous(nullptr, DType::kInt64, {16, 4});
    args.num_experts = 8;
    args.layout = RecvLayout::kExpertContiguous;
    args.expert_alignment = 4;
    const HtDispatchShape of = HtDispatchShape::of(args);
    SY_CHECK(of.num_tokens == 16 && of.hidden == 1024 && of.topk == 4 && of.num_experts == 8);
    SY_CHECK(of.x_scales == ScaleFormat::kUE8M0 && !of.has_weights && of.expert_alignment == 4);
}

SY_TEST(Planning, HtRejectsWhatTheOpWould) {
    const ref::Problem p{2, 8, 256, 2, 16};
    const BufferConfig config = ht_config(16, 256, 2, 8);
    HtDispatchShape shape = ht_shape(p, 17, RecvLayout::kRankMajor, CountMode::kDevice);
    SY_CHECK_THROWS_WITH(ht_output_shapes(config, 2, shape), InvalidArgument, "num_tokens 17");
    shape.num_tokens = 16;
    shape.num_experts = 7;
    SY_CHECK_THROWS_WITH(ht_output_shapes(config, 2, shape), InvalidArgument, "multiple of the number of ranks");
    shape.num_experts = 8;
    shape.expert_alignment = 4;
    SY_CHECK_THROWS_WITH(ht_output_shapes(config, 2, shape), InvalidArgument, "contiguous layout only");
    shape.expert_alignment = 1;
    SY_CHECK_THROWS_WITH(ht_output_shapes(config, 2, shape, 5), InvalidArgument, "host-synced");
    shape.counts = CountMode::kHostSynced;
    SY_CHECK_THROWS_WITH(ht_output_shapes(config, 2, shape, 33), InvalidArgument, "exceeds the worst case");
    BufferConfig ll_only = config;
    ll_only.enable_high_throughput = false;
    ll_only.enable_low_latency = true;
    SY_CHECK_THROWS_WITH(ht_output_shapes(ll_only, 2, shape), InvalidArgument, "enable_high_throughput");
}

// LL outputs: masked [L, R*T_ll, H] (the reference's masked rows) and the contiguous capacity,
// which holds the reference's rows with padding for every routing.
SY_TEST(Planning, LlOutputShapesMatchTheReference) {
    for (int ranks : {1, 2, 8}) {
        const ref::Problem p{ranks, ranks <= 2 ? 4 : 2 * ranks, 512, 4, 9};
        BufferConfig config = ht_config(64, 512, 4, p.num_experts);
        config.enable_low_latency = true;
        config.ll_max_tokens_per_rank = 9;
        const auto inputs = random_inputs(p, 31 + ranks);
        const int64_t L = p.local_experts(), per_expert = int64_t(ranks) * 9;
        LlDispatchShape shape;
        shape.hidden = p.hidden;
        shape.topk = p.topk;
        shape.num_experts = p.num_experts;
        ref::DispatchOptions masked;
        masked.layout = RecvLayout::kExpertMasked;
        const ref::GlobalDispatch expected = ref::dispatch(p, inputs, masked);
        for (int q = 0; q < ranks; ++q) {
            shape.num_tokens = inputs[q].num_tokens;
            const LlOutputShapes out = ll_output_shapes(config, ranks, shape);
            SY_CHECK_EQ(out.num_recv_rows, expected.outputs[q].num_rows);
            check_spec(out.recv_x, DType::kFloat8E4M3, {L, per_expert, 512}, "recv_x");
            check_spec(out.recv_scales, DType::kFloat32, {L, per_expert, 4}, "recv_scales");
            SY_CHECK(out.recv_scales.strides[1] == 1 && out.recv_scales.strides[2] == per_expert);
            check_spec(out.recv_count, DType::kInt32, {L}, "recv_count");
            check_spec(out.recv_expert_offsets, DType::kInt32, {L + 1}, "recv_expert_offsets");
            check_spec(out.combine_y, DType::kBFloat16, {L, per_expert, 512}, "combine_y");
            check_spec(out.combine_out, DType::kBFloat16, {shape.num_tokens, 512}, "combine_out");
        }
        ref::DispatchOptions contiguous;
        contiguous.layout = RecvLayout::kExpertContiguous;
        contiguous.expert_alignment = 16;
        const ref::GlobalDispatch packed = ref::dispatch(p, inputs, contiguous);
        shape.layout = RecvLayout::kExpertContiguous;
        shape.expert_alignment = 16;
        shape.use_fp8 = true;
        shape.scale_format = ScaleFormat::kUE8M0;
        const LlOutputShapes out = ll_output_shapes(config, ranks, shape);
        for (int q = 0; q < ranks; ++q) SY_CHECK(out.num_recv_rows >= packed.outputs[q].num_rows);
        SY_CHECK_EQ(out.num_recv_rows, per_expert * std::min<int64_t>(4, L) + L * 15);
        check_spec(out.recv_scales, DType::kInt32, {out.num_recv_rows, 1}, "recv_scales");
        SY_CHECK(out.recv_scales.strides[0] == 1 && out.recv_scales.strides[1] == out.num_recv_rows);
        check_spec(out.combine_y, DType::kBFloat16, {out.num_recv_rows, 512}, "combine_y");
    }
    BufferConfig config = ht_config(64, 512, 4, 8);
    config.enable_low_latency = true;
    config.ll_max_tokens_per_rank = 9;
    LlDispatchShape shape;
    shape.num_tokens = 10, shape.hidden = 512, shape.topk = 4, shape.num_experts = 8;
    SY_CHECK_THROWS_WITH(ll_output_shapes(config, 2, shape), InvalidArgument, "num_tokens 10");
    shape.num_tokens = 9;
    shape.expert_alignment = 2;
    SY_CHECK_THROWS_WITH(ll_output_shapes(config, 2, shape), InvalidArgument, "contiguous layout only");
    shape.expert_alignment = 1;
    shape.use_fp8 = false;
    SY_CHECK(!ll_output_shapes(config, 2, shape).recv_scales.defined());
    SY_CHECK(ll_output_shapes(config, 2, shape).recv_x.dtype == DType::kBFloat16);
}

SY_TEST_MAIN()
