// The public API (include/inferd/engine.h) and the C ABI (include/inferd/inferd.h) on the tiny
// random model written to a file: outputs match the engine driven directly, seeds reproduce,
// stream deltas add up to the text, cancellation and callback errors stop a call cleanly, and
// bad input is an error (code and message in C), never a crash.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "inferd/engine.h"
#include "inferd/inferd.h"
#include "tiny_engine.h"
#include "tiny_model.h"

namespace {

class ApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    inferd::testing::TinyLlamaSpec spec;
    spec.n_vocab = 24;
    spec.with_tokenizer = true;
    spec.seed = 5;
    bytes_ = new std::vector<uint8_t>(inferd::testing::make_tiny_llama(spec));
    path_ = new std::string((std::filesystem::temp_directory_path() /
                             ("inferd_api_test_" + std::to_string(getpid()) + ".gguf"))
                                .string());
    std::ofstream out(*path_, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes_->data()),
              static_cast<std::streamsize>(bytes_->size()));
  }
  static void TearDownTestSuite() {
    std::remove(path_->c_str());
    delete path_;
    delete bytes_;
  }
  static inferd::EngineOptions options(int max_seqs = 8) {
    inferd::EngineOptions o;
    o.threads = 2;
    o.pin_threads = false;
    o.context = 256;
    o.max_seqs = max_seqs;
    return o;
  }
  static inferd::SamplingParams greedy(int64_t max_tokens) {
    inferd::SamplingParams p = inferd::SamplingParams::greedy();
    p.max_tokens = max_tokens;
    p.ignore_eos = true;  // a random model may end at once; the tests want tokens
    return p;
  }
  static inline std::vector<uint8_t>* bytes_ = nullptr;
  static inline std::string* path_ = nullptr;
};

TEST_F(ApiTest, GreedyMatchesTheEngineDrivenDirectly) {
  inferd::Engine api(*path_, options());
  const inferd::RequestOutput out = api.complete("abcab", greedy(12));
  ASSERT_EQ(out.outputs.size(), 1u);
  EXPECT_EQ(out.outputs[0].token_ids.size(), 12u);
  EXPECT_EQ(out.outputs[0].finish_reason, inferd::FinishReason::kLength);
  EXPECT_EQ(out.prompt, "abcab");
  EXPECT_EQ(out.prompt_token_ids, api.tokenize("abcab"));
  EXPECT_EQ(out.metrics.completion_tokens, 12);

  // The same request through the internal engine.
  const auto file = inferd::gguf::GgufFile::parse(*bytes_);
  inferd::engine::EngineConfig config;
  config.threads = 2;
  config.pin_threads = false;
  config.context = 256;
  config.max_seqs = 8;
  inferd::engine::Engine engine(file, config);
  auto collect = std::make_shared<inferd::engine::Collect>();
  inferd::engine::Request request;
  request.prompt = out.prompt_token_ids;
  request.sampling.temperature = 0;
  request.max_tokens = 12;
  request.ignore_eos = true;
  request.output = collect;
  engine.add_request(std::move(request));
  engine.run_until_idle();
  EXPECT_EQ(out.outputs[0].token_ids, collect->result_.output_tokens);
  EXPECT_EQ(out.outputs[0].text, collect->text_);
  // The streamed text leaves control tokens out, as detokenize does when asked to.
  EXPECT_EQ(api.detokenize(out.outputs[0].token_ids, true), collect->text_);
}

TEST_F(ApiTest, BatchedPromptsComeBackInOrder) {
  inferd::Engine api(*path_, options());
  const std::vector<std::string> prompts = {"ab", "cab", "bbc"};
  const auto batched = api.generate(prompts, greedy(6));
  ASSERT_EQ(batched.size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(batched[i].index, i);
    EXPECT_EQ(batched[i].prompt, prompts[i]);
    EXPECT_EQ(batched[i].outputs[0].token_ids.size(), 6u);
  }
}

