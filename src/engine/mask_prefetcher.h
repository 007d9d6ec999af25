// MaskPrefetcher: computes the grammar masks of a step on a thread of its own while the forward
// pass of that step runs. A mask depends only on the tokens taken so far, never on the logits,
// so it can be ready by the time the logits are. Worth it only where a CPU is free beyond the
// forward pass's threads (those spin on their own CPUs); the engine decides.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "structured/grammar.h"

namespace inferd::engine {

class MaskPrefetcher {
 public:
  // `capacity`: the most matchers one step hands over (the engine's max_seqs).
  explicit MaskPrefetcher(size_t capacity);
  ~MaskPrefetcher();
  MaskPrefetcher(const MaskPrefetcher&) = delete;
  MaskPrefetcher& operator=(const MaskPrefetcher&) = delete;

  // Starts filling `matchers` (at most `capacity`). Until wait() returns they must stay alive
  // and nothing else may call them. A matcher whose fill fails is left unfilled: the engine's
  // own mask() call then fills it and reports the error. No allocation, no lock.
  void start(std::span<structured::GrammarMatcher* const> matchers);
  // Returns once every matcher of the last start() is filled (at once when none is pending).
  void wait();

 private:
  void loop();

  std::vector<structured::GrammarMatcher*> jobs_;  // [capacity]
  size_t num_jobs_ = 0;
  std::atomic<uint64_t> posted_{0};  // start() calls so far
  std::atomic<uint64_t> done_{0};    // of them, finished by the thread
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace inferd::engine
