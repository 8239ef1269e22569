// LL across nodes, on the CPU: the buffer's sizing across nodes (the DeepSeek-V3 shape at EP8 as 2 x 4
// within 64 MiB; the other shapes reported), the record areas and network areas of a set, the
// network ids against the transport's ranges, and the kernel families across nodes compiled for
// sm_90a without spills: on the emulated network with NVRTC, on GIN with nvcc against the NCCL
// headers (skipped, saying why, where nvcc or those headers are missing).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/ll_capacity.hpp"
#include "common/testing.hpp"
#include "jit/jit.hpp"
#include "jit/nvcc_program.hpp"
#include "launch/ll_net_launch.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/errors.hpp"
#include "switchyard/ll/combine_shape.cuh"
#include "switchyard/ll/net_combine_send.cuh"
#include "switchyard/ll/net_dispatch_send.cuh"
#include "switchyard/ll/net_layout.cuh"
#include "switchyard/transport/net_check.cuh"

using namespace switchyard;
using namespace switchyard::device;
using switchyard::testing::ll_capacity;

SY_TEST(LlNodesLayout, DeepSeekShapeBufferBytes) {
    // LL for 128 tokens, hidden 7168, 256 experts, top-8 (DESIGN.md §9: EP8 <= 64 MiB).
    struct Shape {
        int nodes, per_node;
    };
    for (const Shape shape :
         {Shape{1, 8}, Shape{2, 4}, Shape{4, 2}, Shape{8, 1}, Shape{2, 2}, Shape{4, 1}, Shape{2, 8}}) {
        const BufferLayout layout =
            BufferLayout::make(ll_capacity(shape.nodes * shape.per_node, shape.nodes));
        std::printf("  %d x %d: %lld bytes (%.1f MiB): %d record areas per set, forward area %.1f MiB\n",
                    shape.nodes, shape.per_node, (long long)layout.total_bytes,
                    layout.total_bytes / 1048576.0, layout.ll_set.record_areas,
                    layout.ll_forward_bytes / 1048576.0);
        if (shape.nodes * shape.per_node == 8 && shape.nodes <= 2) SY_CHECK(layout.total_bytes <= 64ll << 20);
    }
    // One node keeps the one-node layout exactly.
    const BufferLayout one = BufferLayout::make(ll_capacity(8, 1));
    BufferCapacity unset = ll_capacity(8, 1);
    unset.num_nodes = 0;
    SY_CHECK_EQ(BufferLayout::make(unset).total_bytes, one.total_bytes);
    SY_CHECK_EQ(one.ll_set.record_areas, 8);
    SY_CHECK_EQ(one.ll_forward_bytes, int64_t(0));
}

SY_TEST(LlNodesLayout, AreasOfASetDoNotOverlap) {
    for (int nodes : {2, 3, 4}) {
        for (int per_node : {1, 2, 4}) {
            const int ranks = nodes * per_node;
            const BufferLayout layout = BufferLayout::make(ll_capacity(ranks, nodes, 33, 2560, 8 * ranks, 9));
            const LlSetLayout& set = layout.ll_set;
            SY_CHECK_EQ(set.record_areas, per_node + 2 * (nodes - 1));
            SY_CHECK(set.headers_offset + set.header_bytes * ranks <= set.dispatch_offset);
            SY_CHECK(set.dispatch_offset + int64_t(set.record_areas) * 33 * set.max_record_bytes <=
                     set.combine_offset);
            SY_CHECK(set.combine_offset + 9ll * 33 * set.max_combine_row_bytes <= set.node_headers_offset);
            SY_CHECK(4 * LlSetLayout::node_header_words(per_node, set.max_local_experts, 33) <=
                     set.node_header_bytes);
            SY_CHECK(set.node_headers_offset + 2ll * (nodes - 1) * set.node_header_bytes <=
                     set.combine_headers_offset);
            SY_CHECK(set.combine_headers_offset + 2ll * (nodes - 1) * LlSetLayout::kCombineHeaderBytes <=
                     set.forward_flags_offset);
            SY_CHECK(set.forward_flags_offset + 8ll * per_node <= set.set_bytes);
            SY_CHECK(set.set_bytes <= layout.ll_set_bytes);
            // The forward area after both sets: [N - 1][K][T_ll] rows.
            SY_CHECK(layout.ll_forward_offset >= layout.ll_offset + 2 * layout.ll_set_bytes);
            SY_CHECK_EQ(layout.ll_forward_bytes, int64_t(nodes - 1) * 9 * 33 * set.max_combine_row_bytes);
            SY_CHECK(layout.ll_forward_offset + layout.ll_forward_bytes <= layout.total_bytes);
            // The last slot of a node header's slot list is inside the header.
            SY_CHECK(4 * (ll_node_header_rank(per_node - 1, set.max_local_experts, 33) + kLlNodeHeaderCounts +
                          set.max_local_experts + 33) <=
                     set.node_header_bytes);
        }
    }
}