TEST_F(ApiTest, SeededChoicesAreReproducible) {
  inferd::Engine api(*path_, options());
  inferd::SamplingParams params;
  params.n = 4;
  params.seed = 9;
  params.temperature = 1.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.max_tokens = 10;
  params.ignore_eos = true;
  const auto first = api.complete("abc", params);
  const auto second = api.complete("abc", params);
  ASSERT_EQ(first.outputs.size(), 4u);
  bool differ = false;
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(first.outputs[c].index, c);
    EXPECT_EQ(first.outputs[c].token_ids, second.outputs[c].token_ids);
    EXPECT_EQ(first.outputs[c].text, second.outputs[c].text);
    differ = differ || first.outputs[c].token_ids != first.outputs[0].token_ids;
  }
  EXPECT_TRUE(differ) << "four choices at temperature 1 all made the same tokens";
}

TEST_F(ApiTest, StreamDeltasAddUpToTheText) {
  inferd::Engine api(*path_, options());
  inferd::SamplingParams params = greedy(8);
  params.n = 2;
  std::map<std::pair<size_t, int32_t>, std::string> streamed;
  std::map<std::pair<size_t, int32_t>, int> finished;
  const auto outs = api.generate({"ab", "ca"}, params, [&](const inferd::StreamDelta& d) {
    const std::pair<size_t, int32_t> key(d.prompt_index, d.choice);
    EXPECT_NE(d.text.data(), nullptr);  // callbacks may pass it to fwrite even when empty
    EXPECT_EQ(finished[key], 0) << "text after the last delta";
    streamed[key] += d.text;
    if (d.finished) ++finished[key];
  });
  for (size_t p = 0; p < 2; ++p) {
    for (int32_t c = 0; c < 2; ++c) {
      const std::pair<size_t, int32_t> key(p, c);
      EXPECT_EQ(streamed[key], outs[p].outputs[c].text);
      EXPECT_EQ(finished[key], 1);
    }
  }
}

TEST_F(ApiTest, LogprobsAndStopStrings) {
  inferd::Engine api(*path_, options());
  inferd::SamplingParams params = greedy(10);
  params.logprobs = 2;
  const auto out = api.complete("abc", params);
  const inferd::CompletionOutput& choice = out.outputs[0];
  ASSERT_EQ(choice.logprobs.size(), choice.token_ids.size());
  for (size_t i = 0; i < choice.logprobs.size(); ++i) {
    EXPECT_EQ(choice.logprobs[i].token, choice.token_ids[i]);
    EXPECT_LE(choice.logprobs[i].logprob, 0.0f);
    EXPECT_EQ(choice.logprobs[i].top.size(), 2u);
  }
  // A stop string taken from the middle of the greedy text ends it there.
  ASSERT_GE(choice.text.size(), 4u);
  inferd::SamplingParams stopped = greedy(10);
  stopped.stop = {choice.text.substr(2, 2)};
  const auto cut = api.complete("abc", stopped);
  EXPECT_EQ(cut.outputs[0].finish_reason, inferd::FinishReason::kStop);
  EXPECT_EQ(cut.outputs[0].stop_reason, stopped.stop[0]);
  EXPECT_EQ(cut.outputs[0].text, choice.text.substr(0, choice.text.find(stopped.stop[0])));
  // include_stop_str_in_output: the same text with the stop string at its end.
  stopped.include_stop_str_in_output = true;
  const auto kept = api.complete("abc", stopped);
  EXPECT_EQ(kept.outputs[0].text, cut.outputs[0].text + stopped.stop[0]);
  EXPECT_EQ(kept.outputs[0].token_ids, cut.outputs[0].token_ids);
}

