// libFuzzer target for the server's request parsing: arbitrary bytes as a request body, for
// /v1/completions and /v1/chat/completions. Checks that nothing crashes, that every rejection
// is an ApiError with a 4xx status, and that an accepted request is within the limits the
// engine enforces (prompt + max_tokens within the context, ids in the vocabulary, n and
// logprobs in range), so the engine never sees a request it would refuse.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api/openai_request.h"
#include "tokenizer/toy_vocab.h"

namespace {

using inferd::server::ApiError;
using inferd::server::ParseContext;

const ParseContext& context() {
  static const std::unique_ptr<inferd::tokenizer::Tokenizer> tokenizer =
      inferd::tokenizer::Tokenizer::from_vocab(inferd::tokenizer::Vocab(
          inferd::tokenizer::make_toy_vocab({.control = {"<s>", "</s>"}})));
  static const ParseContext ctx = [] {
    ParseContext c;
    c.tokenizer = tokenizer.get();
    c.context = 128;
    c.model_ids = {"toy"};
    c.render_chat = [](const nlohmann::ordered_json& messages, const nlohmann::ordered_json&,
                       bool add_generation_prompt) {
      std::string s;
      for (const auto& m : messages)
        s += m.value("role", "") + ": " +
             (m.contains("content") && m["content"].is_string() ? m["content"].get<std::string>()
                                                                : std::string()) +
             "\n";
      return add_generation_prompt ? s + "assistant: " : s;
    };
    return c;
  }();
  return ctx;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const nlohmann::json body = nlohmann::json::parse(data + 1, data + size, nullptr, false);
  if (body.is_discarded()) return 0;  // the server answers 400 before parsing fields
  const ParseContext& ctx = context();
  try {
    const auto r = inferd::server::parse_completion(body, chat, ctx);
    const auto prompt = static_cast<int64_t>(r.request.prompt.size());
    check(prompt > 0 && r.request.max_tokens >= 1);
    check(prompt + r.request.max_tokens <= ctx.context);
    for (int32_t id : r.request.prompt) check(id >= 0 && id < ctx.tokenizer->vocab().size());
    check(r.n >= 1 && r.n <= 16);
    check(r.logprobs >= -1 && r.logprobs <= 20);
    r.request.sampling.validate(ctx.tokenizer->vocab().size());  // must not throw
  } catch (const ApiError& e) {
    check(e.status >= 400 && e.status < 500);
    (void)e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  return 0;
}
