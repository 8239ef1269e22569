// The HT combine's reduce work items (kernels/switchyard/ht/combine_reduce.cuh, ht_reduce_item): whatever
// the token count, the split tail and the parts per token, the items the warps claim cover every
// whole chunk, or every (token, channel part) of a split chunk, exactly once, and nothing else.
#include <algorithm>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/ht/combine_reduce.cuh"

using namespace switchyard;
using device::HtReduceItem;
using device::kHtCombineChunkTokens;

namespace {

// Walks every item as reduce_items does and counts what each (token, part) receives; a whole chunk
// counts once for each of its tokens' parts.
void check_cover(int32_t tokens, int32_t tail, int32_t parts) {
    const int32_t chunks = (tokens + kHtCombineChunkTokens - 1) / kHtCombineChunkTokens;
    const int32_t whole = chunks - tail;
    const int32_t items = device::ht_reduce_items(chunks, tail, parts);
    std::vector<int> seen(size_t(tokens) * parts, 0);
    int32_t previous_chunk = -1;
    for (int32_t item = 0; item < items; ++item) {
        const HtReduceItem work = device::ht_reduce_item(item, whole, parts);
        SY_CHECK(work.chunk >= previous_chunk);  // items go in chunk (arrival) order
        previous_chunk = work.chunk;
        SY_CHECK_EQ(work.token < 0, work.chunk < whole);
        if (work.token < 0) {
            for (int32_t t = work.chunk * kHtCombineChunkTokens;
                 t < std::min(tokens, (work.chunk + 1) * kHtCombineChunkTokens); ++t)
                for (int32_t p = 0; p < parts; ++p) ++seen[size_t(t) * parts + p];
            continue;
        }
        SY_CHECK_EQ(work.chunk, work.token / kHtCombineChunkTokens);
        SY_CHECK(work.part >= 0 && work.part < parts);
        if (work.token >= tokens) continue;  // past the end of a partial last chunk (skipped)
        // The chunk's first item is its first token's part 0: the warp that waits for the chunk.
        if (work.token % kHtCombineChunkTokens == 0 && work.part == 0)
            SY_CHECK_EQ(item, whole + (work.chunk - whole) * kHtCombineChunkTokens * parts);
        ++seen[size_t(work.token) * parts + work.part];
    }
    for (size_t i = 0; i < seen.size(); ++i) SY_CHECK_EQ(seen[i], 1);
}

}  // namespace

SY_TEST(HtReduceItems, CoverEveryTokenPartOnce) {
    for (int32_t tokens : {1, 2, 3, 7, 8, 129, 4096, 4097})
        for (int32_t parts : {1, 4, 5}) {
            const int32_t chunks = (tokens + kHtCombineChunkTokens - 1) / kHtCombineChunkTokens;
            for (int32_t tail : {0, 1, chunks / 2, chunks - 1, chunks})
                if (tail >= 0 && tail <= chunks) check_cover(tokens, tail, parts);
        }
}

SY_TEST(HtReduceItems, TailIsSizedByTheGrid) {
    // 4,096 tokens, hidden 7168 (4 parts), 24 blocks of 16 warps: 384 items, 48 chunks of 8.
    SY_CHECK_EQ(device::ht_reduce_tail_chunks(2048, 4, 384, true), 48);
    SY_CHECK_EQ(device::ht_reduce_tail_chunks(2048, 4, 385, true), 49);
    SY_CHECK_EQ(device::ht_reduce_tail_chunks(2048, 1, 384, true), 0);  // one part per token
    SY_CHECK_EQ(device::ht_reduce_tail_chunks(10, 4, 384, true), 10);   // never past the chunks
    SY_CHECK_EQ(device::ht_reduce_tail_chunks(10, 4, 384, false), 10);  // few tokens: all split
}
SY_TEST_MAIN()
