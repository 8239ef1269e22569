// Argument validation: bad inputs get an InvalidArgument whose message says what to fix.
#include <vector>

#include "common/testing.hpp"
#include "core/ll_handle.hpp"
#include "core/validation.hpp"
#include "switchyard/errors.hpp"

using namespace switchyard;
using core::validate_combine;
using core::validate_dispatch;

namespace {

struct Fixture {
    static constexpr int kTokens = 4, kHidden = 256, kTopk = 2;
    alignas(64) std::vector<uint16_t> x = std::vector<uint16_t>(kTokens * kHidden, 0x3f80);
    std::vector<uint8_t> x8 = std::vector<uint8_t>(kTokens * kHidden + 64, 0);
    std::vector<float> scales = std::vector<float>(kTokens * 2, 1.0f);
    std::vector<int32_t> scales_ue8m0 = std::vector<int32_t>(kTokens * 1, 0x7f7f7f7f);
    std::vector<int64_t> idx = {0, 5, 1, -1, 7, 2, -1, -1};
    std::vector<int32_t> idx32 = {0, 5, 1, -1, 7, 2, -1, -1};
    std::vector<float> weights = std::vector<float>(kTokens * kTopk, 0.5f);

    core::ValidationContext context() const {
        core::ValidationContext c;
        c.num_ranks = 2;
        c.max_tokens_per_rank = 8;
        c.max_hidden = 7168;
        c.max_topk = 8;
        c.max_experts = 256;
        c.device = Device::cpu();
        return c;
    }

    DispatchArgs args() {
        DispatchArgs a;
        a.x = TensorView::contiguous(x.data(), DType::kBFloat16, {kTokens, kHidden});
        a.topk_idx = TensorView::contiguous(idx.data(), DType::kInt64, {kTokens, kTopk});
        a.topk_weights = TensorView::contiguous(weights.data(), DType::kFloat32, {kTokens, kTopk});
        a.num_experts = 8;
        return a;
    }
};

void expect_invalid(const DispatchArgs& args, const core::ValidationContext& context, const char* needle) {
    SY_CHECK_THROWS_WITH(validate_dispatch(args, context), InvalidArgument, needle);
}

}  // namespace

SY_TEST(Validation, GoodDispatchPasses) {
    Fixture f;
    validate_dispatch(f.args(), f.context());
    DispatchArgs a = f.args();
    a.topk_idx = TensorView::contiguous(f.idx32.data(), DType::kInt32, {Fixture::kTokens, Fixture::kTopk});
    validate_dispatch(a, f.context());
    a.x = TensorView::contiguous(f.x8.data(), DType::kFloat8E4M3, {Fixture::kTokens, Fixture::kHidden});
    a.x_scales = TensorView::contiguous(f.scales.data(), DType::kFloat32, {Fixture::kTokens, 2});
    validate_dispatch(a, f.context());
    a.x_scales = TensorView::contiguous(f.scales_ue8m0.data(), DType::kInt32, {Fixture::kTokens, 1});
    validate_dispatch(a, f.context());
}

SY_TEST(Validation, WrongDtype) {
    Fixture f;
    DispatchArgs a = f.args();
    a.x.dtype = DType::kFloat32;
    expect_invalid(a, f.context(), "x must be bf16 or fp8_e4m3, got fp32");
    a = f.args();
    a.topk_idx.dtype = DType::kFloat32;
    expect_invalid(a, f.context(), "topk_idx must be int32 or int64");
    a = f.args();
    a.topk_weights.dtype = DType::kBFloat16;
    expect_invalid(a, f.context(), "topk_weights must be fp32");
}

SY_TEST(Validation, MisalignedHiddenSize) {
    Fixture f;
    DispatchArgs a = f.args();
    a.x = TensorView::contiguous(f.x.data(), DType::kBFloat16, {Fixture::kTokens, 100});  // 200 bytes
    expect_invalid(a, f.context(), "multiple of 16 bytes");
    a = f.args();
    a.x = TensorView::strided(f.x.data(), DType::kBFloat16, {2, 64}, {100, 1});  // stride 200 bytes
    a.topk_idx.shape[0] = 2;
    a.topk_weights.shape[0] = 2;
    expect_invalid(a, f.context(), "row stride must be a multiple of 16");
    a = f.args();
    a.x.data = reinterpret_cast<char*>(f.x.data()) + 2;
    expect_invalid(a, f.context(), "16-byte aligned");
}

