// Shared set-up of the model tests: the real default model (INFERD_MODEL or the cache path),
// skipped with a message when it is absent, and a collecting OutputChannel.
#pragma once

#include <cstdlib>
#include <span>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "util/paths.h"

namespace inferd::testing {

inline std::string model_path() {
  return default_model_path();
}

// The sliding-window model the engine tests run beside the default one (scripts/fetch-model).
inline std::string gemma3_path() {
  return cache_dir() + "/models/gemma-3-270m-q4_k_m.gguf";
}

// The two models engine-level tests run on: full attention (SmolLM2) and sliding window
// (Gemma 3); a test skips the one that is absent.
struct NamedModel {
  const char* name;
  std::string (*path)();
};
inline const NamedModel kEngineTestModels[] = {{"smollm2", model_path}, {"gemma3", gemma3_path}};

inline std::string source_dir() {
  if (const char* env = std::getenv("INFERD_SOURCE_DIR"); env != nullptr && *env != '\0')
    return env;
  return INFERD_SOURCE_DIR;
}

// Collects the streamed text and the final record of one request.
class CollectOutput final : public engine::OutputChannel {
 public:
  void on_text(std::string_view text) override {
    text_.append(text);
    ++pieces_;
  }
  void on_finish(const engine::RequestResult& result) override {
    result_ = result;
    ++finishes_;
  }
  // Only when the request asked for logprobs.
  void on_token(int32_t, float logprob, std::span<const sampling::TokenLogprob>) override {
    logprobs_.push_back(logprob);
  }
  bool cancelled() const override { return cancel_; }

  std::string text_;
  std::vector<float> logprobs_;
  int pieces_ = 0;
  int finishes_ = 0;
  bool cancel_ = false;
  engine::RequestResult result_;
};

// Queues `r` on `e`; its output is collected in the returned channel.
inline std::shared_ptr<CollectOutput> submit_request(engine::Engine& e, engine::Request r) {
  auto out = std::make_shared<CollectOutput>();
  r.output = out;
  e.add_request(std::move(r));
  return out;
}

// A greedy request for `prompt`, queued on `e`.
inline std::shared_ptr<CollectOutput> submit_greedy(engine::Engine& e, std::vector<int32_t> prompt,
                                                    int64_t max_tokens, bool ignore_eos = false,
                                                    std::string cache_salt = {}) {
  engine::Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = ignore_eos;
  r.cache_salt = std::move(cache_salt);
  return submit_request(e, std::move(r));
}

class ModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    file_ = new gguf::GgufFile(gguf::GgufFile::open(model_path()));
  }
  static void TearDownTestSuite() {
    delete file_;
    file_ = nullptr;
  }
  void SetUp() override {
    if (file_ == nullptr)
      GTEST_SKIP() << "model not found at " << model_path() << " (run scripts/fetch-model)";
  }
  static gguf::GgufFile* file_;
};

inline gguf::GgufFile* ModelTest::file_ = nullptr;

}  // namespace inferd::testing
