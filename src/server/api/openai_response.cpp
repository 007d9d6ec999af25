#include "server/api/openai_response.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "util/utf8.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

// The responses' system_fingerprint: which server and version answered ("b" first, as
// llama-server's build names and the clients that check them expect).
constexpr const char* kSystemFingerprint = "b0.1.0-inferd";

// Token text for logprobs: its bytes as valid UTF-8 for JSON; a token that holds part of a
// character shows U+FFFD for those bytes (chat also gives the raw "bytes").
std::string printable(std::string_view piece) {
  std::string out;
  while (!piece.empty()) {
    const size_t valid = utf8_valid_prefix(piece);
    out.append(piece.substr(0, valid));
    if (valid == piece.size()) break;
    out.append("\xEF\xBF\xBD");
    piece.remove_prefix(valid + 1);
  }
  return out;
}

}  // namespace

json bytes_of(std::string_view piece) {
  json out = json::array();
  for (unsigned char c : piece) out.push_back(int(c));
  return out;
}

ResponseWriter::ResponseWriter(const CompletionRequest& request,
                               const tokenizer::Tokenizer& tokenizer, std::string id,
                               int64_t created)
    : request_(request), tokenizer_(tokenizer), id_(std::move(id)), created_(created) {}

json ResponseWriter::envelope(const char* object) const {
  // system_fingerprint names the build, as OpenAI's does (llama-server's start with "b").
  return {{"id", id_},
          {"object", object},
          {"created", created_},
          {"model", request_.model},
          {"system_fingerprint", kSystemFingerprint}};
}

json ResponseWriter::prompt_logprobs(const std::vector<engine::PromptTokenLogprob>& prompt) const {
  json out = json::array();
  for (const engine::PromptTokenLogprob& p : prompt) {
    if (std::isnan(p.logprob)) {
      out.push_back(nullptr);
      continue;
    }
    json entry = json::object();
    const auto add = [&](int32_t token, float logprob, int32_t rank) {
      entry[std::to_string(token)] = {{"logprob", logprob},
                                      {"rank", rank},
                                      {"decoded_token", printable(tokenizer_.token_piece(token))}};
    };
    add(p.token, p.logprob, p.rank);
    for (size_t i = 0; i < p.top.size(); ++i)
      if (p.top[i].token != p.token)
        add(p.top[i].token, p.top[i].logprob, static_cast<int32_t>(i + 1));
    out.push_back(std::move(entry));
  }
  return out;
}

