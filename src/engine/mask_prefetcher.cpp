#include "engine/mask_prefetcher.h"

#include "util/error.h"

namespace inferd::engine {

MaskPrefetcher::MaskPrefetcher(size_t capacity) : jobs_(capacity) {
  thread_ = std::thread([this] { loop(); });
}

MaskPrefetcher::~MaskPrefetcher() {
  wait();
  stop_.store(true, std::memory_order_release);
  posted_.fetch_add(1, std::memory_order_acq_rel);
  posted_.notify_one();
  thread_.join();
}

void MaskPrefetcher::start(std::span<structured::GrammarMatcher* const> matchers) {
  wait();  // one batch in flight at a time
  if (matchers.size() > jobs_.size())
    fail("mask prefetcher: {} matchers for {} slots", matchers.size(), jobs_.size());
  std::copy(matchers.begin(), matchers.end(), jobs_.begin());
  num_jobs_ = matchers.size();
  // The release publishes jobs_ to the thread, which reads them after its acquire.
  posted_.fetch_add(1, std::memory_order_release);
  posted_.notify_one();
}

void MaskPrefetcher::wait() {
  const uint64_t target = posted_.load(std::memory_order_relaxed);  // only start() posts
  for (uint64_t done = done_.load(std::memory_order_acquire); done != target;
       done = done_.load(std::memory_order_acquire)) {
    done_.wait(done, std::memory_order_acquire);
  }
}

void MaskPrefetcher::loop() {
  uint64_t seen = 0;
  for (;;) {
    posted_.wait(seen, std::memory_order_acquire);
    const uint64_t posted = posted_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    for (size_t i = 0; i < num_jobs_; ++i) jobs_[i]->try_fill();
    seen = posted;
    // The release publishes the filled masks to the engine thread's acquire in wait().
    done_.store(posted, std::memory_order_release);
    done_.notify_one();
  }
}

}  // namespace inferd::engine