// vLLM's stop_token_ids, min_tokens and logit_bias. The tiny model's EOS is token 2.
TEST_F(ApiTest, StopTokenIdsMinTokensAndLogitBias) {
  constexpr int32_t kEos = 2;
  inferd::Engine api(*path_, options());
  const auto plain = api.complete("abc", greedy(16)).outputs[0];
  ASSERT_EQ(plain.token_ids.size(), 16u);
  // A stop token id ends the output before its first occurrence, which is left out.
  const int32_t stop_id = plain.token_ids[5];
  const size_t first = static_cast<size_t>(
      std::find(plain.token_ids.begin(), plain.token_ids.end(), stop_id) - plain.token_ids.begin());
  inferd::SamplingParams params = greedy(16);
  params.stop_token_ids = {stop_id};
  const auto stopped = api.complete("abc", params).outputs[0];
  EXPECT_EQ(stopped.finish_reason, inferd::FinishReason::kStop);
  EXPECT_EQ(stopped.stop_token_id, stop_id);
  EXPECT_EQ(stopped.token_ids,
            std::vector<int32_t>(plain.token_ids.begin(), plain.token_ids.begin() + first));
  // A large bias makes EOS the greedy choice at once: nothing is generated...
  params = greedy(16);
  params.ignore_eos = false;
  params.logit_bias = {{kEos, 100.0f}};
  const auto ended = api.complete("abc", params).outputs[0];
  EXPECT_EQ(ended.finish_reason, inferd::FinishReason::kStop);
  EXPECT_TRUE(ended.token_ids.empty());
  // ...and min_tokens holds it off for exactly that many tokens, which EOS then ends.
  params.min_tokens = 5;
  const auto held = api.complete("abc", params).outputs[0];
  EXPECT_EQ(held.finish_reason, inferd::FinishReason::kStop);
  EXPECT_EQ(held.token_ids.size(), 5u);
  for (const int32_t id : held.token_ids) EXPECT_NE(id, kEos);
  // Only the allowed tokens are sampled, even at a high temperature.
  inferd::SamplingParams some = greedy(12);
  some.temperature = 1.5f;
  some.seed = 9;
  some.allowed_token_ids = {7, 3, 7};
  const auto only = api.complete("abc", some).outputs[0];
  ASSERT_EQ(only.token_ids.size(), 12u);
  for (const int32_t id : only.token_ids) EXPECT_TRUE(id == 3 || id == 7) << id;
  // Allowed tokens that min_tokens rules out leave nothing to sample: an error, not a token
  // outside the list.
  inferd::SamplingParams none_left = greedy(8);
  none_left.ignore_eos = false;
  none_left.min_tokens = 3;
  none_left.allowed_token_ids = {kEos};
  const auto refused = api.complete("abc", none_left).outputs[0];
  EXPECT_EQ(refused.finish_reason, inferd::FinishReason::kError);
  EXPECT_NE(refused.error.find("allowed_token_ids"), std::string::npos) << refused.error;
  EXPECT_TRUE(refused.token_ids.empty());
  // So do allowed tokens that logit_bias bans (-inf), greedy or sampled; the next request of
  // the engine is served as before.
  for (const float temperature : {0.0f, 1.5f}) {
    inferd::SamplingParams banned = greedy(8);
    banned.temperature = temperature;
    banned.seed = 3;
    banned.allowed_token_ids = {3, 7};
    banned.logit_bias = {{3, -std::numeric_limits<float>::infinity()},
                         {7, -std::numeric_limits<float>::infinity()}};
    const auto none = api.complete("abc", banned).outputs[0];
    EXPECT_EQ(none.finish_reason, inferd::FinishReason::kError) << temperature;
    EXPECT_NE(none.error.find("logit_bias"), std::string::npos) << none.error;
    EXPECT_TRUE(none.token_ids.empty()) << temperature;
    EXPECT_EQ(api.complete("abc", some).outputs[0].token_ids, only.token_ids);
  }
  // Out of range: errors naming the field.
  some.allowed_token_ids = {30};
  EXPECT_THROW(api.complete("abc", some), inferd::Error);
  params.min_tokens = 17;
  EXPECT_THROW(api.complete("abc", params), inferd::Error);
  params.min_tokens = 0;
  params.stop_token_ids = {24};
  EXPECT_THROW(api.complete("abc", params), inferd::Error);
  params.stop_token_ids.clear();
  params.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(api.complete("abc", params), inferd::Error);
}

TEST_F(ApiTest, CancelTokenStopsTheCall) {
  inferd::Engine api(*path_, options());
  inferd::CancelToken cancel;
  int deltas = 0;
  const auto out = api.complete(
      "abc", greedy(100),
      [&](const inferd::StreamDelta& d) {
        if (!d.text.empty() && ++deltas == 3) cancel.cancel();
      },
      cancel);
  EXPECT_EQ(out.outputs[0].finish_reason, inferd::FinishReason::kCancelled);
  EXPECT_LT(out.outputs[0].token_ids.size(), 100u);
  // The engine goes on serving.
  EXPECT_EQ(api.complete("abc", greedy(5)).outputs[0].token_ids.size(), 5u);
}

TEST_F(ApiTest, CallbackExceptionIsRethrownAfterTheRequestsStop) {
  inferd::Engine api(*path_, options());
  EXPECT_THROW(api.generate({"ab", "bc"}, greedy(50),
                            [](const inferd::StreamDelta&) { throw std::runtime_error("stop"); }),
               std::runtime_error);
  EXPECT_EQ(api.complete("abc", greedy(5)).outputs[0].token_ids.size(), 5u);
}

