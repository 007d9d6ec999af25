#include "structured/grammar.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "structured/schema_support.h"
#include "util/error.h"

namespace inferd::structured {

class CompiledGrammar {
 public:
  CompiledGrammar(xgrammar::CompiledGrammar grammar, std::vector<int> stop_tokens, int32_t n_vocab)
      : grammar(std::move(grammar)), stop_tokens(std::move(stop_tokens)), n_vocab(n_vocab) {}
  xgrammar::CompiledGrammar grammar;
  std::vector<int> stop_tokens;
  int32_t n_vocab;
};

namespace {

xgrammar::TokenizerInfo make_tokenizer_info(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab,
                                            std::vector<int>& stop_tokens) {
  const int32_t size = tokenizer.vocab().size();
  // Each token as the bytes it adds to the output. Special tokens ("<|im_end|>", BOS) are
  // given as empty strings, which the engine never lets grammar text use.
  std::vector<std::string> pieces(static_cast<size_t>(n_vocab));
  for (int32_t id = 0; id < size && id < n_vocab; ++id) {
    if (!tokenizer.is_special(id)) pieces[static_cast<size_t>(id)] = tokenizer.token_piece(id);
  }
  stop_tokens.assign(tokenizer.vocab().eog_ids().begin(), tokenizer.vocab().eog_ids().end());
  return xgrammar::TokenizerInfo(pieces, xgrammar::VocabType::RAW, n_vocab,
                                 std::vector<int32_t>(stop_tokens.begin(), stop_tokens.end()));
}

// A string as an EBNF literal: quoted, with the characters that end or escape it escaped and
// the control bytes written as \xNN.
std::string ebnf_literal(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// JSON is generated compact by default ({"a": 1, "b": [2, 3]}, as OpenAI's structured outputs
// return it): where the grammar lets whitespace in, a small model sampled at a high temperature
// can fill it with tabs and newlines until max_tokens truncates the JSON. With any_whitespace
// each run is capped (llama.cpp's JSON grammars cap it likewise); runs can still meet where
// two optional parts of the grammar meet.
constexpr int kMaxWhitespace = 20;

}  // namespace

struct GrammarCompiler::Impl {
  Impl(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab, int threads)
      : info(make_tokenizer_info(tokenizer, n_vocab, stop_tokens)),
        compiler(info, threads, /*cache_enabled=*/true, /*max_memory_bytes=*/256 << 20) {}
  std::vector<int> stop_tokens;
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  std::mutex mutex;  // one compilation at a time (each uses `threads` already)
};

namespace {

// A kJsonSchema spec as a grammar still to compile: its prefix, the JSON, its suffix.
xgrammar::Grammar json_grammar(const GrammarSpec& spec, const std::string& schema_text) {
  const std::optional<int> whitespace =
      spec.any_whitespace ? std::optional<int>(kMaxWhitespace) : std::nullopt;
  std::vector<xgrammar::Grammar> parts;
  if (!spec.prefix.empty())
    parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(spec.prefix)));
  parts.push_back(xgrammar::Grammar::FromJSONSchema(schema_text, spec.any_whitespace, std::nullopt,
                                                    std::nullopt, /*strict_mode=*/true,
                                                    whitespace));
  if (!spec.suffix.empty())
    parts.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(spec.suffix)));
  return parts.size() == 1 ? parts[0] : xgrammar::Grammar::Concat(parts);
}

// A JSON Schema as the grammar engine gets it: checked, and reduced to what it enforces.
std::string prepared_schema(const std::string& text) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("the JSON schema is not valid JSON: {}", e.what());
  }
  return prepare_json_schema(schema).dump();
}

// kAnyOf: the union of its alternatives, after its lead.
xgrammar::Grammar any_of_grammar(const GrammarSpec& spec) {
  if (spec.alternatives.empty()) fail("the list of alternatives is empty");
  std::vector<xgrammar::Grammar> options;
  for (const GrammarSpec& alternative : spec.alternatives) {
    if (alternative.kind != GrammarSpec::Kind::kJsonSchema)
      fail("an alternative of a grammar must be a JSON schema");
    options.push_back(json_grammar(alternative, prepared_schema(alternative.text)));
  }
  xgrammar::Grammar body = options.size() == 1 ? options[0] : xgrammar::Grammar::Union(options);
  if (spec.lead.empty()) return body;
  return xgrammar::Grammar::Concat({xgrammar::Grammar::FromEBNF(spec.lead), body});
}

}  // namespace

GrammarCompiler::GrammarCompiler(const tokenizer::Tokenizer& tokenizer, int32_t n_vocab,
                                 int threads)
    : impl_(std::make_unique<Impl>(tokenizer, n_vocab, threads)), n_vocab_(n_vocab) {}

GrammarCompiler::~GrammarCompiler() = default;