SY_TEST(Validation, TooManyTokens) {
    Fixture f;
    core::ValidationContext context = f.context();
    context.max_tokens_per_rank = 3;
    expect_invalid(f.args(), context, "more than the buffer's max_tokens_per_rank (3)");
}

// Expert ids are checked on the GPU: a topk_idx that is not device memory of the buffer's GPU is
// rejected by every op before anything else reads it (here: the label; on a GPU also the pointer).
SY_TEST(Validation, HostTopkIdxIsRejected) {
    Fixture f;
    const DispatchArgs a = f.args();  // host memory, labelled cpu
    SY_CHECK_THROWS_WITH(core::require_device_resident(a.topk_idx, "topk_idx", 0), InvalidArgument,
                         "topk_idx must be in device memory on the buffer's GPU (cuda:0)");
    TensorView other = a.topk_idx;
    other.device = Device::cuda(1);
    SY_CHECK_THROWS_WITH(core::require_device_resident(other, "topk_idx", 0), InvalidArgument,
                         "got int64[4, 2]");
    core::require_device_resident(TensorView{}, "topk_idx", 0);  // an optional tensor not given
}

SY_TEST(Validation, ExpertsNotDivisibleByRanks) {
    Fixture f;
    DispatchArgs a = f.args();
    a.num_experts = 7;
    expect_invalid(a, f.context(), "must be a multiple of the number of ranks (2)");
    a.num_experts = 512;
    expect_invalid(a, f.context(), "exceeds the buffer's max_experts (256)");
}

SY_TEST(Validation, ScalesMustMatchPayload) {
    Fixture f;
    DispatchArgs a = f.args();
    a.x = TensorView::contiguous(f.x8.data(), DType::kFloat8E4M3, {Fixture::kTokens, Fixture::kHidden});
    expect_invalid(a, f.context(), "an fp8 x needs x_scales");
    a.x_scales = TensorView::contiguous(f.scales.data(), DType::kFloat32, {Fixture::kTokens, 1});
    expect_invalid(a, f.context(), "x_scales must have 2 columns for hidden 256");
    a = f.args();
    a.x_scales = TensorView::contiguous(f.scales.data(), DType::kFloat32, {Fixture::kTokens, 2});
    expect_invalid(a, f.context(), "x_scales given for a bf16 x");
}

SY_TEST(Validation, TopkShapeAndLimits) {
    Fixture f;
    DispatchArgs a = f.args();
    a.topk_idx.shape[0] = 3;
    expect_invalid(a, f.context(), "topk_idx must have 4 rows");
    core::ValidationContext context = f.context();
    context.max_topk = 1;
    expect_invalid(f.args(), context, "top-k must be between 1 and the buffer's max_topk (1)");
    a = f.args();
    a.topk_weights.shape[1] = 3;
    expect_invalid(a, f.context(), "topk_weights must have the shape of topk_idx");
}

SY_TEST(Validation, LayoutOptions) {
    Fixture f;
    DispatchArgs a = f.args();
    a.expert_alignment = 128;
    expect_invalid(a, f.context(), "expert-major contiguous layout only");
    a.layout = RecvLayout::kExpertContiguous;
    validate_dispatch(a, f.context());
    a.expert_alignment = 0;
    expect_invalid(a, f.context(), "expert_alignment must be >= 1");
    a = f.args();
    a.quantize_fp8 = true;
    a.quantize_format = ScaleFormat::kNone;
    expect_invalid(a, f.context(), "quantize_format");
}

// The LL dispatch's layout options: zero_padding (like expert_alignment) needs the contiguous layout.
SY_TEST(Validation, LowLatencyLayoutOptions) {
    LowLatencyDispatchArgs a;
    core::validate_ll_layout(a);  // masked, alignment 1
    a.zero_padding = true;
    SY_CHECK_THROWS_WITH(core::validate_ll_layout(a), InvalidArgument,
                         "zero_padding applies to the expert-major contiguous layout only");
    a.layout = RecvLayout::kExpertContiguous;
    a.expert_alignment = 128;
    core::validate_ll_layout(a);
    a.zero_padding = false;
    core::validate_ll_layout(a);
    a.expert_alignment = 2048;
    SY_CHECK_THROWS_WITH(core::validate_ll_layout(a), InvalidArgument,
                         "expert_alignment must be in [1, 1024]");
    a = LowLatencyDispatchArgs{};
    a.expert_alignment = 16;
    SY_CHECK_THROWS_WITH(core::validate_ll_layout(a), InvalidArgument,
                         "expert_alignment applies to the expert-major contiguous layout only");
    a = LowLatencyDispatchArgs{};
    a.layout = RecvLayout::kRankMajor;
    SY_CHECK_THROWS_WITH(core::validate_ll_layout(a), InvalidArgument, "kExpertMasked or kExpertContiguous");
}