// The GPU cases' shapes (tests/gpu/test_ll_nodes.cpp: hidden 2048, top-6, 32 experts, T_ll 24, on a
// buffer of max_hidden 2048, max_topk 9, max_experts 64): every address the kernels across nodes
// move a record, header or row at (uint4 / uint2 accesses, network puts) is 16-byte aligned, inside
// its area and inside the window, for every rank's view of 2x2, 2x4, 4x2 and 4x1 and every scale
// kind; and the dynamic shared memory the launchers pass covers what the kernels carve.
namespace {

// An op shape and the buffer's capacity for it.
struct OpShape {
    int hidden, topk, experts, tokens;
    int capacity_hidden, capacity_experts, capacity_topk;
};

// Every address the LL kernels across nodes compute for `op` on each topology: 16-byte aligned and
// inside its area, and the shared memory they carve within what they launch with.
void check_addresses(const OpShape& op, std::initializer_list<std::pair<int, int>> topologies) {
    const int kHidden = op.hidden, kTopk = op.topk, kExperts = op.experts, kTokens = op.tokens;
    for (const auto& [nodes_count, per_node] : topologies) {
        const int R = nodes_count * per_node, N = nodes_count, G = per_node;
        BufferCapacity capacity =
            ll_capacity(R, N, kTokens, op.capacity_hidden, op.capacity_experts, op.capacity_topk);
        const BufferLayout layout = BufferLayout::make(capacity);
        const LlSetLayout& set = layout.ll_set;
        const int64_t window = layout.total_bytes;
        auto aligned_inside = [&](int64_t offset, int64_t bytes, int64_t begin, int64_t end,
                                  const char* what) {
            SY_CHECK_MSG(offset % 16 == 0, what << " at " << offset << " is not 16-byte aligned");
            SY_CHECK_MSG(offset >= begin && offset + bytes <= end, what << " [" << offset << ", "
                                                                        << offset + bytes << ") leaves ["
                                                                        << begin << ", " << end << ")");
            SY_CHECK_MSG(offset + bytes <= window, what << " leaves the window");
        };
        for (int32_t scale_kind : {kScaleNone, kScaleFloat32, kScaleUe8m0}) {
            const RecordLayout record = ll_dispatch_record(kHidden, scale_kind, kTopk);
            SY_CHECK(record.total_bytes % 16 == 0 && record.scale_offset % 16 == 0 &&
                     record.meta_offset % 16 == 0);
            SY_CHECK(record.total_bytes <= set.max_record_bytes);
            for (int rank = 0; rank < R; ++rank) {
                const LlNodes nodes{N, G, rank / G, rank % G};
                for (int s = 0; s < 2; ++s) {
                    const int64_t base = layout.ll_offset + s * layout.ll_set_bytes;
                    const int64_t records_begin = base + set.dispatch_offset;
                    const int64_t records_end =
                        records_begin + int64_t(set.record_areas) * kTokens * set.max_record_bytes;
                    SY_CHECK(records_end <= base + set.combine_offset);
                    auto record_at = [&](int area, int slot) {
                        return int64_t(
                            set.record(reinterpret_cast<uint8_t*>(0) + base, area, slot, record.total_bytes) -
                            reinterpret_cast<uint8_t*>(0));
                    };
                    for (int g = 0; g < G; ++g)
                        for (int slot = 0; slot < kTokens; ++slot)
                            aligned_inside(record_at(ll_net_local_area(g), slot), record.total_bytes,
                                           records_begin, records_end, "a node-mate's record");
                    for (int o = 0; o < N - 1; ++o) {
                        const int32_t m = nodes.other_node(o);
                        // The put of the staged records and the header to the rail peer on node m.
                        const int64_t src = record_at(ll_net_staging_area(nodes, o), 0);
                        const int64_t dst = record_at(ll_net_received_area(nodes, nodes.index_at(m)), 0);
                        aligned_inside(src, int64_t(kTokens) * record.total_bytes, records_begin, records_end,
                                       "the staged records");
                        aligned_inside(dst, int64_t(kTokens) * record.total_bytes, records_begin, records_end,
                                       "the received records");
                        // Staging and received areas of different nodes never overlap.
                        for (int o2 = 0; o2 < N - 1; ++o2) {
                            if (o2 == o) continue;
                            SY_CHECK(std::abs(record_at(ll_net_staging_area(nodes, o), 0) -
                                              record_at(ll_net_staging_area(nodes, o2), 0)) >=
                                     int64_t(kTokens) * record.total_bytes);
                        }
                        const int64_t headers_begin = base + set.node_headers_offset;
                        const int64_t headers_end = headers_begin + 2ll * (N - 1) * set.node_header_bytes;
                        aligned_inside(headers_begin + set.node_header_bytes * (N - 1 + o),
                                       set.node_header_bytes, headers_begin, headers_end,
                                       "the staged node header");
                        aligned_inside(headers_begin + set.node_header_bytes * nodes.index_at(m),
                                       set.node_header_bytes, headers_begin, headers_end,
                                       "the received node header");
                        const int64_t combine_headers = base + set.combine_headers_offset;
                        aligned_inside(combine_headers + LlSetLayout::kCombineHeaderBytes * (N - 1 + o),
                                       LlSetLayout::kCombineHeaderBytes, combine_headers,
                                       combine_headers + 2ll * (N - 1) * LlSetLayout::kCombineHeaderBytes,
                                       "the staged combine header");
                    }
                    const int64_t row_bytes = LlSetLayout::combine_row_bytes(kHidden);
                    for (int k = 0; k < kTopk; ++k)
                        for (int t = 0; t < kTokens; ++t)
                            aligned_inside(base + set.combine_offset + (int64_t(k) * kTokens + t) * row_bytes,
                                           row_bytes, base + set.combine_offset,
                                           base + set.combine_offset +
                                               int64_t(set.max_topk) * kTokens * set.max_combine_row_bytes,
                                           "a combine row");
                    SY_CHECK((set.forward_flags_offset + base) % 8 == 0);
                }
                // The forward area (both sets): [N - 1][K][T_ll] rows of the op's row bytes.
                const LlForwardArea forward{layout.ll_forward_offset, set.max_topk, set.max_tokens};
                const int64_t row_bytes = LlSetLayout::combine_row_bytes(kHidden);
                for (int o = 0; o < N - 1; ++o)
                    for (int k = 0; k < kTopk; ++k)
                        for (int t = 0; t < kTokens; ++t)
                            aligned_inside(
                                forward.row_offset(o, k, t, row_bytes), row_bytes, layout.ll_forward_offset,
                                layout.ll_forward_offset + layout.ll_forward_bytes, "a forward row");
            }
        }
        // Shared memory: the dispatch's routing masks (expert, rank and node masks) and receive
        // scratch, the combine's carve and its contributors [N - 1] after it (16-byte aligned).
        const int32_t L = kExperts / R;
        for (int tokens : {0, 1, 7, kTokens}) {
            const int64_t words_per_mask = ll_token_mask_words(tokens);
            const int64_t carve_words = 3 * int64_t(R) + 1;  // mask, present, record_starts
            const int64_t masks = (int64_t(kExperts) + R + N) * words_per_mask;
            const int64_t receive = int64_t(R) * L + 2 * (int64_t(L) + 1);
            SY_CHECK(4 * (carve_words + std::max(masks, receive)) <=
                     ll_net_dispatch_shared_bytes(R, N, kExperts, tokens));
        }
        const int64_t combine = ll_combine_shared_bytes(R, L);
        SY_CHECK(align_up(combine, 16) + 8 * int64_t(N - 1) <= ll_net_combine_shared_bytes(R, L, N));
    }
}

}  // namespace

