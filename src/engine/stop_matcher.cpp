#include "engine/stop_matcher.h"

#include <algorithm>

namespace inferd::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
  Result result;
  if (stopped_) return result;
  pending_.append(text);
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    result.emit = pending_.substr(0, first);
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
  result.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopMatcher::finish() {
  std::string out = stopped_ ? std::string() : std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace inferd::engine
