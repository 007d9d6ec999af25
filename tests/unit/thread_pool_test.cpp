// ThreadPool: every index covered exactly once, many back-to-back regions, one thread.
#include <atomic>
#include <vector>

#include <gtest/gtest.h>

#include "util/thread_pool.h"

namespace inferd {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      pool.parallel_for(count, 16, [&](int64_t begin, int64_t end) {
        EXPECT_TRUE(begin % 16 == 0 || begin == 0);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, count " << count;
    }
  }
}

TEST(ThreadPool, DynamicForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      pool.for_each_dynamic(count, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1) << threads << " threads, count " << count;
    }
  }
}

TEST(ThreadPool, ManyRegionsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int region = 0; region < 5000; ++region) {
    pool.run([&](int thread, int threads) {
      EXPECT_EQ(threads, 2);
      total += thread + 1;
    });
  }
  EXPECT_EQ(total.load(), 5000 * 3);
}

}  // namespace
}  // namespace inferd
