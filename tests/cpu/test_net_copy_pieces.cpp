// How the emulated network's engine feeds its copy kernel (net/copy_pieces.hpp): every byte of every
// copy in exactly one piece, pieces of at most 32 KiB in copy order, a launch whenever the argument
// struct is full and one at the end; the call's words in the launch with its last pieces (and in
// launches of words alone after it when they overflow); and the pieces, executed as the kernel
// would on host memory, move exactly the copies' bytes.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/testing.hpp"
#include "net/copy_pieces.hpp"

using namespace switchyard;

namespace {

using Copy = net::Executor::Copy;
using device::kNetCopyMaxItems;
using device::kNetCopyPieceBytes;

// Fake window bases: rank r's window at 2^40 * (r + 1), this rank's at 2^44.
constexpr uint64_t kLocalBase = uint64_t(1) << 44;
uint64_t window_of(int32_t rank) {
    return (uint64_t(1) << 40) * uint64_t(rank + 1);
}

struct Launches {
    std::vector<std::vector<device::NetCopyItem>> items;
    std::vector<std::vector<device::NetCopyWord>> words;
    int cut(const std::vector<Copy>& copies, const std::vector<device::NetCopyWord>& call_words = {}) {
        device::NetCopyArgs args{};
        return net::plan_call(
            copies.data(), copies.size(), call_words.data(), call_words.size(), args,
            [](const Copy& copy, uint64_t* dst, uint64_t* src) {
                *dst = window_of(copy.dst_rank) + copy.dst_offset;
                *src = kLocalBase + copy.src_offset;
            },
            [this](const device::NetCopyArgs& launched) {
                items.emplace_back(launched.items, launched.items + launched.count);
                words.emplace_back(launched.words, launched.words + launched.num_words);
            });
    }
};

}  // namespace

SY_TEST(NetCopyPieces, EveryByteInOnePieceInOrder) {
    std::mt19937_64 random(7);
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<Copy> copies;
        const int count = 1 + int(random() % 700);
        for (int i = 0; i < count; ++i) {
            // Sizes around the piece boundary, small words, and copies of many pieces.
            const uint64_t sizes[] = {8,
                                      16,
                                      100,
                                      kNetCopyPieceBytes - 16,
                                      kNetCopyPieceBytes,
                                      kNetCopyPieceBytes + 8,
                                      7 * 1024,
                                      3 * kNetCopyPieceBytes + 1,
                                      1 + random() % (1u << 20)};
            copies.push_back({int32_t(random() % 4), (random() % 4096) * 8, (random() % 4096) * 16,
                              sizes[random() % (sizeof sizes / sizeof sizes[0])]});
        }
        Launches launches;
        const int made = launches.cut(copies);
        SY_CHECK_EQ(made, int(launches.items.size()));
        size_t pieces = 0;
        for (size_t l = 0; l < launches.items.size(); ++l) {
            const auto& items = launches.items[l];
            SY_CHECK(!items.empty());
            SY_CHECK(items.size() <= size_t(kNetCopyMaxItems));
            // Every launch but the last is full.
            if (l + 1 < launches.items.size()) SY_CHECK_EQ(items.size(), size_t(kNetCopyMaxItems));
            pieces += items.size();
        }
        // Walk the pieces in order against the copies.
        size_t expected_pieces = 0;
        size_t l = 0, p = 0;
        for (const Copy& copy : copies) {
            const uint64_t dst = window_of(copy.dst_rank) + copy.dst_offset,
                           src = kLocalBase + copy.src_offset;
            for (uint64_t done = 0; done < copy.bytes;) {
                SY_CHECK(l < launches.items.size());
                const device::NetCopyItem& item = launches.items[l][p];
                SY_CHECK_EQ(item.dst, dst + done);
                SY_CHECK_EQ(item.src, src + done);
                SY_CHECK(item.bytes >= 1 && item.bytes <= kNetCopyPieceBytes);
                // Only a copy's last piece is short.
                if (done + item.bytes < copy.bytes) SY_CHECK_EQ(item.bytes, kNetCopyPieceBytes);
                done += item.bytes;
                ++expected_pieces;
                if (++p == launches.items[l].size()) ++l, p = 0;
            }
        }
        SY_CHECK_EQ(pieces, expected_pieces);
        SY_CHECK_EQ(l, launches.items.size());
    }
}

