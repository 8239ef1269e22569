// Argument validation: bad inputs get an InvalidArgument whose message says what to fix.
#include <vector>

#include "common/testing.hpp"
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

SY_TEST(Validation, ExpertIdOutOfRange) {
    Fixture f;
    f.idx[5] = 8;  // E = 8: valid ids are -1..7
    expect_invalid(f.args(), f.context(), "topk_idx[2][1] = 8 is outside [-1, 8)");
    f.idx[5] = -2;
    expect_invalid(f.args(), f.context(), "topk_idx[2][1] = -2");
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