SY_TEST(LlNodesLayout, GpuCaseShapesAddressesAlignedAndInBounds) {
    check_addresses({2048, 6, 32, 24, 2048, 64, 9}, {{2, 2}, {2, 4}, {4, 2}, {4, 1}});
    // The DeepSeek routing case (LlNodes.DeepSeekRouting) and the LL bench across nodes (capacity
    // equal to the op's shape).
    check_addresses({2048, 8, 256, 24, 2048, 256, 9}, {{2, 1}, {2, 2}});
    check_addresses({7168, 8, 256, 128, 7168, 256, 8}, {{2, 1}, {2, 2}});
}

SY_TEST(LlNodesLayout, NodeNumbering) {
    // Node 1 of 4 numbers the others 0, 2, 3 as 0, 1, 2; node 3 numbers node 1 as 1.
    const LlNodes nodes{4, 2, 1, 1};
    SY_CHECK_EQ(nodes.other_index(0), 0);
    SY_CHECK_EQ(nodes.other_index(2), 1);
    SY_CHECK_EQ(nodes.other_index(3), 2);
    for (int o = 0; o < 3; ++o) SY_CHECK_EQ(nodes.other_index(nodes.other_node(o)), o);
    for (int m : {0, 2, 3}) {
        const LlNodes there{4, 2, m, 1};
        SY_CHECK_EQ(there.other_node(nodes.index_at(m)), 1);
    }
    SY_CHECK_EQ(nodes.rank_of(3, 1), 7);
    SY_CHECK(nodes.on_my_node(2) && nodes.on_my_node(3) && !nodes.on_my_node(4));
}

