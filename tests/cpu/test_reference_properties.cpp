// Properties of the CPU reference on random routings (fixed seeds): round trips, cached dispatch,
// layout equivalences and absent ranks. Expected values are derived from the routing by the test
// itself, independently of the reference's own bookkeeping.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/reference.hpp"

using namespace switchyard::reference;

namespace {

uint16_t bf(float v) {
    return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16);
}  // exact values only

struct Case {
    int ranks, experts, topk, max_tokens, hidden;
    uint32_t seed;
};

// R in {1, 2, 4, 8}, several E, K, T_max and H (including partial 128-channel blocks).
std::vector<Case> cases() {
    return {
        {1, 1, 1, 1, 1, 1}, {1, 4, 2, 6, 130, 2},  {2, 2, 1, 4, 8, 3},     {2, 6, 3, 7, 3, 4},
        {2, 8, 8, 5, 2, 5}, {4, 4, 2, 9, 5, 6},    {4, 12, 4, 16, 130, 7}, {4, 8, 1, 3, 1, 8},
        {8, 8, 4, 8, 4, 9}, {8, 16, 6, 12, 2, 10}, {8, 24, 8, 6, 129, 11}, {8, 64, 8, 33, 3, 12},
    };
}

Problem problem_of(const Case& c) {
    return Problem{c.ranks, c.experts, c.hidden, c.topk, c.max_tokens};
}

// Random inputs: rank 0 has T_max tokens, the last rank (if R > 1) none, the others a random count.
// Each token picks K distinct experts, some slots then emptied, some tokens routed nowhere.
// Payload values are small integers so sums of up to R * K of them are exact in bf16.
std::vector<DispatchInput> random_inputs(const Case& c, std::mt19937& rng) {
    const Problem p = problem_of(c);
    std::uniform_int_distribution<int> value(-8, 8);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<int64_t> experts(c.experts);
    for (int e = 0; e < c.experts; ++e) experts[e] = e;
    std::vector<DispatchInput> in(c.ranks);
    for (int s = 0; s < c.ranks; ++s) {
        DispatchInput& x = in[s];
        x.num_tokens =
            s == 0 ? c.max_tokens
                   : (s == c.ranks - 1 ? 0 : std::uniform_int_distribution<int>(0, c.max_tokens)(rng));
        for (int i = 0; i < x.num_tokens * p.hidden; ++i)
            x.x_bf16.push_back(bf(static_cast<float>(value(rng))));
        for (int t = 0; t < x.num_tokens; ++t) {
            std::shuffle(experts.begin(), experts.end(), rng);
            const bool nowhere = unit(rng) < 0.1f;
            for (int k = 0; k < c.topk; ++k) {
                x.topk_idx.push_back(nowhere || unit(rng) < 0.15f ? -1 : experts[k]);
                x.topk_weights.push_back(unit(rng));
            }
        }
    }
    return in;
}

std::vector<DispatchInput> to_fp8(const Problem& p, std::vector<DispatchInput> in, ScaleFormat format) {
    for (auto& x : in) {
        const int words = num_scale_words(p.hidden, format);
        x.payload = Payload::kFP8;
        x.scale_format = format;
        x.x_fp8.resize(x.x_bf16.size());
        x.scales.resize(static_cast<size_t>(x.num_tokens) * words);
        for (int t = 0; t < x.num_tokens; ++t)
            quantize_token(x.x_bf16.data() + t * p.hidden, p.hidden, format, x.x_fp8.data() + t * p.hidden,
                           x.scales.data() + t * words);
        x.x_bf16.clear();
    }
    return in;
}

bool same_outputs(const DispatchOutput& a, const DispatchOutput& b) {
    auto sources = [](const DispatchOutput& o) {
        std::vector<std::tuple<int, int, int>> v;
        for (auto& s : o.sources) v.emplace_back(s.rank, s.token, s.k);
        return v;
    };
    // Weights compared as bits: "byte for byte".
    auto weight_bits = [](const DispatchOutput& o) {
        std::vector<uint32_t> v;
        for (float w : o.topk_weights) v.push_back(std::bit_cast<uint32_t>(w));
        return v;
    };
    return a.layout == b.layout && a.num_rows == b.num_rows && a.payload == b.payload &&
           a.scale_format == b.scale_format && a.x_bf16 == b.x_bf16 && a.x_fp8 == b.x_fp8 &&
           a.scales == b.scales && a.topk_idx == b.topk_idx && weight_bits(a) == weight_bits(b) &&
           sources(a) == sources(b) && a.num_tokens_per_expert == b.num_tokens_per_expert &&
           a.num_rows_per_source == b.num_rows_per_source && a.expert_offsets == b.expert_offsets;
}

