// IncrementalDetokenizer: turns a stream of token ids into a stream of text that is always
// valid UTF-8, holding back the bytes of a character until its last byte has arrived.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace inferd::tokenizer {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  // Its buffers are sized here for the longest token, so push() never allocates.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  // Adds one token and returns the text it completes: whole characters only, possibly empty.
  // Bytes that can never form a character come out as U+FFFD. The view is valid until the
  // next call. Throws inferd::Error for an id outside the vocabulary (the state is unchanged).
  std::string_view push(int32_t id);

  // Ends the stream: returns the held-back bytes of a cut-off character as U+FFFD (or
  // nothing) and starts afresh.
  std::string flush();

  // Bytes held back, waiting for the rest of a character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of a character still incomplete (at most 3)
  std::string out_;      // what the last push() returned
};

}  // namespace inferd::tokenizer