SY_TEST(LlNodesLayout, NetworkIdsStayBelowTheCheckAndApart) {
    std::set<uint32_t> ids;
    for (int kind : {kLlDispatch, kLlCombine})
        for (int set = 0; set < 2; ++set)
            for (int node = 0; node < kLlNetMaxNodes; ++node) {
                const uint32_t id = ll_net_signal(kind, set, node);
                SY_CHECK(id < uint32_t(kNetNumSignals) - kNetCheckIds);
                SY_CHECK(ids.insert(id).second);
            }
    SY_CHECK_EQ(ids.size(), size_t(4 * kLlNetMaxNodes));
    SY_CHECK(kLlNetForwardCounter < uint32_t(kNetNumCounters) - kNetCheckIds);
    SY_CHECK_EQ(ll_net_context(4), 3);
    SY_CHECK_EQ(ll_net_context(1), 0);
}

namespace {

std::string compile_checked(const jit::KernelSource& source, const jit::CompileOptions& base) {
    jit::CompileOptions options = base;
    options.arch = "sm_90a";
    const jit::CompiledKernel compiled = jit::compile(source, options);
    SY_CHECK(compiled.cubin.size() > 4 && compiled.cubin.compare(0, 4,
                                                                 "\x7f"
                                                                 "ELF") == 0);
    SY_CHECK_MSG(compiled.spill_bytes == 0, source.kernel << " spills " << compiled.spill_bytes << " bytes");
    char line[640];
    std::snprintf(line, sizeof(line), "  %s: %d registers, %d spill bytes, %d stack bytes%s",
                  source.kernel.c_str(), compiled.num_registers, compiled.spill_bytes, compiled.stack_bytes,
                  compiled.cache_hit ? " (cache hit)" : "");
    return line;
}

// The variants the CPU compiles: each kernel body once (dispatch: both halves, fp8 masked and bf16
// contiguous; combine: both halves flat, hierarchical contiguous).
std::vector<jit::KernelSource> representative(bool gin) {
    using launch::LlCombineShape;
    using launch::LlDispatchShape;
    return {
        launch::ll_net_dispatch_source(LlDispatchShape{7168, 8, kScaleFloat32, true, kLlBothHalves, false},
                                       gin),
        launch::ll_net_dispatch_source(LlDispatchShape{7168, 8, kScaleNone, false, kLlBothHalves, true}, gin),
        launch::ll_net_combine_source(LlCombineShape{7168, 8, true, kLlBothHalves, false, false}, gin),
        launch::ll_net_combine_source(LlCombineShape{7168, 8, false, kLlBothHalves, true, true}, gin),
    };
}

}  // namespace

SY_TEST(LlNodesKernels, CatalogListsBothFamilies) {
    const auto emulated = launch::ll_net_catalog({}, false), gin = launch::ll_net_catalog({}, true);
    std::set<std::string> families, kernels;
    for (const auto& source : emulated) {
        families.insert(source.family);
        SY_CHECK_MSG(kernels.insert(source.kernel).second, "listed twice: " << source.kernel);
        SY_CHECK(source.kernel.find("NetEmulated") != std::string::npos);
    }
    SY_CHECK(families == (std::set<std::string>{"ll_net_dispatch", "ll_net_combine"}));
    SY_CHECK_EQ(gin.size(), emulated.size());
    for (const auto& source : gin) SY_CHECK(source.kernel.find("NetGin") != std::string::npos);
    std::printf("  %zu instantiations per backend at the catalog shape\n", emulated.size());
}

SY_TEST(LlNodesKernels, EmulatedCompileWithNvrtc) {
    for (const auto& source : representative(false)) std::printf("%s\n", compile_checked(source, {}).c_str());
}

SY_TEST(LlNodesKernels, GinCompileWithNvcc) {
    try {
        jit::nvcc_toolchain();
    } catch (const UnsupportedError& error) {
        SY_SKIP(std::string("the GIN kernels cannot be compiled on this machine: ") + error.what());
    }
    // One instantiation per family (nvcc takes far longer than NVRTC).
    const std::vector<jit::KernelSource> sources = representative(true);
    for (const auto& source : {sources[0], sources[3]})
        std::printf("%s\n", compile_checked(source, launch::ll_net_compile_options(true)).c_str());
}

SY_TEST_MAIN()
