// DRY ("don't repeat yourself", koboldcpp's sampler as llama.cpp has it): a token that would make
// the end of the text repeat an earlier passage longer than an allowed length loses
// multiplier * base ^ (repeat length - allowed length) of its logit. Repeats do not reach back
// over a sequence breaker (a newline, a colon, ...), so a list or a dialogue's speaker names are
// not penalised for their shape.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "sampling/sampling_params.h"

namespace inferd::tokenizer {
class Tokenizer;
}

namespace inferd::sampling {

// The sequence breakers as token sequences. A breaker string shows up in tokens as a head token
// that contains it (tail empty) or whose text ends with the string's beginning, followed by the
// tokens of the rest (the tail, at most kMaxTail tokens). Built once per list of strings; shared
// read-only by the samplers of every request that uses the list.
class DryBreakers {
 public:
  static constexpr size_t kMaxChars = 40;  // longer breakers are cut (as llama.cpp does)
  static constexpr size_t kMaxTail = 20;

  // Every token's text is searched for each string: O(vocabulary x breakers). Empty strings are
  // skipped.
  static std::shared_ptr<const DryBreakers> build(const tokenizer::Tokenizer& tokenizer,
                                                  const std::vector<std::string>& breakers);
  // For tests: each sequence's first token is the head, the rest its tail.
  static std::shared_ptr<const DryBreakers> from_tokens(
      const std::vector<std::vector<int32_t>>& sequences);

  // The tails that follow `head` to complete a breaker (none: not a head).
  std::span<const std::vector<int32_t>> tails(int32_t head) const;
  // Whether `token` alone is a breaker (its text contains one): it is never penalised.
  bool breaks_alone(int32_t token) const;

 private:
  void add(int32_t head, std::vector<int32_t> tail);
  std::unordered_map<int32_t, std::vector<std::vector<int32_t>>> by_head_;
};

// DRY's scratch and computation for one sequence; sized at construction for the window, so
// apply() allocates nothing once the window is full.
class DryPenalty {
 public:
  DryPenalty(const SamplingParams& params, std::shared_ptr<const DryBreakers> breakers,
             int32_t n_vocab);

  // Subtracts the penalties from `logits` ([n_vocab]); the text is `prompt` then `output`.
  void apply(std::span<const int32_t> prompt, std::span<const int32_t> output,
             std::span<float> logits);

 private:
  float multiplier_;
  float base_;
  int32_t allowed_length_;
  int32_t last_n_;  // -1: the whole text
  std::shared_ptr<const DryBreakers> breakers_;
  std::vector<int32_t> repeat_;      // [window] the repeat length ending at each position
  std::vector<int32_t> max_repeat_;  // [n_vocab] the longest repeat a token would extend; -1 none
  std::vector<int32_t> touched_;     // ids with a max_repeat_ entry, to reset cheaply
};

}  // namespace inferd::sampling