SY_TEST(NetCopyPieces, NoCopiesNoLaunch) {
    Launches launches;
    SY_CHECK_EQ(launches.cut({}), 0);
    SY_CHECK_EQ(launches.cut({{1, 0, 0, 0}}), 0);  // a zero-byte copy has no piece
    SY_CHECK(launches.items.empty());
}

SY_TEST(NetCopyPieces, WordsRideWithTheLastPieces) {
    std::vector<device::NetCopyWord> words;
    for (uint64_t w = 0; w < 150; ++w) words.push_back({0x1000 + 8 * w, w + 1});
    // A launch and a half of pieces and 150 words: a full launch, then the rest of the pieces with
    // the first kNetCopyMaxWords words, then two launches of words alone (the next
    // kNetCopyMaxWords and the rest), in order.
    Launches launches;
    const int pieces = kNetCopyMaxItems + kNetCopyMaxItems / 2;
    const std::vector<Copy> copies = {{1, 0, 0, uint64_t(pieces) * kNetCopyPieceBytes}};
    SY_CHECK_EQ(launches.cut(copies, words), 4);
    SY_CHECK_EQ(launches.items[0].size(), size_t(kNetCopyMaxItems));
    SY_CHECK(launches.words[0].empty());
    SY_CHECK_EQ(launches.items[1].size(), size_t(pieces - kNetCopyMaxItems));
    SY_CHECK_EQ(launches.words[1].size(), size_t(device::kNetCopyMaxWords));
    SY_CHECK(launches.items[2].empty() && launches.items[3].empty());
    SY_CHECK_EQ(launches.words[2].size(), size_t(device::kNetCopyMaxWords));
    SY_CHECK_EQ(launches.words[3].size(), size_t(150 - 2 * device::kNetCopyMaxWords));
    uint64_t next = 1;
    for (const auto& launch : launches.words)
        for (const device::NetCopyWord& word : launch) SY_CHECK_EQ(word.value, next++);
    SY_CHECK_EQ(next, uint64_t(151));
    // Words without copies: launches of words alone; one word with one small copy: one launch.
    Launches alone;
    SY_CHECK_EQ(alone.cut({}, {words[0], words[1]}), 1);
    SY_CHECK(alone.items[0].empty() && alone.words[0].size() == 2);
    Launches together;
    SY_CHECK_EQ(together.cut({{1, 0, 0, 4096}}, {words[0]}), 1);
    SY_CHECK(together.items[0].size() == 1 && together.words[0].size() == 1);
}

// The pieces executed on host memory as the kernel executes them (any order: here last to first)
// reproduce the copies exactly, unaligned ends included.
SY_TEST(NetCopyPieces, PiecesMoveTheCopiesBytes) {
    std::vector<uint8_t> source(3u << 20), target(3u << 20, 0), expected(3u << 20, 0);
    std::mt19937_64 random(11);
    for (uint8_t& byte : source) byte = uint8_t(random());
    std::vector<Copy> copies;
    uint64_t at = 0;
    for (int i = 0; i < 300 && at < target.size() - (200u << 10); ++i) {
        const uint64_t bytes = 1 + random() % (150u << 10);
        copies.push_back({0, at + random() % 3, random() % (2u << 20), bytes});
        at = copies.back().dst_offset + bytes + 64;
    }
    for (const Copy& copy : copies)
        std::memcpy(expected.data() + copy.dst_offset, source.data() + copy.src_offset, copy.bytes);
    device::NetCopyArgs args{};
    std::vector<device::NetCopyItem> all;
    net::plan_call(
        copies.data(), copies.size(), nullptr, 0, args,
        [&](const Copy& copy, uint64_t* dst, uint64_t* src) {
            *dst = reinterpret_cast<uint64_t>(target.data() + copy.dst_offset);
            *src = reinterpret_cast<uint64_t>(source.data() + copy.src_offset);
        },
        [&](const device::NetCopyArgs& launched) {
            all.insert(all.end(), launched.items, launched.items + launched.count);
        });
    for (size_t i = all.size(); i-- > 0;)
        std::memcpy(reinterpret_cast<void*>(all[i].dst), reinterpret_cast<const void*>(all[i].src),
                    all[i].bytes);
    SY_CHECK(target == expected);
}

SY_TEST_MAIN()
