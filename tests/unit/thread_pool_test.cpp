// ThreadPool: every index covered exactly once (fixed, dynamic and chunked splits), many
// back-to-back regions, one thread; pinning each thread to its own CPU when there are as many
// threads as allowed CPUs, and not otherwise.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <set>
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

TEST(ThreadPool, ChunkedForCoversEveryIndexOnceInWholeChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t count : {0, 1, 7, 64, 1000}) {
      for (int64_t chunk : {1, 3, 16, 2000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
        pool.parallel_for_chunks(count, chunk, [&](int64_t begin, int64_t end) {
          EXPECT_EQ(begin % chunk, 0);
          EXPECT_TRUE(end - begin == chunk || end == count) << begin << ".." << end;
          for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (auto& h : hits) {
          ASSERT_EQ(h.load(), 1) << threads << " threads, count " << count << ", chunk " << chunk;
        }
      }
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

// The CPUs the calling thread may run on.
std::vector<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// Runs one region of `pool` and returns each thread's CPUs, by thread index.
std::vector<std::vector<int>> cpus_in_region(ThreadPool& pool) {
  std::vector<std::vector<int>> seen(static_cast<size_t>(pool.num_threads()));
  pool.run([&](int thread, int) { seen[static_cast<size_t>(thread)] = thread_cpus(); });
  return seen;
}

// Pinning the caller changes this test thread's affinity: put it back afterwards.
class ThreadPoolPinning : public ::testing::Test {
 protected:
  void SetUp() override {
    CPU_ZERO(&saved_);
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_), 0);
  }
  void TearDown() override { pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_); }
  cpu_set_t saved_;
};

TEST_F(ThreadPoolPinning, AsManyThreadsAsCpusAreEachOnTheirOwn) {
  const std::vector<int> allowed = thread_cpus();
  if (allowed.size() < 2 || allowed.size() > 64) GTEST_SKIP() << allowed.size() << " CPUs";
  ThreadPool pool(static_cast<int>(allowed.size()), /*pin=*/true);
  ASSERT_TRUE(pool.pinned());
  const auto seen = cpus_in_region(pool);
  std::set<int> distinct;
  for (const auto& cpus : seen) {
    ASSERT_EQ(cpus.size(), 1u);
    distinct.insert(cpus[0]);
  }
  EXPECT_EQ(distinct, std::set<int>(allowed.begin(), allowed.end()));
}

TEST_F(ThreadPoolPinning, FewerThreadsThanCpusOrNoPinLeaveThreadsFree) {
  const std::vector<int> allowed = thread_cpus();
  if (allowed.size() < 2) GTEST_SKIP() << "one CPU";
  ThreadPool unpinned(static_cast<int>(allowed.size()), /*pin=*/false);
  EXPECT_FALSE(unpinned.pinned());
  for (const auto& cpus : cpus_in_region(unpinned)) EXPECT_EQ(cpus, allowed);
  if (allowed.size() >= 3) {
    ThreadPool fewer(2, /*pin=*/true);
    EXPECT_FALSE(fewer.pinned());
  }
  ThreadPool more(static_cast<int>(allowed.size()) + 1, /*pin=*/true);
  EXPECT_FALSE(more.pinned());
  for (const auto& cpus : cpus_in_region(more)) EXPECT_EQ(cpus, allowed);
}

}  // namespace
}  // namespace inferd