json ResponseWriter::logprobs(const std::vector<TokenInfo>& tokens, size_t text_offset,
                              const std::vector<engine::PromptTokenLogprob>* prompt) const {
  if (request_.logprobs < 0) return nullptr;
  if (request_.chat) {
    json content = json::array();
    for (const TokenInfo& t : tokens) {
      const std::string& piece = tokenizer_.token_piece(t.token);
      json top = json::array();
      for (const sampling::TokenLogprob& alt : t.top) {
        const std::string& p = tokenizer_.token_piece(alt.token);
        top.push_back({{"token", printable(p)}, {"logprob", alt.logprob}, {"bytes", bytes_of(p)}});
      }
      content.push_back({{"token", printable(piece)},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(piece)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens_json = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = text_offset;
  if (prompt != nullptr) {
    for (const engine::PromptTokenLogprob& p : *prompt) {
      const std::string piece = printable(tokenizer_.token_piece(p.token));
      tokens_json.push_back(piece);
      offsets.push_back(offset);
      offset += piece.size();
      if (std::isnan(p.logprob)) {  // the first token: nothing before it to predict it
        token_logprobs.push_back(nullptr);
        top.push_back(nullptr);
        continue;
      }
      token_logprobs.push_back(p.logprob);
      json alternatives = json::object();
      for (const sampling::TokenLogprob& alt : p.top)
        alternatives[printable(tokenizer_.token_piece(alt.token))] = alt.logprob;
      top.push_back(alternatives);
    }
  }
  for (const TokenInfo& t : tokens) {
    const std::string piece = printable(tokenizer_.token_piece(t.token));
    tokens_json.push_back(piece);
    token_logprobs.push_back(t.logprob);
    json alternatives = json::object();
    for (const sampling::TokenLogprob& alt : t.top)
      alternatives[printable(tokenizer_.token_piece(alt.token))] = alt.logprob;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += piece.size();
  }
  return {{"tokens", tokens_json},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json ResponseWriter::usage(const std::vector<ChoiceOutput>& choices) const {
  int64_t prompt = choices.empty() ? 0 : choices[0].prompt_tokens, completion = 0, cached = 0;
  for (const ChoiceOutput& c : choices) {
    if (!request_.score_only) completion += c.completion_tokens;
    cached = std::max(cached, c.cached_tokens);  // the choices share one prompt
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

json ResponseWriter::full(const std::vector<ChoiceOutput>& choices) const {
  json out = envelope(request_.chat ? "chat.completion" : "text_completion");
  json list = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    // The choices share one prompt: the first one's result has its logprobs.
    const std::vector<engine::PromptTokenLogprob>& prompt = choices[0].prompt_logprobs;
    static const std::vector<TokenInfo> kNone;
    const std::vector<TokenInfo>& answer = request_.score_only ? kNone : c.tokens;
    json choice = {{"index", i},
                   {"logprobs", logprobs(answer, 0, request_.echo ? &prompt : nullptr)},
                   {"finish_reason", c.finish_reason}};
    if (request_.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (request_.tools.active()) {
        ToolOutcome t = tool_outcome(static_cast<int>(i), c);
        if (!t.calls.empty()) {
          choice["message"]["content"] = t.content.empty() ? json(nullptr) : json(t.content);
          choice["message"]["tool_calls"] = std::move(t.calls);
          choice["finish_reason"] = t.finish_reason;
        }
      }
      if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
    } else {
      choice["text"] =
          request_.echo ? request_.prompt_text + (request_.score_only ? "" : c.text) : c.text;
      if (request_.prompt_logprobs >= 0) choice["prompt_logprobs"] = prompt_logprobs(prompt);
    }
    list.push_back(choice);
  }
  out["choices"] = list;
  // vLLM's chat answer carries them once, beside the choices.
  if (request_.chat && request_.prompt_logprobs >= 0 && !choices.empty())
    out["prompt_logprobs"] = prompt_logprobs(choices[0].prompt_logprobs);
  out["usage"] = usage(choices);
  if (!choices.empty()) out["timings"] = timings(choices[0]);
  return out;
}

json ResponseWriter::timings(const ChoiceOutput& choice) {
  const engine::RequestStats& s = choice.stats;
  const int64_t prompt_n = std::max<int64_t>(s.prompt_tokens - s.cached_tokens, 0);
  const double prompt_ms = s.prefill_s * 1000, predicted_ms = s.decode_s * 1000;
  const int64_t predicted_n = s.completion_tokens;
  const auto per_token = [](double ms, int64_t n) {
    return n > 0 ? ms / static_cast<double>(n) : 0.0;
  };
  const auto per_second = [](double ms, int64_t n) {
    return ms > 0 ? static_cast<double>(n) * 1000 / ms : 0.0;
  };
  return {
      {"prompt_n", prompt_n},
      {"prompt_ms", prompt_ms},
      {"prompt_per_token_ms", per_token(prompt_ms, prompt_n)},
      {"prompt_per_second", per_second(prompt_ms, prompt_n)},
      {"predicted_n", predicted_n},
      {"predicted_ms", predicted_ms},
      {"predicted_per_token_ms", per_token(predicted_ms, std::max<int64_t>(predicted_n - 1, 0))},
      {"predicted_per_second", per_second(predicted_ms, std::max<int64_t>(predicted_n - 1, 0))},
      {"ttft_ms", s.ttft_s * 1000},
      {"cache_n", s.cached_tokens}};
}

json ResponseWriter::chunk(int index, const std::string& text, const std::vector<TokenInfo>& tokens,
                           const std::string& finish_reason, const std::string& reasoning) const {
  json out = envelope(request_.chat ? "chat.completion.chunk" : "text_completion");
  json choice = {{"index", index},
                 {"logprobs", logprobs(tokens, 0)},
                 {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  if (request_.chat) {
    choice["delta"] = json::object();
    if (!reasoning.empty()) choice["delta"]["reasoning_content"] = reasoning;
    if (!text.empty()) choice["delta"]["content"] = text;
  } else {
    choice["text"] = text;
  }
  out["choices"] = json::array({choice});
  return out;
}

ResponseWriter::ToolOutcome ResponseWriter::tool_outcome(int index, const ChoiceOutput& c) const {
  ToolOutcome out;
  ParsedAnswer parsed = parse_tool_calls(c.text, request_.tool_format);
  out.content = parsed.calls.empty() ? c.text : parsed.content;
  out.finish_reason = c.finish_reason;
  for (size_t k = 0; k < parsed.calls.size(); ++k) {
    out.calls.push_back(
        {{"id", fmt::format("call_{}_{}_{}", id_.substr(id_.find('-') + 1), index, k)},
         {"type", "function"},
         {"function", {{"name", parsed.calls[k].name}, {"arguments", parsed.calls[k].arguments}}}});
  }
  if (!out.calls.empty() && c.finish_reason == "stop") out.finish_reason = "tool_calls";
  return out;
}

std::vector<json> ResponseWriter::final_tool_chunks(int index, const ChoiceOutput& c) const {
  ToolOutcome t = tool_outcome(index, c);
  std::vector<json> out;
  auto chunk_with = [&](json delta, json finish) {
    json e = envelope("chat.completion.chunk");
    e["choices"] = json::array({{{"index", index},
                                 {"delta", std::move(delta)},
                                 {"logprobs", nullptr},
                                 {"finish_reason", finish}}});
    return e;
  };
  if (!t.content.empty()) out.push_back(chunk_with({{"content", t.content}}, nullptr));
  for (size_t k = 0; k < t.calls.size(); ++k) {
    json call = t.calls[k];
    call["index"] = k;
    out.push_back(chunk_with({{"tool_calls", json::array({call})}}, nullptr));
  }
  out.push_back(chunk_with(json::object(), t.finish_reason));
  return out;
}

// The role comes first with no content yet: "", as OpenAI and vLLM write it. (llama-server
// writes null, which breaks clients that join the deltas' content as strings.)
json ResponseWriter::role_chunk(int index) const {
  json out = envelope("chat.completion.chunk");
  out["choices"] = json::array({{{"index", index},
                                 // null, as llama-server sends it (its tests check it)
                                 {"delta", {{"role", "assistant"}, {"content", nullptr}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
  return out;
}

json ResponseWriter::usage_chunk(const std::vector<ChoiceOutput>& choices) const {
  json out = envelope(request_.chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array();
  out["usage"] = usage(choices);
  if (!choices.empty()) out["timings"] = timings(choices[0]);
  return out;
}

}  // namespace inferd::server
