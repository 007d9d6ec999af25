// HugePageBuffer and HugePageArena: zeroed, aligned, writable memory; pieces that do not overlap.
#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/error.h"
#include "util/huge_pages.h"

namespace inferd {
namespace {

TEST(HugePageBuffer, ZeroedAlignedAndRoundedToHugePages) {
  HugePageBuffer buffer(3 * 1000 * 1000);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % HugePageBuffer::kHugePage, 0u);
  EXPECT_EQ(buffer.size(), 2 * HugePageBuffer::kHugePage);
  EXPECT_TRUE(
      std::all_of(buffer.data(), buffer.data() + buffer.size(), [](uint8_t b) { return b == 0; }));
  std::fill(buffer.data(), buffer.data() + buffer.size(), uint8_t{0xAB});
  EXPECT_EQ(buffer.data()[buffer.size() - 1], 0xAB);
}

// Pages of the buffer the kernel has in memory now (mincore), of all its pages.
std::pair<size_t, size_t> resident_pages(const HugePageBuffer& buffer) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((buffer.size() + page - 1) / page);
  EXPECT_EQ(mincore(buffer.data(), buffer.size(), in_core.data()), 0);
  return {static_cast<size_t>(std::count_if(in_core.begin(), in_core.end(),
                                            [](unsigned char c) { return (c & 1) != 0; })),
          in_core.size()};
}

TEST(HugePageBuffer, PrefaultBringsEveryPageInAndKeepsItZero) {
  HugePageBuffer lazy(4 * HugePageBuffer::kHugePage);
  EXPECT_EQ(resident_pages(lazy).first, 0u);  // nothing touched: nothing in memory yet
  HugePageBuffer buffer(4 * HugePageBuffer::kHugePage);
  buffer.prefault();
  const auto [resident, total] = resident_pages(buffer);
  EXPECT_EQ(resident, total);
  EXPECT_TRUE(
      std::all_of(buffer.data(), buffer.data() + buffer.size(), [](uint8_t b) { return b == 0; }));
  HugePageArena arena;
  const std::span<float> piece = arena.allocate_array<float>(1000);
  arena.prefault();
  EXPECT_TRUE(std::all_of(piece.begin(), piece.end(), [](float f) { return f == 0.0f; }));
}

TEST(HugePageBuffer, MovesOwnership) {
  HugePageBuffer a(100);
  uint8_t* data = a.data();
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(b.data(), data);
  HugePageBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(HugePageBuffer(0).data(), nullptr);
}

TEST(HugePageArena, PiecesAreAlignedZeroedAndDisjoint) {
  HugePageArena arena;
  struct Piece {
    uint8_t* p;
    size_t bytes;
  };
  std::vector<Piece> pieces;
  // Small pieces fill chunks; the 20 MiB one gets a mapping of its own.
  for (size_t bytes : {size_t{100}, size_t{320 * 36}, size_t{20} << 20, size_t{1}, size_t{5} << 20,
                       size_t{12} << 20, size_t{12} << 20, size_t{64}}) {
    uint8_t* p = arena.allocate(bytes, 64);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_TRUE(std::all_of(p, p + bytes, [](uint8_t b) { return b == 0; }));
    std::fill(p, p + bytes, static_cast<uint8_t>(pieces.size() + 1));
    pieces.push_back({p, bytes});
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const uint8_t mark = static_cast<uint8_t>(i + 1);
    EXPECT_TRUE(std::all_of(pieces[i].p, pieces[i].p + pieces[i].bytes,
                            [mark](uint8_t b) { return b == mark; }))
        << "piece " << i << " was overwritten by another";
  }
  EXPECT_THROW(arena.allocate(10, 48), Error);
}

TEST(HugePageArena, ArraysAreTypedZeroedAndDisjoint) {
  HugePageArena arena;
  const std::span<float> a = arena.allocate_array<float>(1000);
  const std::span<float> b = arena.allocate_array<float>(3);
  ASSERT_EQ(a.size(), 1000u);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return x == 0.0f; }));
  std::fill(a.begin(), a.end(), 1.5f);
  std::fill(b.begin(), b.end(), -2.0f);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](float x) { return x == 1.5f; }));
}

}  // namespace
}  // namespace inferd
