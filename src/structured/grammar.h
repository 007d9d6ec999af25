// Constrained decoding: output that must match a JSON Schema, a regular expression, a list of
// choices or a grammar. The grammar engine is XGrammar (the one vLLM and SGLang use); this module
// keeps it behind two small types. GrammarCompiler turns a request's constraint into a compiled
// grammar (on the HTTP or CLI thread, so a bad one is refused before the request is queued);
// GrammarMatcher follows one output through it on the engine thread: which tokens may come next
// (a bit per token) and the tokens taken.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace inferd::structured {

// What the output must match.
struct GrammarSpec {
  enum class Kind {
    kJsonObject,  // any JSON object (OpenAI's response_format json_object)
    kJsonSchema,  // `text` is a JSON Schema (checked by check_json_schema first)
    kRegex,       // `text` is a regular expression the whole output matches
    kChoice,      // exactly one of `choices`
    kEbnf,        // `text` is a grammar in GBNF / XGrammar EBNF, start rule `root`
    kAnyOf,       // one of `alternatives` (each a kJsonSchema spec), after `lead`
  };
  Kind kind = Kind::kJsonObject;
  std::string text;
  std::vector<std::string> choices;
  // JSON kinds: whitespace between tokens allowed (in runs of at most 20), or compact JSON with
  // ", " and ": " separators (the default; vLLM's disable_any_whitespace).
  bool any_whitespace = false;
  // kJsonSchema: literal text before and after the JSON (a tool call's tags).
  std::string prefix{}, suffix{};
  // kAnyOf: the choices (one tool call of several functions, each with its own tags) and what
  // may come before the chosen one, as an EBNF grammar with start rule `root` ("": nothing; a
  // model's reasoning before the call it is made to write).
  std::vector<GrammarSpec> alternatives{};
  std::string lead{};
};

// A grammar compiled against one vocabulary; shared by every request that uses it.
class CompiledGrammar;

class GrammarCompiler {
 public:
  // Learns the vocabulary: each token's bytes (special tokens never match grammar text; the
  // end-of-generation tokens end the output once the grammar is complete). `n_vocab` is the
  // model's logits width, which may exceed the tokenizer's vocabulary.
  GrammarCompiler(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab, int threads = 2);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Thread-safe. Throws inferd::Error naming what is malformed or unsupported (a JSON Schema
  // keyword that would not be enforced, a regex or grammar that does not parse).
  std::shared_ptr<const CompiledGrammar> compile(const GrammarSpec& spec) const;

  int32_t n_vocab() const { return n_vocab_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int32_t n_vocab_;
};

// One output's position in a grammar. All memory is allocated at construction.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(const GrammarMatcher&) = delete;
  GrammarMatcher& operator=(const GrammarMatcher&) = delete;

  // Computes which tokens the grammar allows next, once per position: later calls before the
  // next accepted token return at once. May run on another thread than the engine's (the mask
  // prefetcher), as long as no other call on this matcher runs at the same time. Throws
  // inferd::Error when the grammar engine fails.
  void fill();
  // fill() for a background thread: false, and nothing filled, where fill() would throw.
  bool try_fill() noexcept;
  // Sets the logit of every token the grammar does not allow next to -infinity (filling first
  // where that is not done yet). `logits` is [n_vocab].
  // Once fill() is done, only the logits are written: several matchers may mask their rows on
  // several threads.
  void mask(std::span<float> logits);
  // What the mask of the current position cost, in seconds: computing it (fill) and applying
  // it to the logits (mask).
  double fill_seconds() const { return fill_seconds_; }
  double apply_seconds() const { return apply_seconds_; }
  // Takes a sampled token. False when the grammar does not allow it (nothing changes then).
  bool accept(int32_t token);
  // accept(), with the grammar engine's advance left to the next fill(): on a prefetch or pool
  // thread, not on the sampling step's. The token is checked against the current mask first
  // (which is exactly what the matcher accepts): false, and nothing changes, when it is not
  // allowed.
  bool take(int32_t token);
  // The grammar is complete and an end-of-generation token was taken.
  bool terminated();
  // Whether `token` may come next (fills the mask).
  bool allows(int32_t token);

 private:
  void apply(std::span<float> logits);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<int32_t>
      bitmask_;  // [ceil(n_vocab / 32)]: bit t % 32 of word t / 32 = token t allowed
  int32_t n_vocab_;
  void advance_taken();
  int32_t taken_ = -1;   // a token take() left for the next fill(); -1: none
  bool filled_ = false;  // bitmask_ is the current position's
  double fill_seconds_ = 0, apply_seconds_ = 0;
};

}  // namespace inferd::structured