std::vector<CombineInput> echo_rows(const std::vector<DispatchOutput>& outputs) {
    std::vector<CombineInput> y(outputs.size());
    for (size_t q = 0; q < outputs.size(); ++q) y[q].y = outputs[q].x_bf16;
    return y;
}

DispatchOptions layout_options(RecvLayout layout, int alignment = 1, bool zero_padding = false) {
    DispatchOptions o;
    o.layout = layout;
    o.expert_alignment = alignment;
    o.zero_padding = zero_padding;
    return o;
}

}  // namespace

SY_TEST(properties, rank_major_round_trip_multiplies_by_receiving_ranks) {
    for (const Case& c : cases()) {
        std::mt19937 rng(c.seed);
        const Problem p = problem_of(c);
        const auto in = random_inputs(c, rng);
        const GlobalDispatch d = dispatch(p, in, {});
        const auto out = combine(d.routing, echo_rows(d.outputs), {}, {});
        const int num_local = c.experts / c.ranks;
        for (int s = 0; s < c.ranks; ++s) {
            SY_CHECK_EQ(out[s].out.size(), in[s].x_bf16.size());
            for (int t = 0; t < in[s].num_tokens; ++t) {
                std::set<int64_t> owners;
                for (int k = 0; k < c.topk; ++k)
                    if (in[s].topk_idx[t * c.topk + k] >= 0)
                        owners.insert(in[s].topk_idx[t * c.topk + k] / num_local);
                for (int h = 0; h < c.hidden; ++h) {
                    // "+ 0.0f": a token routed nowhere yields +0 (the fp32 accumulator starts at +0),
                    // while -8 * 0 would be -0.
                    const float x = bf16_to_float(in[s].x_bf16[t * c.hidden + h]);
                    SY_CHECK_MSG(
                        out[s].out[t * c.hidden + h] == bf(x * static_cast<float>(owners.size()) + 0.0f),
                        "seed " << c.seed << " rank " << s << " token " << t);
                }
            }
        }
    }
}

SY_TEST(properties, expert_major_round_trip_multiplies_by_filled_slots) {
    for (const Case& c : cases()) {
        for (RecvLayout layout : {RecvLayout::kExpertContiguous, RecvLayout::kExpertMasked}) {
            for (bool hierarchical : {false, true}) {
                std::mt19937 rng(c.seed);
                const Problem p = problem_of(c);
                const auto in = random_inputs(c, rng);
                const GlobalDispatch d = dispatch(p, in, layout_options(layout, 3, false));
                CombineOptions options;
                options.hierarchical = hierarchical;
                const auto out = combine(d.routing, echo_rows(d.outputs), {}, options);
                for (int s = 0; s < c.ranks; ++s) {
                    for (int t = 0; t < in[s].num_tokens; ++t) {
                        int filled = 0;
                        for (int k = 0; k < c.topk; ++k) filled += in[s].topk_idx[t * c.topk + k] >= 0;
                        for (int h = 0; h < c.hidden; ++h) {
                            const float x = bf16_to_float(in[s].x_bf16[t * c.hidden + h]);
                            SY_CHECK_MSG(
                                out[s].out[t * c.hidden + h] == bf(x * static_cast<float>(filled) + 0.0f),
                                "seed " << c.seed << " rank " << s << " token " << t);
                        }
                    }
                }
            }
        }
    }
}

SY_TEST(properties, cached_dispatch_is_byte_identical) {
    for (const Case& c : cases()) {
        std::mt19937 rng(c.seed);
        const Problem p = problem_of(c);
        const auto first = random_inputs(c, rng);
        auto second = random_inputs(c, rng);  // new data with the first routing and token counts
        for (int s = 0; s < c.ranks; ++s) {
            second[s].num_tokens = first[s].num_tokens;
            second[s].x_bf16.resize(first[s].x_bf16.size(), bf(3));
            second[s].topk_weights.resize(first[s].topk_weights.size(), 0.5f);
            second[s].topk_idx = first[s].topk_idx;
        }
        const std::vector<DispatchOptions> layouts = {
            layout_options(RecvLayout::kRankMajor), layout_options(RecvLayout::kExpertContiguous, 4, true),
            layout_options(RecvLayout::kExpertContiguous, 1), layout_options(RecvLayout::kExpertMasked)};
        for (DispatchOptions options : layouts) {
            for (int payload = 0; payload < 4; ++payload) {
                // 0: bf16, 1: fp8 + fp32 scales, 2: fp8 + UE8M0 scales, 3: quantized in the dispatch
                auto a = first, b = second;
                if (payload == 1 || payload == 2) {
                    const ScaleFormat f = payload == 1 ? ScaleFormat::kFloat32 : ScaleFormat::kUE8M0;
                    a = to_fp8(p, a, f);
                    b = to_fp8(p, b, f);
                }
                options.quantize = payload == 3;
                const GlobalDispatch d = dispatch(p, a, options);
                const auto cached_same = cached_dispatch(d.routing, a);
                const GlobalDispatch fresh = dispatch(p, b, options);
                for (auto& x : b) x.topk_idx.assign(x.topk_idx.size(), -7);  // ignored by cached dispatch
                const auto cached_new = cached_dispatch(d.routing, b);
                for (int q = 0; q < c.ranks; ++q) {
                    SY_CHECK_MSG(same_outputs(d.outputs[q], cached_same[q]),
                                 "seed " << c.seed << " rank " << q);
                    SY_CHECK_MSG(same_outputs(fresh.outputs[q], cached_new[q]),
                                 "seed " << c.seed << " rank " << q);
                }
            }
        }
    }
}

