// The tiny random model (tiny_model.h) with a vocabulary, behind an Engine: for tests of what
// the engine does with sequences (forks, beams, drafts) rather than of what the model computes.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tiny_model.h"

namespace inferd::engine {

// Collects a request's text and result; cancels after a number of polls when asked to.
class Collect final : public OutputChannel {
 public:
  explicit Collect(int cancel_after_polls = -1) : cancel_after_(cancel_after_polls) {}
  void on_text(std::string_view text) override { text_ += text; }
  void on_token(int32_t token, float logprob,
                std::span<const sampling::TokenLogprob> top) override {
    tokens_.push_back(token);
    logprobs_.push_back(logprob);
    if (!top.empty()) top_tokens_.push_back(top.front().token);
  }
  void on_finish(const RequestResult& result) override { result_ = result; }
  // With logprobs: how many tokens each step reported (steps of none too).
  void on_step_end() override {
    step_tokens_.push_back(tokens_.size() - tokens_at_step_end_);
    tokens_at_step_end_ = tokens_.size();
  }
  bool cancelled() const override { return cancel_after_ >= 0 && polls_++ >= cancel_after_; }
  RequestResult result_;
  std::string text_;
  std::vector<int32_t> tokens_, top_tokens_;  // with logprobs: each token and its top one
  std::vector<float> logprobs_;
  std::vector<size_t> step_tokens_;
  size_t tokens_at_step_end_ = 0;

 private:
  int cancel_after_;
  mutable int polls_ = 0;
};

// A request that samples the whole distribution (temperature 1, no top-k/top-p/min-p) with a
// fixed seed, ignoring EOS: n > 1 choices of it must equal separate requests with their seeds.
inline Request seeded_request(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = seed;
  return r;
}

// n > 1 choices of `r`: n new outputs, appended to `outs`, the first as r.output and the others
// as r.more_outputs.
inline void add_choice_outputs(Request& r, int n, std::vector<std::shared_ptr<Collect>>& outs) {
  for (int i = 0; i < n; ++i) {
    outs.push_back(std::make_shared<Collect>());
    if (i == 0) {
      r.output = outs.back();
    } else {
      r.more_outputs.push_back(outs.back());
    }
  }
}

// Two threads, no pinning, a context of 256 tokens.
inline EngineConfig tiny_engine_config(int max_seqs, bool prefix_cache = true) {
  EngineConfig c;
  c.threads = 2;
  c.pin_threads = false;
  c.context = 256;
  c.max_seqs = max_seqs;
  c.prefix_caching = prefix_cache;
  return c;
}

// BOS, then a walk over tokens 3..45 from `offset` (for vocabularies of at least 46).
inline std::vector<int32_t> walk_prompt(int n, int offset) {
  std::vector<int32_t> out{1};
  for (int i = 1; i < n; ++i) out.push_back(3 + (i * 7 + offset) % 43);
  return out;
}

// A greedy request that ignores EOS.
inline Request greedy_request(std::vector<int32_t> prompt, std::shared_ptr<Collect> out,
                              int64_t max_tokens = 24) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.output = std::move(out);
  return r;
}

// Runs `r` to its end with a collector as its output; it must stop at max_tokens. Its tokens.
inline std::vector<int32_t> generate_to_length(Engine& e, Request r) {
  auto out = std::make_shared<Collect>();
  r.output = out;
  e.add_request(std::move(r));
  e.run_until_idle();
  EXPECT_EQ(out->result_.finish_reason, FinishReason::kLength) << out->result_.error;
  return out->result_.output_tokens;
}

class TinyEngineFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TinyLlamaSpec spec;
    spec.n_vocab = 24;
    spec.with_tokenizer = true;
    spec.seed = 5;
    bytes_ = testing::make_tiny_llama(spec);
    file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::parse(bytes_));
  }
  static EngineConfig config(int max_seqs, bool prefix_cache = true) {
    return tiny_engine_config(max_seqs, prefix_cache);
  }
  std::unique_ptr<Engine> engine(int max_seqs, bool prefix_cache = true) {
    return std::make_unique<Engine>(*file_, config(max_seqs, prefix_cache));
  }
  std::unique_ptr<Engine> engine(const EngineConfig& c) {
    return std::make_unique<Engine>(*file_, c);
  }
  // BOS, then a repeating walk over the vocabulary's ordinary tokens.
  static std::vector<int32_t> prompt(int n) {
    std::vector<int32_t> out{1};
    for (int i = 1; i < n; ++i) out.push_back(3 + (i * 7) % 21);
    return out;
  }

  std::vector<uint8_t> bytes_;
  std::unique_ptr<gguf::GgufFile> file_;
};

}  // namespace inferd::engine