TEST_F(ApiTest, RefusedCallRunsNothing) {
  inferd::Engine api(*path_, options());
  // The second prompt does not fit the context with max_tokens: nothing of the call runs.
  const std::string long_prompt(400, 'b');
  EXPECT_THROW(api.generate({"ab", long_prompt}, greedy(8)), inferd::Error);
  EXPECT_EQ(api.stats().generated_tokens, 0);
  inferd::SamplingParams bad = greedy(8);
  bad.n = 0;
  EXPECT_THROW(api.complete("ab", bad), inferd::Error);
  bad = greedy(8);
  bad.json_schema = "{}";
  bad.regex = "a";
  EXPECT_THROW(api.complete("ab", bad), inferd::Error);
  bad = greedy(8);
  bad.top_p = 2.0f;
  EXPECT_THROW(api.complete("ab", bad), inferd::Error);
  EXPECT_EQ(api.complete("ab", greedy(3)).outputs[0].token_ids.size(), 3u);
}

TEST_F(ApiTest, ChatNeedsATemplate) {
  inferd::Engine plain(*path_, options());
  EXPECT_FALSE(plain.model_info().has_chat_template);
  try {
    plain.chat({{"user", "ab"}}, greedy(4));
    FAIL() << "a model without a chat template chatted";
  } catch (const inferd::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  inferd::EngineOptions o = options();
  o.chat_template = "chatml";
  inferd::Engine chatml(*path_, o);
  EXPECT_EQ(chatml.apply_chat_template({{"user", "hi"}}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  const auto out = chatml.chat({{"user", "ab"}}, greedy(4));
  EXPECT_EQ(out.prompt, chatml.apply_chat_template({{"user", "ab"}}));
  EXPECT_EQ(out.outputs[0].token_ids.size(), 4u);
}

TEST_F(ApiTest, OpeningErrors) {
  try {
    inferd::Engine engine("/nonexistent/model.gguf");
    FAIL() << "opened a file that does not exist";
  } catch (const inferd::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos) << e.what();
  }
  inferd::EngineOptions o = options();
  o.max_seqs = 0;
  EXPECT_THROW(inferd::Engine(*path_, o), inferd::Error);
  o = options();
  o.speculative.method = "telepathy";
  EXPECT_THROW(inferd::Engine(*path_, o), inferd::Error);
  const inferd::ModelInfo info = inferd::Engine(*path_, options()).model_info();
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.n_vocab, 24);
  EXPECT_EQ(info.context, 256);
}

// ---- C ABI ----

TEST_F(ApiTest, COpenErrorsAreCodesWithMessages) {
  inferd_engine* engine = reinterpret_cast<inferd_engine*>(0x1);
  char* error = nullptr;
  EXPECT_EQ(inferd_engine_open("/nonexistent/model.gguf", nullptr, &engine, &error),
            INFERD_ERROR_MODEL);
  EXPECT_EQ(engine, nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("/nonexistent/model.gguf"), std::string::npos) << error;
  inferd_string_free(error);

  error = nullptr;
  EXPECT_EQ(inferd_engine_open(nullptr, nullptr, &engine, &error), INFERD_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(error, nullptr);
  inferd_string_free(error);
  // No out pointer, no error pointer: still a code, no crash.
  EXPECT_EQ(inferd_engine_open(path_->c_str(), nullptr, nullptr, nullptr),
            INFERD_ERROR_INVALID_ARGUMENT);

  inferd_engine_options options{};  // size not set: refused, not misread
  error = nullptr;
  EXPECT_EQ(inferd_engine_open(path_->c_str(), &options, &engine, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("inferd_engine_options_init"), std::string::npos);
  inferd_string_free(error);

  inferd_engine_options_init(&options);
  options.max_seqs = 0;
  EXPECT_EQ(inferd_engine_open(path_->c_str(), &options, &engine, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("max_seqs"), std::string::npos) << error;
  inferd_string_free(error);

  // 0.1.3's LoRA adapters are read (an adapter that cannot be opened is a model error naming
  // it); a caller built against 0.1.2's header (the struct without them) opens the model plain.
  inferd_engine_options_init(&options);
  const char* adapter = "/nonexistent/adapter.gguf";
  options.lora_paths = &adapter;
  options.n_lora_adapters = 1;
  EXPECT_EQ(inferd_engine_open(path_->c_str(), &options, &engine, &error), INFERD_ERROR_MODEL);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find(adapter), std::string::npos) << error;
  inferd_string_free(error);
  options.size = offsetof(inferd_engine_options, lora_paths);
  ASSERT_EQ(inferd_engine_open(path_->c_str(), &options, &engine, &error), INFERD_OK) << error;
  inferd_engine_close(engine);

  EXPECT_STREQ(inferd_status_name(INFERD_ERROR_MODEL), "model error");
  EXPECT_STREQ(inferd_version(), inferd::version());
  inferd_engine_close(nullptr);
  inferd_result_free(nullptr);
  inferd_string_free(nullptr);
  inferd_engine_cancel(nullptr);
}

struct StreamLog {
  std::string text;
  int finished = 0;
  int cancel_after = -1;
  int calls = 0;
};

int log_delta(void* user_data, size_t, int32_t, const char* text, size_t len, int32_t finished) {
  auto* log = static_cast<StreamLog*>(user_data);
  log->text.append(text, len);
  log->finished += finished;
  return ++log->calls == log->cancel_after ? 1 : 0;
}

TEST_F(ApiTest, CGenerateMatchesTheCppApi) {
  inferd_engine_options options;
  inferd_engine_options_init(&options);
  options.threads = 2;
  options.context = 256;
  inferd_engine* engine = nullptr;
  char* error = nullptr;
  ASSERT_EQ(inferd_engine_open(path_->c_str(), &options, &engine, &error), INFERD_OK) << error;

  inferd_sampling_params params;
  inferd_sampling_params_init(&params);
  params.temperature = 0;
  params.max_tokens = 9;
  params.ignore_eos = 1;
  params.logprobs = 0;
  const char* prompts[] = {"abcab", "bb"};
  StreamLog log;
  inferd_result* result = nullptr;
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, log_delta, &log, &result, &error),
            INFERD_OK)
      << error;
  inferd::EngineOptions cpp_options = ApiTest::options();
  inferd::Engine api(*path_, cpp_options);
  const auto expected = api.complete("abcab", greedy(9));
  ASSERT_EQ(inferd_result_num_prompts(result), 1u);
  ASSERT_EQ(inferd_result_num_choices(result, 0), 1u);
  size_t len = 0, count = 0, n_logprobs = 0;
  const char* text = inferd_result_text(result, 0, 0, &len);
  EXPECT_EQ(std::string(text, len), expected.outputs[0].text);
  EXPECT_EQ(log.text, expected.outputs[0].text);
  EXPECT_EQ(log.finished, 1);
  const int32_t* tokens = inferd_result_tokens(result, 0, 0, &count);
  EXPECT_EQ(std::vector<int32_t>(tokens, tokens + count), expected.outputs[0].token_ids);
  EXPECT_NE(inferd_result_logprobs(result, 0, 0, &n_logprobs), nullptr);
  EXPECT_EQ(n_logprobs, count);
  EXPECT_EQ(inferd_result_finish_reason(result, 0, 0), INFERD_FINISH_LENGTH);
  EXPECT_EQ(inferd_result_prompt_tokens(result, 0), expected.prompt_token_ids.size());
  // Out of range: NULL and 0, no crash.
  EXPECT_EQ(inferd_result_text(result, 1, 0, &len), nullptr);
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(inferd_result_tokens(result, 0, 5, &count), nullptr);
  EXPECT_EQ(inferd_result_num_choices(result, 3), 0u);
  inferd_result_free(result);

  // A callback that returns nonzero cancels the call; the result keeps what was made.
  StreamLog cancelling;
  cancelling.cancel_after = 2;
  params.max_tokens = 100;
  ASSERT_EQ(inferd_generate(engine, prompts, 2, &params, log_delta, &cancelling, &result, &error),
            INFERD_ERROR_CANCELLED);
  EXPECT_EQ(inferd_result_finish_reason(result, 0, 0), INFERD_FINISH_CANCELLED);
  inferd_result_tokens(result, 0, 0, &count);
  EXPECT_LT(count, 100u);
  inferd_result_free(result);

  // Bad parameters: an error code and message, no result.
  params.top_p = 3.0f;
  result = reinterpret_cast<inferd_result*>(0x1);
  EXPECT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(result, nullptr);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("top_p"), std::string::npos) << error;
  inferd_string_free(error);
  inferd_sampling_params_init(&params);
  params.n_stop = 1;  // and stop NULL
  EXPECT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  inferd_string_free(error);
  const char* null_prompt[] = {nullptr};
  inferd_sampling_params_init(&params);
  EXPECT_EQ(inferd_generate(engine, null_prompt, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  inferd_string_free(error);
  EXPECT_EQ(inferd_generate(nullptr, prompts, 1, &params, nullptr, nullptr, &result, nullptr),
            INFERD_ERROR_INVALID_ARGUMENT);
  // 0.1.1's fields: beam search gives the C++ API's beams as choices; a stop token id ends the
  // text; a caller built against 0.1.0's header (a shorter struct) gets their defaults.
  inferd_sampling_params_init(&params);
  params.temperature = 0;
  params.max_tokens = 6;
  params.beam_width = 3;
  params.n = 2;
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd::SamplingParams beams = greedy(6);
  beams.ignore_eos = false;
  beams.beam_width = 3;
  beams.n = 2;
  const auto expected_beams = api.complete("abcab", beams);
  ASSERT_EQ(inferd_result_num_choices(result, 0), expected_beams.outputs.size());
  for (size_t b = 0; b < expected_beams.outputs.size(); ++b) {
    const int32_t* ids = inferd_result_tokens(result, 0, b, &count);
    EXPECT_EQ(std::vector<int32_t>(ids, ids + count), expected_beams.outputs[b].token_ids) << b;
  }
  inferd_result_free(result);
  inferd_sampling_params_init(&params);
  params.temperature = 0;
  params.max_tokens = 9;
  params.ignore_eos = 1;
  const int32_t stop_id = expected.outputs[0].token_ids[4];
  params.stop_token_ids = &stop_id;
  params.n_stop_token_ids = 1;
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd_result_tokens(result, 0, 0, &count);
  EXPECT_LE(count, 4u);
  EXPECT_EQ(inferd_result_finish_reason(result, 0, 0), INFERD_FINISH_STOP);
  inferd_result_free(result);
  // Allowed tokens and a logit bias: a +100 bias on an allowed token makes it every token.
  params.n_stop_token_ids = 0;
  const int32_t allowed[] = {3, 7};
  const int32_t bias_token = 7;
  const float bias_value = 100.0f;
  params.allowed_token_ids = allowed;
  params.n_allowed_token_ids = 2;
  params.logit_bias_tokens = &bias_token;
  params.logit_bias_values = &bias_value;
  params.n_logit_bias = 1;
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  const int32_t* biased = inferd_result_tokens(result, 0, 0, &count);
  EXPECT_EQ(std::vector<int32_t>(biased, biased + count), std::vector<int32_t>(9, 7));
  inferd_result_free(result);
  params.n_allowed_token_ids = 0;
  params.n_logit_bias = 0;
  params.n_stop_token_ids = 1;
  params.size = offsetof(inferd_sampling_params, stop_token_ids);  // 0.1.0's struct
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd_result_tokens(result, 0, 0, &count);
  EXPECT_EQ(count, 9u);  // the stop token id beyond its size is not read
  inferd_result_free(result);
  params.size = offsetof(inferd_sampling_params, stop_token_ids) - 1;
  EXPECT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  inferd_string_free(error);
  // 0.1.2's prompt_logprobs: one per prompt token, the first NaN, as the C++ API's; a caller
  // built against 0.1.1's header (the struct without it) gets none.
  inferd_sampling_params_init(&params);
  EXPECT_EQ(params.prompt_logprobs, -1);
  params.temperature = 0;
  params.max_tokens = 2;
  params.prompt_logprobs = 1;
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd::SamplingParams scored = greedy(2);
  scored.prompt_logprobs = 1;
  const auto expected_prompt = api.complete("abcab", scored);
  ASSERT_EQ(expected_prompt.prompt_logprobs.size(), expected_prompt.prompt_token_ids.size());
  const float* prompt_lp = inferd_result_prompt_logprobs(result, 0, &count);
  ASSERT_NE(prompt_lp, nullptr);
  ASSERT_EQ(count, expected_prompt.prompt_token_ids.size());
  EXPECT_TRUE(std::isnan(prompt_lp[0]));
  for (size_t i = 1; i < count; ++i) {
    EXPECT_EQ(prompt_lp[i], expected_prompt.prompt_logprobs[i].logprob) << i;
    EXPECT_LE(prompt_lp[i], 0.0f);
    EXPECT_EQ(expected_prompt.prompt_logprobs[i].top.size(), 1u);
  }
  EXPECT_EQ(inferd_result_prompt_logprobs(result, 1, &count), nullptr);
  EXPECT_EQ(count, 0u);
  inferd_result_free(result);
  params.size = offsetof(inferd_sampling_params, prompt_logprobs);  // 0.1.1's struct
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  EXPECT_EQ(inferd_result_prompt_logprobs(result, 0, &count), nullptr);
  inferd_result_free(result);
  // 0.1.3's bad words and llama.cpp's samplers (off by default) give what the C++ API gives;
  // a 0.1.2-sized struct gets neither.
  inferd_sampling_params_init(&params);
  EXPECT_EQ(params.typical_p, 1.0f);
  EXPECT_EQ(params.mirostat, 0);
  EXPECT_EQ(params.dry_multiplier, 0.0f);
  EXPECT_EQ(params.dry_sequence_breakers, nullptr);
  params.temperature = 0.7f;
  params.seed = 5;
  params.max_tokens = 12;
  params.ignore_eos = 1;
  params.mirostat = 2;
  params.dry_multiplier = 0.8f;
  params.dry_penalty_last_n = -1;
  const char* breaker = "unused";
  params.dry_sequence_breakers = &breaker;  // with a count of 0: no breakers
  const char* bad_word = "c";
  params.bad_words = &bad_word;
  params.n_bad_words = 1;
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd::SamplingParams llama_samplers = greedy(12);
  llama_samplers.temperature = 0.7f;
  llama_samplers.seed = 5;
  llama_samplers.mirostat = 2;
  llama_samplers.dry_multiplier = 0.8f;
  llama_samplers.dry_penalty_last_n = -1;
  llama_samplers.dry_sequence_breakers.clear();
  llama_samplers.bad_words = {"c"};
  const auto expected_llama = api.complete("abcab", llama_samplers);
  const int32_t* sampled = inferd_result_tokens(result, 0, 0, &count);
  EXPECT_EQ(std::vector<int32_t>(sampled, sampled + count), expected_llama.outputs[0].token_ids);
  inferd_result_free(result);
  params.size = offsetof(inferd_sampling_params, bad_words);  // 0.1.2's struct
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd::SamplingParams plain = greedy(12);
  plain.temperature = 0.7f;
  plain.seed = 5;
  const auto expected_plain = api.complete("abcab", plain);
  EXPECT_NE(expected_plain.outputs[0].token_ids, expected_llama.outputs[0].token_ids);
  sampled = inferd_result_tokens(result, 0, 0, &count);
  EXPECT_EQ(std::vector<int32_t>(sampled, sampled + count), expected_plain.outputs[0].token_ids);
  inferd_result_free(result);
  // 0.1.4's LoRA scales reach the engine (this one has no adapters: a scale is refused); a
  // 0.1.3-sized struct has none.
  inferd_sampling_params_init(&params);
  EXPECT_EQ(params.n_lora_scales, 0u);
  params.max_tokens = 4;
  const float scale = 0.5f;
  params.lora_scales = &scale;
  params.n_lora_scales = 1;
  EXPECT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("LoRA scale"), std::string::npos) << error;
  inferd_string_free(error);
  params.lora_scales = nullptr;
  EXPECT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("lora_scales is NULL"), std::string::npos) << error;
  inferd_string_free(error);
  params.size = offsetof(inferd_sampling_params, lora_scales);  // 0.1.3's struct
  ASSERT_EQ(inferd_generate(engine, prompts, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_OK)
      << error;
  inferd_result_free(result);
  inferd_sampling_params_init(&params);
  // No chat template in the tiny model: a clear error.
  inferd_chat_message message{"user", "ab"};
  EXPECT_EQ(inferd_chat(engine, &message, 1, &params, nullptr, nullptr, &result, &error),
            INFERD_ERROR_INVALID_ARGUMENT);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(error).find("no chat template"), std::string::npos) << error;
  inferd_string_free(error);
  inferd_engine_close(engine);
}

}  // namespace
