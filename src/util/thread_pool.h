// ThreadPool: persistent workers that run one parallel region at a time. The caller thread
// is worker 0; a region costs two spin-then-block handshakes (C++20 atomic wait) and no
// allocation.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace inferd {

// The CPUs this process may run on (sched_getaffinity), in order; empty when unknown.
std::vector<int> allowed_cpus();

class ThreadPool {
 public:
  // `num_threads` counts the caller; 1 means no extra threads. With `pin`, when the threads are
  // as many as the CPUs this process may run on (sched_getaffinity), thread i is kept on the
  // i-th of them (the caller on the first, from its first region on): waits that spin need
  // every thread on a CPU of its own, and when another process briefly takes a CPU the
  // scheduler could otherwise move a worker onto its partner's CPU, where the two then take
  // turns. With fewer threads than CPUs nothing is pinned, so other programs keep their room.
  explicit ThreadPool(int num_threads, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // True when the threads are pinned (see the constructor).
  bool pinned() const { return !cpus_.empty(); }

  // Runs fn(thread_index, num_threads) on every thread and returns when all are done.
  // `fn` must not throw. It is called through a plain pointer: nothing is copied or allocated.
  template <typename Fn>
  void run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_raw([](void* ctx, int t, int n) { (*static_cast<F*>(ctx))(t, n); },
            const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Splits [0, count) into contiguous chunks, one per thread, aligned to `grain`.
  template <typename Fn>
  void parallel_for(int64_t count, int64_t grain, Fn&& fn) {
    if (num_threads_ == 1 || count <= grain) {
      fn(int64_t{0}, count);
      return;
    }
    run([&](int thread, int threads) {
      int64_t chunks = (count + grain - 1) / grain;
      int64_t begin = chunks * thread / threads * grain;
      int64_t end = std::min(count, chunks * (thread + 1) / threads * grain);
      if (begin < end) fn(begin, end);
    });
  }

  // Splits [0, count) into chunks of `chunk` (the last may be shorter) handed out in order to
  // whichever thread is free: fn(begin, end) per chunk. For work of even cost on threads that
  // may not get even time (a shared or virtual machine): a thread that loses its CPU for a
  // while leaves its chunks to the others instead of making them wait at the end.
  template <typename Fn>
  void parallel_for_chunks(int64_t count, int64_t chunk, Fn&& fn) {
    if (num_threads_ == 1 || count <= chunk) {
      if (count > 0) fn(int64_t{0}, count);
      return;
    }
    std::atomic<int64_t> next{0};
    run([&](int, int) {
      for (int64_t b = next.fetch_add(chunk, std::memory_order_relaxed); b < count;
           b = next.fetch_add(chunk, std::memory_order_relaxed)) {
        fn(b, std::min(count, b + chunk));
      }
    });
  }

  // Hands the indices [0, count) out one at a time to whichever thread is free, for items of
  // uneven cost (attention tiles over contexts of different lengths): the threads finish
  // within one item of each other. The counter lives on the caller's stack.
  template <typename Fn>
  void for_each_dynamic(int64_t count, Fn&& fn) {
    parallel_for_chunks(count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
  }

 private:
  using RawJob = void (*)(void* ctx, int thread, int threads);
  void run_raw(RawJob job, void* ctx);
  void worker_loop(int index);

  int num_threads_;
  uint64_t id_;
  std::vector<int> cpus_;  // thread i runs on cpus_[i]; empty: not pinned
  std::vector<std::thread> workers_;
  RawJob job_ = nullptr;
  void* job_ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped to start a region
  std::atomic<int> pending_{0};          // workers still running the current region
  std::atomic<bool> stop_{false};
};

}  // namespace inferd
