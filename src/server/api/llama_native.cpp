#include "server/api/llama_native.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "util/utf8.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// Fields copied as they are: the OpenAI body has the same name and meaning.
constexpr const char* kSameFields[] = {"prompt",
                                       "stream",
                                       "temperature",
                                       "top_k",
                                       "top_p",
                                       "min_p",
                                       "seed",
                                       "stop",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "ignore_eos",
                                       "json_schema",
                                       "grammar",
                                       "return_progress",
                                       "timings_per_token",
                                       "post_sampling_probs",
                                       "model",
                                       "cache_salt",
                                       "typical_p",
                                       "top_n_sigma",
                                       "xtc_probability",
                                       "xtc_threshold",
                                       "dynatemp_range",
                                       "dynatemp_exponent",
                                       "mirostat",
                                       "mirostat_tau",
                                       "mirostat_eta",
                                       "dry_multiplier",
                                       "dry_base",
                                       "dry_allowed_length",
                                       "dry_penalty_last_n",
                                       "dry_sequence_breakers",
                                       "lora"};

// llama.cpp samplers inferd does not have, with the value that turns each off: a request that
// sets one otherwise would be sampled differently than it asked, so it is refused.
struct NeutralValue {
  const char* name;
  double off;
};
constexpr NeutralValue kUnsupportedSamplers[] = {{"n_keep", 0}, {"tfs_z", 1}};

// llama.cpp's logit_bias: [[token id or text, bias or false], ...] (false bans the token; a
// text biases each of its tokens), or an object of id or text -> bias. Returned in OpenAI's form.
json convert_logit_bias(const json& value, const ParseContext& ctx) {
  if (!value.is_array() && !value.is_object())
    bad("logit_bias", "'logit_bias' must be a list of [token, bias] pairs or an object");
  json pairs = value;
  if (value.is_object()) {  // id -> bias as OpenAI has it, or text -> bias as llama-server adds
    pairs = json::array();
    for (const auto& [key, bias] : value.items()) {
      const bool numeric = !key.empty() && std::all_of(key.begin(), key.end(),
                                                       [](char c) { return c >= '0' && c <= '9'; });
      // (An id too long to be one becomes -1, refused as out of range by the OpenAI parser.)
      const json token = numeric ? json(key.size() < 10 ? std::stoll(key) : -1) : json(key);
      pairs.push_back(json::array({token, bias}));
    }
  }
  json out = json::object();
  for (const json& pair : pairs) {
    if (!pair.is_array() || pair.size() != 2)
      bad("logit_bias", "each 'logit_bias' entry must be a [token, bias] pair");
    double bias = 0;
    if (pair[1].is_boolean()) {
      if (pair[1].get<bool>())
        bad("logit_bias", "a 'logit_bias' of true means nothing; use false to ban a token");
      bias = -100;  // the lowest OpenAI allows: the token is never drawn
    } else if (pair[1].is_number()) {
      bias = pair[1].get<double>();
    } else {
      bad("logit_bias", "a 'logit_bias' bias must be a number or false");
    }
    std::vector<int32_t> ids;
    if (pair[0].is_number_integer()) {
      ids.push_back(static_cast<int32_t>(pair[0].get<int64_t>()));
    } else if (pair[0].is_string()) {
      ids = ctx.tokenizer->encode(pair[0].get<std::string>(), false, false);
    } else {
      bad("logit_bias", "a 'logit_bias' token must be a token id or a text");
    }
    for (const int32_t id : ids) out[std::to_string(id)] = bias;
  }
  return out;
}

// llama-server's completion_probabilities: log-probabilities ("logprob", "top_logprobs"), or
// with post_sampling_probs the sampler's probabilities ("prob", "top_probs").
json probabilities(const std::vector<TokenInfo>& tokens, const tokenizer::Tokenizer& tok,
                   bool post_sampling) {
  const auto text_of = [](const std::string& piece) {
    return is_valid_utf8(piece) ? piece : std::string();
  };
  const char* value_key = post_sampling ? "prob" : "logprob";
  const auto value = [&](float logprob) {
    return post_sampling ? json(std::exp(logprob)) : json(logprob);
  };
  json out = json::array();
  for (const TokenInfo& t : tokens) {
    const std::string& piece = tok.token_piece(t.token);
    json top = json::array();
    for (const sampling::TokenLogprob& alt : t.top) {
      const std::string& p = tok.token_piece(alt.token);
      top.push_back({{"id", alt.token},
                     {"token", text_of(p)},
                     {value_key, value(alt.logprob)},
                     {"bytes", bytes_of(p)}});
    }
    out.push_back({{"id", t.token},
                   {"token", text_of(piece)},
                   {value_key, value(t.logprob)},
                   {"bytes", bytes_of(piece)},
                   {post_sampling ? "top_probs" : "top_logprobs", top}});
  }
  return out;
}

