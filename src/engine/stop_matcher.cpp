#include "engine/stop_matcher.h"

#include <algorithm>

namespace inferd::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops, size_t max_piece_bytes)
    : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  size_t longest_stop = 0;
  for (const std::string& s : stops_) longest_stop = std::max(longest_stop, s.size());
  // Pending is at most a held-back stop prefix plus one piece.
  pending_.reserve(longest_stop + max_piece_bytes);
  emit_.reserve(longest_stop + max_piece_bytes);
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result result;
  emit_.clear();
  if (stopped_) return result;
  pending_.append(text);
  size_t first = std::string::npos;
  const std::string* word = nullptr;
  for (const std::string& stop : stops_) {
    if (const size_t at = pending_.find(stop); at < first) {
      first = at;
      word = &stop;
    }
  }
  if (first != std::string::npos) {
    emit_.assign(pending_, 0, first);
    result.emit = emit_;
    result.word = *word;
    result.stopped = stopped_ = true;
    pending_.clear();
    return result;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. Pending text is
  // whole characters and stop strings start with a lead byte, so the cut is on a boundary.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, pending_.size());
    for (size_t len = longest; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  emit_.assign(pending_, 0, pending_.size() - hold);
  result.emit = emit_;
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopMatcher::finish() {
  std::string out = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace inferd::engine