SY_TEST(properties, expert_major_rows_fold_back_to_rank_major_rows) {
    for (const Case& c : cases()) {
        std::mt19937 rng(c.seed);
        const Problem p = problem_of(c);
        const auto in = random_inputs(c, rng);
        const GlobalDispatch rm = dispatch(p, in, {});
        for (DispatchOptions options :
             {layout_options(RecvLayout::kExpertContiguous, 8, true), layout_options(RecvLayout::kExpertMasked)}) {
            const GlobalDispatch em = dispatch(p, in, options);
            for (int q = 0; q < c.ranks; ++q) {
                const DispatchOutput& a = rm.outputs[q];
                const DispatchOutput& b = em.outputs[q];
                std::map<std::pair<int, int>, int64_t> row_of;  // (s, t) -> rank-major row
                for (int64_t r = 0; r < a.num_rows; ++r) row_of[{a.sources[r].rank, a.sources[r].token}] = r;
                int64_t valid_slots = 0;
                for (int32_t local : a.topk_idx) valid_slots += local >= 0;
                int64_t expert_rows = 0;
                for (int e = 0; e < p.local_experts(); ++e) {
                    SY_CHECK_EQ(b.expert_offsets[e + 1] - b.expert_offsets[e] >= b.num_tokens_per_expert[e],
                                true);
                    std::tuple<int, int, int> previous{-1, -1, -1};
                    for (int64_t r = b.expert_offsets[e]; r < b.expert_offsets[e + 1]; ++r) {
                        const RowSource src = b.sources[r];
                        const bool valid = r - b.expert_offsets[e] < b.num_tokens_per_expert[e];
                        SY_CHECK_EQ(src.rank >= 0, valid);
                        if (!valid) {  // padding (zeroed) or unused masked rows: zero
                            for (int h = 0; h < c.hidden; ++h) SY_CHECK_EQ(b.x_bf16[r * c.hidden + h], 0);
                            SY_CHECK_EQ(b.topk_weights[r], 0.0f);
                            continue;
                        }
                        ++expert_rows;
                        const std::tuple<int, int, int> here{src.rank, src.token, src.k};
                        SY_CHECK(previous < here);  // ordered by s, then t, then k
                        previous = here;
                        const int64_t ar = row_of.at({src.rank, src.token});
                        SY_CHECK_EQ(a.topk_idx[ar * c.topk + src.k], e);
                        SY_CHECK_EQ(a.topk_weights[ar * c.topk + src.k], b.topk_weights[r]);
                        for (int h = 0; h < c.hidden; ++h)
                            SY_CHECK_EQ(a.x_bf16[ar * c.hidden + h], b.x_bf16[r * c.hidden + h]);
                    }
                }
                SY_CHECK_EQ(expert_rows, valid_slots);
                SY_CHECK(a.num_tokens_per_expert == b.num_tokens_per_expert);
                SY_CHECK(a.num_rows_per_source == b.num_rows_per_source);
            }
        }
    }
}

SY_TEST(properties, masked_counts_equal_contiguous_counts) {
    for (const Case& c : cases()) {
        std::mt19937 rng(c.seed);
        const Problem p = problem_of(c);
        const auto in = random_inputs(c, rng);
        const GlobalDispatch contiguous = dispatch(p, in, layout_options(RecvLayout::kExpertContiguous, 5));
        const GlobalDispatch masked = dispatch(p, in, layout_options(RecvLayout::kExpertMasked));
        const int64_t capacity = static_cast<int64_t>(c.ranks) * c.max_tokens;
        for (int q = 0; q < c.ranks; ++q) {
            const DispatchOutput& a = contiguous.outputs[q];
            const DispatchOutput& b = masked.outputs[q];
            SY_CHECK(a.num_tokens_per_expert == b.num_tokens_per_expert);
            SY_CHECK_EQ(b.num_rows, p.local_experts() * capacity);
            SY_CHECK_EQ(a.expert_offsets.back() % 5, 0);
            for (int e = 0; e < p.local_experts(); ++e) {
                SY_CHECK_EQ(a.expert_offsets[e] % 5, 0);
                SY_CHECK_EQ(b.expert_offsets[e], e * capacity);
                for (int i = 0; i < a.num_tokens_per_expert[e]; ++i) {
                    const RowSource x = a.sources[a.expert_offsets[e] + i], y = b.sources[e * capacity + i];
                    SY_CHECK(x.rank == y.rank && x.token == y.token && x.k == y.k);
                }
            }
        }
    }
}

