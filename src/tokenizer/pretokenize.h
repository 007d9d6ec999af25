// Pre-tokenizers: split text into the pieces ("words") that BPE merges within, chosen by the
// GGUF name tokenizer.ggml.pre. Each is a list of regexes applied in turn (PCRE2, UTF mode).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::tokenizer {

class PreTokenizer {
 public:
  // Throws inferd::Error for a name we do not implement, listing the ones we do.
  static std::unique_ptr<PreTokenizer> create(std::string_view name);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Splits valid UTF-8 into pieces that cover it in order. Each regex in turn splits every
  // current piece into its matches and the unmatched text between them (kept as pieces too);
  // a later regex never sees across the boundaries an earlier one made. Thread-safe.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& name() const { return name_; }
  // Some tokenizers take a piece that is already a whole token as is, without merging.
  bool ignore_merges() const { return ignore_merges_; }

  static std::vector<std::string_view> known_names();

 private:
  struct Regex;
  PreTokenizer() = default;

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace inferd::tokenizer
