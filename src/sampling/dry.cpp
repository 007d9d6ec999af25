#include "sampling/dry.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/tokenizer.h"

namespace inferd::sampling {

std::shared_ptr<const DryBreakers> DryBreakers::build(const tokenizer::Tokenizer& tokenizer,
                                                      const std::vector<std::string>& breakers) {
  auto out = std::make_shared<DryBreakers>();
  const auto n_vocab = static_cast<int32_t>(tokenizer.vocab().size());
  for (std::string breaker : breakers) {
    if (breaker.empty()) continue;
    if (breaker.size() > kMaxChars) breaker.resize(kMaxChars);
    for (int32_t id = 0; id < n_vocab; ++id) {
      const std::string& word = tokenizer.token_piece(id);
      if (word.find(breaker) != std::string::npos) {
        out->add(id, {});
        continue;
      }
      // The token ends with the breaker's first i characters: the rest must follow in tokens.
      for (size_t pos = word.find(breaker[0]); pos != std::string::npos;
           pos = word.find(breaker[0], pos + 1)) {
        const size_t i = word.size() - pos;  // (< breaker.size(): the whole would be found)
        if (word.compare(pos, i, breaker, 0, i) != 0) continue;
        std::vector<int32_t> tail =
            tokenizer.encode(std::string_view(breaker).substr(i), false, false);
        if (tail.size() > kMaxTail) tail.resize(kMaxTail);
        out->add(id, std::move(tail));
      }
    }
  }
  return out;
}

std::shared_ptr<const DryBreakers> DryBreakers::from_tokens(
    const std::vector<std::vector<int32_t>>& sequences) {
  auto out = std::make_shared<DryBreakers>();
  for (const std::vector<int32_t>& s : sequences) {
    if (!s.empty()) out->add(s.front(), std::vector<int32_t>(s.begin() + 1, s.end()));
  }
  return out;
}

void DryBreakers::add(int32_t head, std::vector<int32_t> tail) {
  std::vector<std::vector<int32_t>>& tails = by_head_[head];
  if (std::find(tails.begin(), tails.end(), tail) == tails.end()) tails.push_back(std::move(tail));
}

std::span<const std::vector<int32_t>> DryBreakers::tails(int32_t head) const {
  const auto it = by_head_.find(head);
  if (it == by_head_.end()) return {};
  return it->second;
}

bool DryBreakers::breaks_alone(int32_t token) const {
  for (const std::vector<int32_t>& tail : tails(token))
    if (tail.empty()) return true;
  return false;
}

DryPenalty::DryPenalty(const SamplingParams& params, std::shared_ptr<const DryBreakers> breakers,
                       int32_t n_vocab)
    : multiplier_(params.dry_multiplier),
      base_(params.dry_base),
      allowed_length_(params.dry_allowed_length),
      last_n_(params.dry_penalty_last_n),
      breakers_(breakers ? std::move(breakers) : std::make_shared<DryBreakers>()) {
  constexpr int32_t kReservedWindow = 1 << 16;  // "the whole text" grows past this only rarely
  repeat_.reserve(
      static_cast<size_t>(last_n_ > 0 ? std::min(last_n_, kReservedWindow) : kReservedWindow));
  max_repeat_.assign(static_cast<size_t>(n_vocab), -1);
  touched_.reserve(repeat_.capacity());
}

void DryPenalty::apply(std::span<const int32_t> prompt, std::span<const int32_t> output,
                       std::span<float> logits) {
  const size_t total = prompt.size() + output.size();
  const auto n =
      static_cast<int32_t>(last_n_ < 0 ? total : std::min(total, static_cast<size_t>(last_n_)));
  if (n <= allowed_length_) return;
  // The i-th token from the end (0: the last).
  const auto back = [&](int32_t i) {
    const size_t at = total - 1 - static_cast<size_t>(i);
    return at < prompt.size() ? prompt[at] : output[at - prompt.size()];
  };

  // A repeat reaches back at most to the latest complete breaker: tokens after it only.
  int32_t limit = n;
  for (int32_t i = 0; i < n; ++i) {
    int32_t longest = -1;  // the longest tail that completes a breaker whose head is back(i)
    for (const std::vector<int32_t>& tail : breakers_->tails(back(i))) {
      const auto len = static_cast<int32_t>(tail.size());
      if (len <= longest || len > i) continue;
      bool match = true;
      for (int32_t k = 0; k < len && match; ++k)
        match = tail[static_cast<size_t>(k)] == back(i - k - 1);
      if (match) longest = len;
    }
    if (longest >= 0) {
      limit = i - longest;
      break;
    }
  }
  if (limit < allowed_length_) return;

  // repeat_[k]: how many of the last tokens also end k tokens before the end (the Z-function
  // of the text read backwards), so the token after that earlier run, back(k - 1), would
  // extend a repeat of that length.
  repeat_.assign(static_cast<size_t>(n), 0);
  for (int32_t k = 1, left = 0, right = 0; k < n; ++k) {
    int32_t len = 0;
    if (k < right) len = std::min(right - k, repeat_[static_cast<size_t>(k - left)]);
    while (k + len < n && back(len) == back(k + len)) ++len;
    if (k + len > right) left = k, right = k + len;
    repeat_[static_cast<size_t>(k)] = len;
  }
  for (int32_t k = 1; k < n; ++k) {
    const int32_t len = std::min(repeat_[static_cast<size_t>(k)], limit);
    if (len < allowed_length_) continue;
    const int32_t token = back(k - 1);
    int32_t& longest = max_repeat_[static_cast<size_t>(token)];
    if (longest < 0) touched_.push_back(token);
    longest = std::max(longest, len);
  }

  // base ^ exponent is kept below FLT_MAX.
  constexpr double kLogFloatMax = 88.7228391;
  const int32_t max_exponent =
      base_ > 1.000001f ? static_cast<int32_t>(kLogFloatMax / std::log(double(base_))) : 0;
  for (const int32_t token : touched_) {
    int32_t& longest = max_repeat_[static_cast<size_t>(token)];
    if (static_cast<size_t>(token) < logits.size() && !breakers_->breaks_alone(token)) {
      int32_t exponent = longest - allowed_length_;
      if (max_exponent > 0) exponent = std::min(exponent, max_exponent);
      logits[static_cast<size_t>(token)] -=
          static_cast<float>(double(multiplier_) * std::pow(double(base_), exponent));
    }
    longest = -1;
  }
  touched_.clear();
}

}  // namespace inferd::sampling