SY_TEST(properties, absent_ranks_drop_exactly_their_contributions) {
    for (const Case& c : cases()) {
        if (c.ranks < 2) continue;
        std::mt19937 rng(c.seed);
        const Problem p = problem_of(c);
        auto in = random_inputs(c, rng);
        std::vector<bool> absent(c.ranks, false);
        for (int q = 1; q < c.ranks; q += 2) absent[q] = true;  // every other rank, never rank 0

        // Dispatch: present ranks get the full dispatch's rows minus those from absent sources.
        const GlobalDispatch full = dispatch(p, in, {});
        DispatchOptions options;
        options.absent_ranks = absent;
        const GlobalDispatch part = dispatch(p, in, options);
        for (int q = 0; q < c.ranks; ++q) {
            const DispatchOutput& f = full.outputs[q];
            const DispatchOutput& o = part.outputs[q];
            if (absent[q]) {
                SY_CHECK_EQ(o.num_rows, 0);
                continue;
            }
            int64_t r = 0;
            for (int64_t fr = 0; fr < f.num_rows; ++fr) {
                if (absent[f.sources[fr].rank]) continue;
                SY_CHECK(r < o.num_rows);
                SY_CHECK_EQ(o.sources[r].rank, f.sources[fr].rank);
                SY_CHECK_EQ(o.sources[r].token, f.sources[fr].token);
                for (int h = 0; h < c.hidden; ++h)
                    SY_CHECK_EQ(o.x_bf16[r * c.hidden + h], f.x_bf16[fr * c.hidden + h]);
                for (int k = 0; k < c.topk; ++k)
                    SY_CHECK_EQ(o.topk_idx[r * c.topk + k], f.topk_idx[fr * c.topk + k]);
                ++r;
            }
            SY_CHECK_EQ(r, o.num_rows);
        }

        // Combine: dropping a rank equals it sending zeros (adding +0 changes no fp32 sum), for
        // random non-integer bf16 rows, in every mode.
        std::uniform_real_distribution<float> value(-4.0f, 4.0f);
        for (DispatchOptions layout :
             {layout_options(RecvLayout::kRankMajor), layout_options(RecvLayout::kExpertContiguous, 2),
              layout_options(RecvLayout::kExpertMasked)}) {
            const GlobalDispatch d = dispatch(p, in, layout);
            const bool rank_major = layout.layout == RecvLayout::kRankMajor;
            std::vector<CombineInput> y(c.ranks), zeroed(c.ranks);
            for (int q = 0; q < c.ranks; ++q) {
                for (size_t i = 0; i < d.outputs[q].x_bf16.size(); ++i)
                    y[q].y.push_back(float_to_bf16(value(rng)));
                const size_t weights = d.outputs[q].num_rows * (rank_major ? c.topk : 1);
                for (size_t i = 0; i < weights; ++i) y[q].row_weights.push_back(value(rng));
                zeroed[q] = y[q];
                if (absent[q]) {
                    std::fill(zeroed[q].y.begin(), zeroed[q].y.end(), 0);
                    std::fill(zeroed[q].row_weights.begin(), zeroed[q].row_weights.end(), 0.0f);
                    y[q] = CombineInput{};  // not read
                }
            }
            std::vector<CombineHomeInput> home(c.ranks);
            for (int s = 0; s < c.ranks; ++s)
                for (int i = 0; i < in[s].num_tokens * c.hidden; ++i)
                    home[s].bias0.push_back(float_to_bf16(value(rng)));
            for (int mode = 0; mode < (rank_major ? 1 : 3); ++mode) {
                CombineOptions with_absent, without;
                with_absent.weighted = without.weighted = mode >= 1;
                with_absent.hierarchical = without.hierarchical = mode == 2;
                with_absent.absent_ranks = absent;
                const auto got = combine(d.routing, y, home, with_absent);
                const auto want = combine(d.routing, zeroed, home, without);
                for (int s = 0; s < c.ranks; ++s) {
                    if (absent[s]) {
                        SY_CHECK(std::all_of(got[s].out.begin(), got[s].out.end(),
                                             [](uint16_t v) { return v == 0; }));
                        continue;
                    }
                    SY_CHECK_MSG(got[s].out == want[s].out,
                                 "seed " << c.seed << " home " << s << " mode " << mode);
                    SY_CHECK(got[s].combined_topk_weights == want[s].combined_topk_weights);
                }
            }
        }
    }
}

SY_TEST_MAIN()
