// The memory-bandwidth probe of `inferd bench`: every ISA's read kernel sums the same words as
// the reference, the sysfs cache parser, the probe's result on a small buffer, and the report's
// words for a decode rate above the probe's figure. Speeds themselves are not asserted.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "bench_roofline.h"
#include "kernels/kernels.h"
#include "kernels/read_bandwidth.h"
#include "kernels/read_stream.h"
#include "util/thread_pool.h"

namespace inferd::kernels {
namespace {

TEST(ReadStream, EveryIsaSumsTheWordsAsTheReference) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(4096 + 64);
  for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
  // Offsets and lengths cover the vector loops, their tails and a last partial word.
  for (size_t offset : {0, 1, 8, 33}) {
    for (size_t bytes : {0, 1, 7, 8, 31, 32, 127, 128, 255, 256, 1000, 4096}) {
      const uint8_t* p = data.data() + offset;
      uint64_t expected = 0;
      for (size_t i = 0; i < bytes; i += 8) {
        uint64_t w = 0;
        for (size_t b = 0; b < 8 && i + b < bytes; ++b) w |= uint64_t{p[i + b]} << (8 * b);
        expected += w;
      }
      for (const KernelTable* table : available_kernels()) {
        ASSERT_NE(table->read_stream, nullptr) << table->isa;
        EXPECT_EQ(table->read_stream(p, bytes), expected)
            << table->isa << " offset " << offset << " bytes " << bytes;
      }
    }
  }
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

void add_cache(const std::filesystem::path& cpu, int index, int level, const std::string& type,
               const std::string& size, const std::string& shared) {
  const auto dir = cpu / "cache" / ("index" + std::to_string(index));
  write_file(dir / "level", std::to_string(level));
  write_file(dir / "type", type);
  write_file(dir / "size", size);
  write_file(dir / "shared_cpu_list", shared);
}

TEST(ReadBandwidth, LastLevelCacheFromSysfs) {
  const auto root =
      std::filesystem::path(::testing::TempDir()) / ("inferd_sysfs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  // Four CPUs, two L3 instances of 16 MiB (CPUs 0-1 and 2-3), private L1/L2.
  for (int c = 0; c < 4; ++c) {
    const auto cpu = root / ("cpu" + std::to_string(c));
    add_cache(cpu, 0, 1, "Data", "32K", std::to_string(c));
    add_cache(cpu, 1, 1, "Instruction", "32K", std::to_string(c));
    add_cache(cpu, 2, 2, "Unified", "512K", std::to_string(c));
    add_cache(cpu, 3, 3, "Unified", "16384K", c < 2 ? "0-1" : "2-3");
  }
  write_file(root / "cpufreq" / "policy", "x");  // not a cpuN folder
  EXPECT_EQ(last_level_cache_bytes(root.string()), size_t{32} << 20);
  EXPECT_EQ(last_level_cache_bytes((root / "absent").string()), 0u);
  std::filesystem::remove_all(root);
  EXPECT_GE(read_bandwidth_probe_bytes(), size_t{1} << 30);
  EXPECT_EQ(read_bandwidth_probe_bytes() % (size_t{2} << 20), 0u);
}

TEST(ReadBandwidth, ProbeGivesAPositiveFiniteFigure) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    const ReadBandwidth r = measure_read_bandwidth(pool, size_t{8} << 20, 3);
    EXPECT_TRUE(std::isfinite(r.best_bytes_per_second)) << threads;
    EXPECT_GT(r.best_bytes_per_second, 0) << threads;
    EXPECT_GT(r.median_bytes_per_second, 0) << threads;
    EXPECT_LE(r.median_bytes_per_second, r.best_bytes_per_second) << threads;
    EXPECT_EQ(r.buffer_bytes, size_t{8} << 20);
    EXPECT_EQ(r.passes, 3);
    EXPECT_EQ(r.threads, threads);
    EXPECT_EQ(r.isa, active_kernels().isa);
  }
  ThreadPool pool(2);  // a buffer smaller than a page per thread still reads every slice
  EXPECT_GT(measure_read_bandwidth(pool, 100, 1, reference_kernels()).best_bytes_per_second, 0);
}

TEST(ReadBandwidth, FractionAboveOneSaysTheBoundIsWrong) {
  EXPECT_EQ(app::describe_bandwidth_fraction(0.834), "83% of bandwidth");
  EXPECT_EQ(app::describe_bandwidth_fraction(1.0), "100% of bandwidth");
  const std::string over = app::describe_bandwidth_fraction(1.18);
  EXPECT_EQ(over.rfind("100% of bandwidth (decode read 118% of the probe's figure", 0), 0u) << over;
  EXPECT_NE(over.find("the bound is wrong"), std::string::npos) << over;
}

}  // namespace
}  // namespace inferd::kernels