std::string stop_type(const ChoiceOutput& c) {
  if (c.finish_reason == "length") return "limit";
  if (c.finish_reason == "stop") return c.stop_word.empty() ? "eos" : "word";
  return "none";
}

// One prompt in any of its single forms (native_prompts); nullopt when `p` is a list of prompts.
std::optional<json> single_prompt(const json& p, const ParseContext& ctx) {
  if (p.is_string()) return p;
  if (p.is_object()) {
    if (p.contains("multimodal_data"))
      bad("prompt", "this server has no vision or audio model: 'multimodal_data' cannot be used");
    if (!p.contains("prompt_string") || !p["prompt_string"].is_string())
      bad("prompt", "a prompt object needs a string 'prompt_string'");
    return p["prompt_string"];
  }
  if (!p.is_array()) bad("prompt", "'prompt' must be a text, token ids, or a list of prompts");
  const bool has_id = std::any_of(p.begin(), p.end(), [](const json& e) { return e.is_number(); });
  const bool flat =
      std::all_of(p.begin(), p.end(), [](const json& e) { return e.is_number() || e.is_string(); });
  if (!has_id || !flat) return std::nullopt;  // texts, lists, objects: several prompts
  json ids = json::array();
  for (const json& e : p) {
    if (e.is_string()) {
      for (const int32_t id : ctx.tokenizer->encode(e.get<std::string>(), false, false))
        ids.push_back(id);
    } else {
      ids.push_back(e);  // checked against the vocabulary by parse_completion
    }
  }
  return ids;
}

}  // namespace

std::vector<json> native_prompts(const json& prompt, const ParseContext& ctx) {
  if (std::optional<json> one = single_prompt(prompt, ctx)) return {*one};
  if (prompt.empty()) bad("prompt", "'prompt' is an empty list");
  std::vector<json> prompts;
  for (const json& p : prompt) {
    std::optional<json> one = single_prompt(p, ctx);
    if (!one) bad("prompt", "a prompt in a list of prompts cannot itself be a list of prompts");
    prompts.push_back(std::move(*one));
  }
  return prompts;
}

json native_to_openai(const json& body, const ParseContext& ctx) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  if (!body.contains("prompt")) bad("prompt", "'prompt' is required");
  for (const NeutralValue& s : kUnsupportedSamplers) {
    if (!body.contains(s.name)) continue;
    const json& v = body[s.name];
    if (!v.is_number() || v.get<double>() != s.off)
      bad(s.name, fmt::format("'{}' is a llama.cpp sampler inferd does not have (only {} is "
                              "accepted, which turns it off)",
                              s.name, s.off));
  }
  json out = json::object();
  for (const char* name : kSameFields)
    if (body.contains(name)) out[name] = body[name];
  if (body.contains("repeat_penalty")) out["repetition_penalty"] = body["repeat_penalty"];
  if (body.contains("logit_bias")) out["logit_bias"] = convert_logit_bias(body["logit_bias"], ctx);
  // n_predict: absent or negative means "until the end" (the server's -n, else the context).
  // It is left to parse_completion as the default of max_tokens (native_parse_context), which
  // also keeps it within what the context has left after the prompt, as llama-server stops at
  // the context's end rather than refusing.
  if (body.contains("n_predict") && !body["n_predict"].is_number_integer())
    bad("n_predict", "'n_predict' must be an integer");
  // Token ids always come back (streamed chunks carry them); alternatives when n_probs asks.
  const int64_t n_probs = body.contains("n_probs") && body["n_probs"].is_number_integer()
                              ? body["n_probs"].get<int64_t>()
                              : 0;
  if (body.contains("n_probs") && !body["n_probs"].is_number_integer())
    bad("n_probs", "'n_probs' must be an integer");
  if (n_probs > kMaxTopLogprobs)
    bad("n_probs", fmt::format("'n_probs' may be at most {}", kMaxTopLogprobs));
  out["logprobs"] = std::max<int64_t>(n_probs, 0);
  return out;
}

