#include "util/thread_pool.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

namespace inferd {
namespace {

// Spin briefly before blocking: a decode step starts a region every few tens of microseconds,
// and a futex wake-up costs more than that. When the machine is oversubscribed, spinning only
// steals time from the thread being waited for, so the spin is short and then the waiter
// blocks on the atomic (a futex; notify is a no-op while nobody waits).
constexpr int kSpinRounds = 4000;

inline void cpu_relax() {
  _mm_pause();
}

// Keeps the calling thread on `cpu`. Best effort: a refusal leaves the thread free to move.
void pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Pools are numbered so that a thread knows whose caller it was last pinned as (an address
// could be reused by a later pool).
std::atomic<uint64_t> g_next_pool_id{1};
thread_local uint64_t t_pinned_as_caller_of = 0;

}  // namespace

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

ThreadPool::ThreadPool(int num_threads, bool pin)
    : num_threads_(num_threads < 1 ? 1 : num_threads),
      id_(g_next_pool_id.fetch_add(1, std::memory_order_relaxed)) {
  if (pin && num_threads_ > 1) {
    std::vector<int> cpus = allowed_cpus();
    if (static_cast<int>(cpus.size()) == num_threads_) cpus_ = std::move(cpus);
  }
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_raw(RawJob job, void* ctx) {
  if (num_threads_ == 1) {
    job(ctx, 0, 1);
    return;
  }
  if (!cpus_.empty() && t_pinned_as_caller_of != id_) {
    pin_current_thread(cpus_[0]);
    t_pinned_as_caller_of = id_;
  }
  job_ = job;
  job_ctx_ = ctx;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  job(ctx, 0, num_threads_);
  for (int spins = 0;; ++spins) {
    const int left = pending_.load(std::memory_order_acquire);
    if (left == 0) break;
    if (spins < kSpinRounds) {
      cpu_relax();
    } else {
      pending_.wait(left, std::memory_order_acquire);
    }
  }
  job_ = nullptr;
  job_ctx_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  if (!cpus_.empty()) pin_current_thread(cpus_[static_cast<size_t>(index)]);
  uint64_t seen = 0;
  while (true) {
    for (int spins = 0; generation_.load(std::memory_order_acquire) == seen; ++spins) {
      if (spins < kSpinRounds) {
        cpu_relax();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    job_(job_ctx_, index, num_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace inferd
