// Pre-tokenizers: split text into the pieces ("words") that BPE merges within, chosen by the
// GGUF name tokenizer.ggml.pre. Each is a list of regexes applied in turn, with llama.cpp's
// semantics (the reference): see pretokenize.cpp for how those differ from plain Unicode
// regexes and how they are reproduced with PCRE2.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::tokenizer {

class PreTokenizer {
 public:
  // Throws inferd::Error for a name we do not implement, listing the ones we do.
  // `hand_written` = false runs every rule as its regex, even where a hand-written splitter
  // gives the same pieces faster (tests compare the two).
  static std::unique_ptr<PreTokenizer> create(std::string_view name, bool hand_written = true);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits text into pieces that cover it in order. Each regex in turn splits every current
  // piece into its matches and the unmatched text between them (kept as pieces too); a later
  // regex never sees across the boundaries an earlier one made. The text should be valid
  // UTF-8 or the output of lenient_utf8() (utf8_scan.h); any other byte counts as one
  // character of its own. Thread-safe.
  std::vector<std::string_view> split(std::string_view text) const;
  // The same, appending to `out` (which keeps its capacity from call to call).
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  const std::string& name() const { return name_; }
  // Some tokenizers take a piece that is already a whole token as is, without merging.
  bool ignore_merges() const { return ignore_merges_; }

  static std::vector<std::string_view> known_names();

  struct Step;  // one regex of the list, compiled

 private:
  PreTokenizer() = default;

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Step>> steps_;
};

}  // namespace inferd::tokenizer