ParseContext native_parse_context(const nlohmann::ordered_json& body, const ParseContext& ctx) {
  ParseContext out = ctx;
  out.sampling_defaults = ctx.native_sampling_defaults;
  const int64_t until_end = ctx.default_max_tokens > 0 ? ctx.default_max_tokens : ctx.context;
  int64_t n_predict = until_end;
  if (body.contains("n_predict") && body["n_predict"].is_number_integer() &&
      body["n_predict"].get<int64_t>() >= 0)
    n_predict = body["n_predict"].get<int64_t>();  // over -n, as llama-server has it
  // A zero n_predict computes the prompt and generates nothing; the engine always samples one
  // token, so it is asked for one and the caller drops it.
  out.default_max_tokens = std::max<int64_t>(n_predict, 1);
  return out;
}

json native_sampling_settings(const sampling::SamplingParams& s, int64_t n_predict) {
  return {
      {"n_predict", n_predict},
      {"seed", s.seed == sampling::SamplingParams::kRandomSeed ? json(4294967295u) : json(s.seed)},
      {"temperature", s.temperature},
      {"top_k", s.top_k},
      {"top_p", s.top_p},
      {"min_p", s.min_p},
      {"repeat_penalty", s.repetition_penalty},
      {"repeat_last_n", s.repeat_last_n},
      {"presence_penalty", s.presence_penalty},
      {"frequency_penalty", s.frequency_penalty},
      {"typical_p", s.typical_p},
      {"top_n_sigma", s.top_n_sigma},
      {"xtc_probability", s.xtc_probability},
      {"xtc_threshold", s.xtc_threshold},
      {"dynatemp_range", s.dynatemp_range},
      {"dynatemp_exponent", s.dynatemp_exponent},
      {"mirostat", s.mirostat},
      {"mirostat_tau", s.mirostat_tau},
      {"mirostat_eta", s.mirostat_eta},
      {"dry_multiplier", s.dry_multiplier},
      {"dry_base", s.dry_base},
      {"dry_allowed_length", s.dry_allowed_length},
      {"dry_penalty_last_n", s.dry_penalty_last_n},
      {"dry_sequence_breakers", s.dry_sequence_breakers}};
}

json native_chunk(const std::string& content, const std::vector<TokenInfo>& tokens,
                  const NativeOptions& options, const tokenizer::Tokenizer& tok) {
  json ids = json::array();
  for (const TokenInfo& t : tokens) ids.push_back(t.token);
  json out = {{"index", 0},    {"content", content}, {"tokens", ids},
              {"stop", false}, {"id_slot", 0},       {"model", options.model}};
  if (options.n_probs > 0)
    out["completion_probabilities"] = probabilities(tokens, tok, options.post_sampling_probs);
  return out;
}

json native_final(const ChoiceOutput& c, const CompletionRequest& request,
                  const NativeOptions& options, const tokenizer::Tokenizer& tok,
                  bool with_content) {
  json ids = json::array();
  if (options.return_tokens && with_content)
    for (const TokenInfo& t : c.tokens) ids.push_back(t.token);
  json stops = json::array();
  for (const std::string& stop : request.request.stop) stops.push_back(stop);
  json settings = native_sampling_settings(request.request.sampling, request.request.max_tokens);
  settings["ignore_eos"] = request.request.ignore_eos;
  // As llama-server lists them: the request's biases, and with ignore_eos every end-of-generation
  // token at -inf (JSON null).
  json biases = json::array();
  for (const auto& [token, bias] : request.request.sampling.logit_bias)
    biases.push_back(
        {{"bias", std::isfinite(bias) ? json(bias) : json(nullptr)}, {"token", token}});
  if (request.request.ignore_eos) {
    for (const int32_t token : tok.vocab().eog_ids())
      biases.push_back({{"bias", nullptr}, {"token", token}});
  }
  settings["logit_bias"] = std::move(biases);
  settings["stop"] = stops;
  settings["n_probs"] = options.n_probs;
  settings["stream"] = request.stream;
  settings["lora"] = LoraRegistry::describe(request.request.lora_scales);
  json out = {{"index", 0},
              {"content", with_content ? c.text : std::string()},
              {"tokens", ids},
              {"id_slot", 0},
              {"stop", true},
              {"model", options.model},
              {"tokens_predicted", c.completion_tokens},
              {"tokens_evaluated", c.prompt_tokens},
              {"generation_settings", settings},
              {"prompt", request.prompt_text},
              {"has_new_line", c.text.find('\n') != std::string::npos},
              {"truncated", false},
              {"stop_type", stop_type(c)},
              {"stopping_word", c.stop_word},
              {"tokens_cached", c.prompt_tokens + c.completion_tokens},
              {"timings", ResponseWriter::timings(c)}};
  if (options.n_probs > 0 && with_content)
    out["completion_probabilities"] = probabilities(c.tokens, tok, options.post_sampling_probs);
  return out;
}

}  // namespace inferd::server
