// Vocab: the token table of a model (texts, types, scores, BPE merges, special ids, BOS/EOS
// flags), validated once. It knows nothing about how text is split; encoders read it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace inferd::gguf {
class GgufFile;
}

namespace inferd::tokenizer {

inline constexpr int32_t kNoToken = -1;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Ids of tokens with a role; kNoToken when the model has none.
struct SpecialIds {
  int32_t bos = kNoToken;
  int32_t eos = kNoToken;
  int32_t eot = kNoToken;  // end of turn; found by text ("<|im_end|>", ...) when not given
  int32_t eom = kNoToken;
  int32_t unk = kNoToken;
  int32_t sep = kNoToken;
  int32_t pad = kNoToken;
  int32_t mask = kNoToken;
  int32_t fim_pre = kNoToken;
  int32_t fim_suf = kNoToken;
  int32_t fim_mid = kNoToken;
  int32_t fim_pad = kNoToken;
  int32_t fim_rep = kNoToken;
  int32_t fim_sep = kNoToken;
};

// GGUF key of each special id ("tokenizer.ggml.bos_token_id", ...).
struct SpecialIdKey {
  std::string_view key;
  int32_t SpecialIds::*field;
};
std::span<const SpecialIdKey> special_id_keys();

// Everything a Vocab is made from, as plain data: filled from a GGUF file or by hand in tests.
struct VocabData {
  std::string model = "gpt2";       // tokenizer.ggml.model
  std::string pre = "default";      // tokenizer.ggml.pre
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens; the id is the index
  std::vector<TokenType> types;     // empty: every token is kNormal
  std::vector<float> scores;        // empty: no scores
  std::vector<std::string> merges;  // "left right"; the rank is the index
  SpecialIds special;
  std::optional<bool> add_bos;  // nullopt: the default for this model and pre-tokenizer
  std::optional<bool> add_eos;
  std::optional<bool> add_space_prefix;  // nullopt: true for "llama", false otherwise
  // general.name: the reference gives some models per-token rules by name (Phi-3 drops the
  // whitespace after its special tokens).
  std::string name;
};

class Vocab {
 public:
  struct Merge {
    int32_t rank = 0;
    int32_t result = kNoToken;  // the token the two parts become
  };

  // Checks the data and throws inferd::Error naming the GGUF key of the first problem.
  explicit Vocab(VocabData data);
  // Reads tokenizer.ggml.* from a model file.
  static Vocab from_gguf(const gguf::GgufFile& file);

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool contains(int64_t id) const { return id >= 0 && id < size(); }
  const std::string& text(int32_t id) const { return texts_.at(id); }
  TokenType type(int32_t id) const { return types_.at(id); }
  float score(int32_t id) const { return scores_.empty() ? 0.0f : scores_.at(id); }
  bool has_scores() const { return !scores_.empty(); }
  // Control and unknown tokens: markers the model sees, never text a user typed.
  bool is_control(int32_t id) const;
  // Id of the token whose text is exactly `text`, or kNoToken.
  int32_t find(std::string_view text) const;

  // The merge of two adjacent tokens, or nullptr when they never merge.
  const Merge* find_merge(int32_t left, int32_t right) const;
  size_t num_merges() const { return merges_.size(); }

  const std::string& model() const { return model_; }
  const std::string& pre() const { return pre_; }
  const SpecialIds& special() const { return special_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // SentencePiece: text runs start with a space, and decoding drops the first token's one.
  bool add_space_prefix() const { return add_space_prefix_; }
  // Special-token splitting drops the whitespace right after this token (reference: RSTRIP).
  bool strips_right(int32_t id) const { return !strips_right_.empty() && strips_right_.at(id); }
  // Tokens that end generation: EOS, EOT, EOM and the usual end markers found by text
  // (gpt-oss: <|return|> and <|call|>, not <|end|>).
  const std::vector<int32_t>& eog_ids() const { return eog_ids_; }
  bool is_eog(int32_t id) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  void index_tokens();
  void check_special_ids();
  void promote_control_texts();
  void index_merges(const std::vector<std::string>& merges);
  void find_end_tokens();
  void apply_harmony_rules();
  void apply_name_rules(std::string_view name);

  std::string model_;
  std::string pre_;
  std::vector<std::string> texts_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: left << 32 | right
  SpecialIds special_;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_space_prefix_ = false;
  std::vector<int32_t> eog_ids_;
  std::vector<bool> strips_right_;  // empty: no token strips
};

// Default of tokenizer.ggml.add_bos_token when a file does not say (as llama.cpp decides).
bool default_add_bos(std::string_view model, std::string_view pre);

}  // namespace inferd::tokenizer