namespace {

// The LL dispatch: the same helpers as HT, against the LL token capacity; masked layout.
struct LlFixture : Fixture {
    std::vector<int32_t> stats = std::vector<int32_t>(4, 0);  // [L] with E = 8, R = 2
    std::vector<int64_t> waits = std::vector<int64_t>(2, 0);  // [R]

    LowLatencyDispatchArgs ll_args() {
        LowLatencyDispatchArgs a;
        a.x = TensorView::contiguous(x.data(), DType::kBFloat16, {kTokens, kHidden});
        a.topk_idx = TensorView::contiguous(idx.data(), DType::kInt64, {kTokens, kTopk});
        a.topk_weights = TensorView::contiguous(weights.data(), DType::kFloat32, {kTokens, kTopk});
        a.cumulative_local_expert_recv_stats = TensorView::contiguous(stats.data(), DType::kInt32, {4});
        a.wait_time_stats = TensorView::contiguous(waits.data(), DType::kInt64, {2});
        a.num_experts = 8;
        return a;
    }
};

void expect_invalid_ll(const LowLatencyDispatchArgs& args, const core::ValidationContext& context,
                       const char* needle) {
    SY_CHECK_THROWS_WITH(core::validate_ll_dispatch(args, context), InvalidArgument, needle);
}

}  // namespace

SY_TEST(Validation, LowLatencyDispatch) {
    LlFixture f;
    core::validate_ll_dispatch(f.ll_args(), f.context());
    LowLatencyDispatchArgs a = f.ll_args();
    a.topk_idx = TensorView::contiguous(f.idx32.data(), DType::kInt32, {Fixture::kTokens, Fixture::kTopk});
    a.topk_weights = TensorView{};
    a.use_fp8 = false;
    core::validate_ll_dispatch(a, f.context());
    core::ValidationContext context = f.context();
    context.max_tokens_per_rank = 3;
    expect_invalid_ll(f.ll_args(), context, "more than the buffer's ll_max_tokens_per_rank (3)");
    a = f.ll_args();
    a.x.dtype = DType::kFloat32;
    expect_invalid_ll(a, f.context(), "x must be bf16, got fp32");
    a = f.ll_args();
    a.x = TensorView::contiguous(f.x.data(), DType::kBFloat16, {Fixture::kTokens, 120});
    expect_invalid_ll(a, f.context(), "hidden size 120 must be a positive multiple of 16");
    a = f.ll_args();
    a.x = TensorView::strided(f.x.data(), DType::kBFloat16, {Fixture::kTokens, 64}, {100, 1});
    expect_invalid_ll(a, f.context(), "x row stride must be a multiple of 16 bytes");
    a = f.ll_args();
    a.topk_idx = TensorView{};
    expect_invalid_ll(a, f.context(), "topk_idx is required");
    context = f.context();
    context.max_topk = 1;
    expect_invalid_ll(f.ll_args(), context, "top-k must be between 1 and the buffer's max_topk (1)");
    a = f.ll_args();
    a.num_experts = 7;
    expect_invalid_ll(a, f.context(), "must be a multiple of the number of ranks (2)");
    a = f.ll_args();
    a.scale_format = ScaleFormat::kNone;
    expect_invalid_ll(a, f.context(), "use_fp8 needs scale_format kFloat32 or kUE8M0");
    a = f.ll_args();
    a.topk_weights.dtype = DType::kBFloat16;
    expect_invalid_ll(a, f.context(), "topk_weights must be fp32");
    a.topk_weights = TensorView::contiguous(f.weights.data(), DType::kFloat32, {Fixture::kTokens, 1});
    expect_invalid_ll(a, f.context(), "topk_weights must have the shape of topk_idx");
    a = f.ll_args();
    a.cumulative_local_expert_recv_stats.shape[0] = 8;
    expect_invalid_ll(a, f.context(), "cumulative_local_expert_recv_stats must have shape [4]");
    a = f.ll_args();
    a.wait_time_stats.dtype = DType::kInt32;
    expect_invalid_ll(a, f.context(), "wait_time_stats must be int64");
    a = f.ll_args();
    a.zero_padding = true;
    expect_invalid_ll(a, f.context(), "zero_padding applies to the expert-major contiguous layout only");
    context = f.context();
    context.device = Device::cuda(0);
    expect_invalid_ll(f.ll_args(), context, "x must be on the buffer's device (cuda:0)");
}

