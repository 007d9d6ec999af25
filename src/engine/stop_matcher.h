// StopMatcher: finds stop strings in streamed text. Text that could still grow into a stop
// string is held back, so a stop string (or any part of it) never reaches the client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace inferd::engine {

class StopMatcher {
 public:
  // Buffers are sized for pieces of up to `max_piece_bytes`, so push() does not allocate.
  explicit StopMatcher(std::vector<std::string> stops, size_t max_piece_bytes = 256);

  struct Result {
    std::string_view emit;  // safe to send now; valid until the next call
    bool stopped = false;   // a stop string was found; `emit` is the text before it
    std::string_view word;  // when stopped: the stop string found (the earliest in the text)
  };
  // Adds a piece of text (whole UTF-8 characters). When several stop strings occur, the one
  // that starts earliest wins; the text before it is emitted and the rest is dropped.
  Result push(std::string_view text);
  // The held-back text, when generation ends for another reason (EOS, length).
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  std::string emit_;  // what the last push() emitted
  bool stopped_ = false;
};

}  // namespace inferd::engine