std::shared_ptr<const CompiledGrammar> GrammarCompiler::compile(const GrammarSpec& spec) const {
  using Kind = GrammarSpec::Kind;
  const std::string schema_text = spec.kind == Kind::kJsonSchema ? prepared_schema(spec.text) : "";
  if (spec.kind == Kind::kChoice && spec.choices.empty()) fail("the list of choices is empty");
  if ((spec.kind == Kind::kRegex || spec.kind == Kind::kEbnf) && spec.text.empty())
    fail("the {} is empty", spec.kind == Kind::kRegex ? "regular expression" : "grammar");
  std::lock_guard lock(impl_->mutex);
  try {
    xgrammar::GrammarCompiler& c = impl_->compiler;
    const std::optional<int> whitespace =
        spec.any_whitespace ? std::optional<int>(kMaxWhitespace) : std::nullopt;
    auto compiled = [&]() -> xgrammar::CompiledGrammar {
      switch (spec.kind) {
        case Kind::kJsonObject:
          // Any JSON object (the built-in JSON grammar would allow any value at the top).
          return c.CompileJSONSchema(R"({"type": "object"})", spec.any_whitespace, std::nullopt,
                                     std::nullopt, /*strict_mode=*/false, whitespace);
        case Kind::kJsonSchema:
          if (spec.prefix.empty() && spec.suffix.empty()) {
            return c.CompileJSONSchema(schema_text, spec.any_whitespace, std::nullopt, std::nullopt,
                                       /*strict_mode=*/true, whitespace);
          }
          return c.CompileGrammar(json_grammar(spec, schema_text));
        case Kind::kRegex:
          return c.CompileRegex(spec.text);
        case Kind::kChoice: {
          std::string rule = "root ::= ";
          for (size_t i = 0; i < spec.choices.size(); ++i)
            rule += (i ? " | " : "") + ebnf_literal(spec.choices[i]);
          return c.CompileGrammar(rule, "root");
        }
        case Kind::kEbnf:
          return c.CompileGrammar(spec.text, "root");
        case Kind::kAnyOf:
          return c.CompileGrammar(any_of_grammar(spec));
      }
      fail("unknown grammar kind");
    }();
    return std::make_shared<const CompiledGrammar>(std::move(compiled), impl_->stop_tokens,
                                                   n_vocab_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}", e.what());
  }
}

struct GrammarMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledGrammar> compiled)
      : grammar(std::move(compiled)), matcher(grammar->grammar, grammar->stop_tokens) {}
  std::shared_ptr<const CompiledGrammar> grammar;  // kept alive for the matcher
  xgrammar::GrammarMatcher matcher;
  DLTensor tensor{};
  int64_t shape[1] = {0};
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : n_vocab_(grammar->n_vocab) {
  impl_ = std::make_unique<Impl>(std::move(grammar));
  bitmask_.assign(static_cast<size_t>(xgrammar::GetBitmaskSize(n_vocab_)), 0);
  impl_->shape[0] = static_cast<int64_t>(bitmask_.size());
  DLTensor& t = impl_->tensor;
  t.data = bitmask_.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = impl_->shape;
  t.strides = nullptr;
  t.byte_offset = 0;
}

GrammarMatcher::~GrammarMatcher() = default;

void GrammarMatcher::advance_taken() {
  if (taken_ < 0) return;
  const int32_t token = taken_;
  try {
    if (!impl_->matcher.AcceptToken(token))
      fail("the grammar engine refused token {}, which its mask allowed", token);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("the grammar engine failed to take token {}: {}", token, e.what());
  }
  taken_ = -1;  // only once taken: a failure is reported again by the engine's own fill
}

void GrammarMatcher::fill() {
  advance_taken();
  if (filled_) return;
  const auto started = std::chrono::steady_clock::now();
  try {
    impl_->matcher.FillNextTokenBitmask(&impl_->tensor);
  } catch (const std::exception& e) {
    fail("the grammar engine failed to compute the next token mask: {}", e.what());
  }
  fill_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  filled_ = true;
}

bool GrammarMatcher::try_fill() noexcept {
  try {
    fill();
    return true;
  } catch (...) {
    return false;
  }
}

void GrammarMatcher::mask(std::span<float> logits) {
  fill();
  apply(logits);
}

void GrammarMatcher::apply(std::span<float> logits) {
  const auto started = std::chrono::steady_clock::now();
  const auto n =
      static_cast<int32_t>(std::min<size_t>(logits.size(), static_cast<size_t>(n_vocab_)));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Restrictive positions (after a key, inside a number, in an e-mail address) forbid most of a
  // large vocabulary, scattered over every word of the mask: the ISA's kernel stores -inf into
  // those lanes a vector at a time.
  static_assert(sizeof(int32_t) == sizeof(uint32_t));
  kernels::active_kernels().mask_logits(reinterpret_cast<const uint32_t*>(bitmask_.data()),
                                        logits.data(), n);
  for (size_t t = static_cast<size_t>(n); t < logits.size(); ++t) logits[t] = kNegInf;
  apply_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
}

bool GrammarMatcher::accept(int32_t token) {
  advance_taken();
  if (!impl_->matcher.AcceptToken(token)) return false;
  filled_ = false;
  return true;
}

bool GrammarMatcher::take(int32_t token) {
  if (!allows(token)) return false;
  taken_ = token;
  filled_ = false;
  return true;
}

bool GrammarMatcher::terminated() {
  advance_taken();
  return impl_->matcher.IsTerminated();
}

bool GrammarMatcher::allows(int32_t token) {
  if (token < 0 || token >= n_vocab_) return false;
  fill();
  return ((static_cast<uint32_t>(bitmask_[static_cast<size_t>(token / 32)]) >> (token % 32)) &
          1u) != 0;
}

}  // namespace inferd::structured