// The LL combine, checked against the handle of the dispatch it answers (E = 8, R = 2, T_ll = 8).
SY_TEST(Validation, LowLatencyCombine) {
    LlFixture f;
    LowLatencyHandle handle;
    handle.num_tokens = Fixture::kTokens, handle.hidden = Fixture::kHidden, handle.topk = Fixture::kTopk;
    handle.num_experts = 8, handle.num_ranks = 2, handle.local_experts = 4, handle.max_tokens = 8;
    handle.has_weights = true;
    const int64_t rows = handle.rows_per_expert();
    std::vector<uint16_t> y(size_t(4 * rows * Fixture::kHidden)),
        out(size_t(Fixture::kTokens * Fixture::kHidden));
    LowLatencyCombineArgs args;
    args.y = TensorView::contiguous(y.data(), DType::kBFloat16, {4, rows, Fixture::kHidden});
    args.topk_idx = TensorView::contiguous(f.idx.data(), DType::kInt64, {Fixture::kTokens, Fixture::kTopk});
    args.topk_weights =
        TensorView::contiguous(f.weights.data(), DType::kFloat32, {Fixture::kTokens, Fixture::kTopk});
    args.out = TensorView::contiguous(out.data(), DType::kBFloat16, {Fixture::kTokens, Fixture::kHidden});
    const core::ValidationContext context = f.context();
    core::validate_ll_combine(args, &handle, context);
    auto expect = [&](const LowLatencyCombineArgs& a, const LowLatencyHandle* h, const char* needle) {
        SY_CHECK_THROWS_WITH(core::validate_ll_combine(a, h, context), InvalidArgument, needle);
    };
    expect(args, nullptr, "needs the handle of the LL dispatch it answers");
    LowLatencyHandle other = handle;
    other.num_ranks = 4;
    expect(args, &other, "different rank count");
    LowLatencyCombineArgs a = args;
    a.y.shape[1] = rows - 1;
    expect(a, &handle, "y must have shape [4, 16, 256]");
    // A masked y may also come flattened, as the HT combine takes it; the kernel reads it as 3-D.
    a = args;
    a.y = TensorView::contiguous(y.data(), DType::kBFloat16, {4 * rows, Fixture::kHidden});
    core::validate_ll_combine(a, &handle, context);
    handle.layout = RecvLayout::kExpertMasked;
    const TensorView as_3d = core::ll_combine_y_view(a.y, handle);
    SY_CHECK(as_3d.ndim == 3 && as_3d.shape[0] == 4 && as_3d.shape[1] == rows &&
             as_3d.shape[2] == Fixture::kHidden);
    SY_CHECK(as_3d.strides[0] == rows * Fixture::kHidden && as_3d.strides[1] == Fixture::kHidden);
    SY_CHECK(core::ll_combine_y_view(args.y, handle).ndim == 3);
    a.y.shape[0] = 4 * rows - 1;
    expect(a, &handle, "y must have shape [64, 256]");
    a.y = TensorView::contiguous(y.data(), DType::kBFloat16, {4 * rows * Fixture::kHidden});
    expect(a, &handle, "y must be 3-D");
    a = args;
    a.topk_weights = TensorView{};
    expect(a, &handle, "topk_weights is required");
    a = args;
    a.out.shape[0] = 3;
    expect(a, &handle, "out must have shape [4, 256]");
    a = args;
    a.zero_copy = true;
    expect(a, &handle, "needs BufferConfig::ll_zero_copy_combine = true");
    a = args;
    a.hierarchical = true;
    expect(a, &handle, "leave the combine's topk_weights empty");
    a.topk_weights = TensorView{};
    core::validate_ll_combine(a, &handle, context);
    other = handle;
    other.has_weights = false;
    expect(a, &other, "pass topk_weights to ll_dispatch");
    // Contiguous y: the dispatch's capacity rows.
    other = handle;
    other.layout = RecvLayout::kExpertContiguous;
    other.contiguous_rows = 24;
    a = args;
    a.y = TensorView::contiguous(y.data(), DType::kBFloat16, {24, Fixture::kHidden});
    core::validate_ll_combine(a, &other, context);
    a.y.shape[0] = 23;
    expect(a, &other, "y must have shape [24, 256]");
}

SY_TEST(Validation, LowLatencyBufferCalls) {
    LlFixture f;
    BufferConfig config;
    config.enable_low_latency = false;
    SY_CHECK_THROWS_WITH(core::validate_low_latency(config, "ll_dispatch"), InvalidArgument,
                         "ll_dispatch needs a buffer created with BufferConfig::enable_low_latency = true");
    LowLatencyHandle handle;
    handle.num_ranks = 2;
    core::ValidationContext context = f.context();
    SY_CHECK_THROWS_WITH(core::validate_ll_combine_input(handle, true, context), InvalidArgument,
                         "ll_zero_copy_combine = true");
    context.ll_zero_copy_combine = true;
    core::validate_ll_combine_input(handle, true, context);
    SY_CHECK_THROWS_WITH(core::validate_ll_combine_input(handle, false, context), InvalidArgument,
                         "ll_zero_copy_combine = true");
    handle.layout = RecvLayout::kExpertContiguous;
    SY_CHECK_THROWS_WITH(core::validate_ll_combine_input(handle, true, context), InvalidArgument,
                         "needs a dispatch in the masked layout");
    core::validate_mask_rank("ll_set_mask", 1, context.num_ranks);
    SY_CHECK_THROWS_WITH(core::validate_mask_rank("ll_set_mask", 2, context.num_ranks), InvalidArgument,
                         "ll_set_mask: rank 2 is outside [0, 2)");
    SY_CHECK_THROWS_WITH(core::validate_mask_rank("ht_set_mask", 1, 2, 1), InvalidArgument,
                         "ht_set_mask: rank 1 is this buffer's own rank");
    BufferConfig ht_config;
    SY_CHECK_THROWS_WITH(core::validate_ht_masking(ht_config, "ht_set_mask"), InvalidArgument,
                         "ht_mask_unresponsive_ranks = true");
    ht_config.ht_mask_unresponsive_ranks = true;
    core::validate_ht_masking(ht_config, "ht_set_mask");
}

SY_TEST(Validation, WrongDevice) {
    Fixture f;
    core::ValidationContext context = f.context();
    context.device = Device::cuda(0);
    expect_invalid(f.args(), context, "x must be on the buffer's device (cuda:0)");
}

SY_TEST(Validation, Combine) {
    Fixture f;
    std::vector<uint16_t> y(6 * 256), bias(4 * 256);
    core::CombineShape shape{RecvLayout::kRankMajor, 6, 4, 256, 2};
    CombineArgs args;
    args.y = TensorView::contiguous(y.data(), DType::kBFloat16, {6, 256});
    validate_combine(args, shape, f.context());
    args.weighted = true;
    SY_CHECK_THROWS_WITH(validate_combine(args, shape, f.context()), InvalidArgument, "unweighted sum");
    args.weighted = false;
    args.y = TensorView::contiguous(y.data(), DType::kBFloat16, {5, 256});
    SY_CHECK_THROWS_WITH(validate_combine(args, shape, f.context()), InvalidArgument, "[6, 256]");
    args.y = TensorView::contiguous(y.data(), DType::kBFloat16, {6, 256});
    args.bias1 = TensorView::contiguous(bias.data(), DType::kBFloat16, {4, 256});
    SY_CHECK_THROWS_WITH(validate_combine(args, shape, f.context()), InvalidArgument,
                         "bias1 given without bias0");
    args.bias0 = TensorView::contiguous(bias.data(), DType::kBFloat16, {3, 256});
    SY_CHECK_THROWS_WITH(validate_combine(args, shape, f.context()), InvalidArgument, "bias0 must be [T, H]");
}

SY_TEST(Validation, Config) {
    BufferConfig config;
    core::validate_config(config);
    config.max_topk = 0;
    SY_CHECK_THROWS_WITH(core::validate_config(config), InvalidArgument, "max_topk");
    config = BufferConfig{};
    config.struct_size = 8;
    SY_CHECK_THROWS_WITH(core::validate_config(config), InvalidArgument, "unknown size or version");
    config = BufferConfig{};
    config.timeout_seconds = 0;
    SY_CHECK_THROWS_WITH(core::validate_config(config), InvalidArgument, "timeout_seconds");
}

SY_TEST_MAIN()
