#include "server/api/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/bad_words.h"
#include "server/json/fields.h"
#include "util/error.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;
using json_fields::bad;
using json_fields::boolean;
using json_fields::field;
using json_fields::integer;
using json_fields::number;

constexpr int kMaxN = 16;
constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopTokenIds = 1024;

std::vector<std::string> parse_stop(const json& body) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad("stop", "'stop' must be a string or a list of strings");
  if (v->size() > kMaxStops)
    bad("stop", fmt::format("'stop' may hold at most {} strings", kMaxStops));
  std::vector<std::string> stops;
  for (const json& s : *v) {
    if (!s.is_string()) bad("stop", "'stop' must be a string or a list of strings");
    stops.push_back(s.get<std::string>());
  }
  return stops;
}

// A list of at most `most` token ids in [0, n_vocab) (vLLM's stop_token_ids, allowed_token_ids);
// empty when absent.
std::vector<int32_t> parse_token_ids(const json& body, const char* name, int32_t n_vocab,
                                     size_t most) {
  std::vector<int32_t> ids;
  const json* v = field(body, name);
  if (v == nullptr) return ids;
  if (!v->is_array() || v->size() > most)
    bad(name, fmt::format("'{}' must be a list of at most {} token ids", name, most));
  for (const json& id : *v) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab)
      bad(name, fmt::format("'{}' must hold token ids in [0, {})", name, n_vocab));
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const json& body, int32_t n_vocab) {
  const json* v = field(body, "logit_bias");
  if (v == nullptr) return {};
  if (!v->is_object()) bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, value] : v->items()) {
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    if (id < 0 || id >= n_vocab)
      bad("logit_bias",
          fmt::format("logit_bias key '{}' is not a token id below {}", key, n_vocab));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -100 ||
        value.get<double>() > 100) {
      bad("logit_bias", fmt::format("logit_bias of token {} must be a number in [-100, 100]", key));
    }
    out.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return out;
}

// Content is a string, null, or a list of text parts (inferd reads no images or audio). A
// list is joined into one string, a blank line between parts as llama-server joins them:
// templates written for string content would print a list as Python's repr, and text is all
// the parts can hold here.
void normalize_content(json& message, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  const json* content = field(message, "content");
  if (content == nullptr) {
    // Only an assistant turn with tool calls gets here (parse_messages checks). Templates that
    // join strings with `+` fail on null, and the others read "" as they read null.
    message["content"] = "";
    return;
  }
  if (content->is_string()) return;
  if (!content->is_array()) bad(param, "content must be a string, null or a list of text parts");
  std::string text;
  bool first = true;
  for (const json& part : *content) {
    const std::string type = part.is_object() ? part.value("type", "") : "";
    // Named for what it is, in llama-server's words (its clients look for them), but as the
    // client's error it is: llama-server answers 500 here, as if the server had failed.
    if (type == "image_url" || type == "input_audio") {
      bad(param, fmt::format("{} input is not supported: the served model reads text only",
                             type == "image_url" ? "image" : "audio"));
    }
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      bad(param, "only parts of type 'text' with a string 'text' are supported");
    }
    if (!first) text += "\n\n";
    first = false;
    text += part["text"].get<std::string>();
  }
  message["content"] = text;
}

// The messages as the request has them (tool_calls, tool_call_id, names, ...) for the chat
// template, once each has a string role and its content is a string or null.
json parse_messages(const json& body) {
  const json* v = field(body, "messages");
  if (v == nullptr) bad("messages", "'messages' is required");
  if (!v->is_array() || v->empty()) bad("messages", "'messages' must be a non-empty list");
  json messages = *v;
  for (size_t i = 0; i < messages.size(); ++i) {
    json& m = messages[i];
    if (!m.is_object()) bad(fmt::format("messages[{}]", i), "each message must be an object");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string())
      bad(fmt::format("messages[{}].role", i), "each message needs a string 'role'");
    // Only the roles chat templates are written for: any other text would reach the template
    // as-is, and a role can carry the template's own control tokens.
    const std::string& name = role->get_ref<const std::string&>();
    if (name != "system" && name != "user" && name != "assistant" && name != "tool" &&
        name != "developer") {
      bad(fmt::format("messages[{}].role", i),
          fmt::format("role '{}' is not one of system, developer, user, assistant, tool",
                      name.size() > 40 ? name.substr(0, 40) + "..." : name));
    }
    // As OpenAI: content may be null or left out only by an assistant message that calls tools.
    const json* calls = field(m, "tool_calls");
    const bool calls_tools = calls != nullptr || field(m, "function_call") != nullptr;
    if (field(m, "content") == nullptr && !(name == "assistant" && calls_tools)) {
      bad(fmt::format("messages[{}].content", i),
          name == "assistant" ? "an assistant message needs 'content' unless it has 'tool_calls'"
                              : fmt::format("a {} message needs 'content'", name));
    }
    normalize_content(m, i);
  }
  // A final assistant message is continued (prefill); one before it would have no turn of its
  // own to end, as llama-server also refuses.
  const size_t n = messages.size();
  if (n >= 2 && messages[n - 1]["role"] == "assistant" && messages[n - 2]["role"] == "assistant" &&
      !messages[n - 1].contains("tool_calls") && !messages[n - 2].contains("tool_calls")) {
    bad("messages",
        "the conversation ends with two assistant messages: the last one is "
        "continued, so the one before it cannot be");
  }
  return messages;
}

std::vector<int32_t> parse_prompt(const json& body, const ParseContext& ctx, std::string& text) {
  const json* v = field(body, "prompt");
  if (v == nullptr) bad("prompt", "'prompt' is required");
  const json* p = v;
  // A batch of one prompt (["text"], [[ids]]: what batching clients such as lm-eval send).
  if (v->is_array() && v->size() == 1 && ((*v)[0].is_string() || (*v)[0].is_array())) p = &(*v)[0];
  if (p->is_string()) {
    text = p->get<std::string>();
    return ctx.tokenizer->encode(text, true, true);
  }
  if (!p->is_array())
    bad("prompt", "'prompt' must be a string or a list of token ids (one prompt per request)");
  const int32_t n_vocab = ctx.tokenizer->vocab().size();
  std::vector<int32_t> ids;
  for (const json& id : *p) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= n_vocab)
      bad("prompt", fmt::format("prompt token ids must be integers in [0, {})", n_vocab));
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  text = ctx.tokenizer->decode(ids, false);
  return ids;
}

// llama.cpp's own samplers, as llama-server reads them on every endpoint (vLLM has none of them;
// a request that sets one is sampled by llama.cpp's chain, sampling_params.h).
void parse_llama_cpp_samplers(const json& body, sampling::SamplingParams& p) {
  constexpr double kBig = 1e9;
  p.typical_p = static_cast<float>(number(body, "typical_p", p.typical_p, 0.0, 1.0, true));
  p.top_n_sigma = static_cast<float>(number(body, "top_n_sigma", p.top_n_sigma, -kBig, kBig));
  p.xtc_probability =
      static_cast<float>(number(body, "xtc_probability", p.xtc_probability, 0.0, 1.0));
  p.xtc_threshold = static_cast<float>(number(body, "xtc_threshold", p.xtc_threshold, 0.0, 1.0));
  p.dynatemp_range =
      static_cast<float>(number(body, "dynatemp_range", p.dynatemp_range, 0.0, kBig));
  p.dynatemp_exponent =
      static_cast<float>(number(body, "dynatemp_exponent", p.dynatemp_exponent, 0.0, kBig));
  p.mirostat = static_cast<int32_t>(integer(body, "mirostat", p.mirostat, 0, 2));
  p.mirostat_tau = static_cast<float>(number(body, "mirostat_tau", p.mirostat_tau, 0.0, kBig));
  p.mirostat_eta = static_cast<float>(number(body, "mirostat_eta", p.mirostat_eta, 0.0, kBig));
  p.dry_multiplier =
      static_cast<float>(number(body, "dry_multiplier", p.dry_multiplier, 0.0, kBig));
  // Below 1 the default, as llama-server has it.
  const double base = number(body, "dry_base", p.dry_base, 0.0, kBig);
  p.dry_base = base < 1.0 ? sampling::SamplingParams{}.dry_base : static_cast<float>(base);
  p.dry_allowed_length =
      static_cast<int32_t>(integer(body, "dry_allowed_length", p.dry_allowed_length, 0, INT32_MAX));
  p.dry_penalty_last_n = static_cast<int32_t>(
      integer(body, "dry_penalty_last_n", p.dry_penalty_last_n, -1, INT32_MAX));
  if (const json* breakers = field(body, "dry_sequence_breakers")) {
    const bool strings = breakers->is_array() && !breakers->empty() &&
                         std::all_of(breakers->begin(), breakers->end(),
                                     [](const json& b) { return b.is_string(); });
    if (!strings)
      bad("dry_sequence_breakers", "'dry_sequence_breakers' must be a non-empty list of strings");
    if (breakers->size() > sampling::SamplingParams::kMaxDryBreakers)
      bad("dry_sequence_breakers",
          fmt::format("'dry_sequence_breakers' may hold at most {} strings",
                      sampling::SamplingParams::kMaxDryBreakers));
    p.dry_sequence_breakers = breakers->get<std::vector<std::string>>();
  }
}

sampling::SamplingParams parse_sampling(const json& body, int32_t n_vocab,
                                        const sampling::SamplingParams& defaults) {
  sampling::SamplingParams p = defaults;
  p.temperature = static_cast<float>(number(body, "temperature", p.temperature, 0.0, 2.0));
  p.top_p = static_cast<float>(number(body, "top_p", p.top_p, 0.0, 1.0, true));
  p.top_k = static_cast<int32_t>(integer(body, "top_k", p.top_k, -1, n_vocab));
  p.min_p = static_cast<float>(number(body, "min_p", p.min_p, 0.0, 1.0));
  p.presence_penalty =
      static_cast<float>(number(body, "presence_penalty", p.presence_penalty, -2.0, 2.0));
  p.frequency_penalty =
      static_cast<float>(number(body, "frequency_penalty", p.frequency_penalty, -2.0, 2.0));
  p.repetition_penalty =
      static_cast<float>(number(body, "repetition_penalty", p.repetition_penalty, 0.0, 2.0, true));
  p.logit_bias = parse_logit_bias(body, n_vocab);
  parse_llama_cpp_samplers(body, p);
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    p.seed = static_cast<uint64_t>(seed->get<int64_t>());
  }
  return p;
}

int32_t parse_logprobs(const json& body, bool chat) {
  if (!chat) return static_cast<int32_t>(integer(body, "logprobs", -1, 0, kMaxTopLogprobs));
  if (!boolean(body, "logprobs", false)) {
    if (field(body, "top_logprobs") != nullptr)
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return -1;
  }
  return static_cast<int32_t>(integer(body, "top_logprobs", 0, 0, kMaxTopLogprobs));
}

// vLLM's beam search fields: use_beam_search, best_of (the beams; default n), length_penalty.
// Beam search ranks by the model's log-probabilities, so the fields that would reshape them
// are refused rather than ignored.
void parse_beam_search(const json& body, CompletionRequest& out) {
  const bool beams = boolean(body, "use_beam_search", false);
  const auto best_of = integer(body, "best_of", out.n, 1, kMaxN);
  const auto length_penalty = number(body, "length_penalty", 1.0, -10.0, 10.0);
  if (!beams) {
    if (best_of != out.n)
      bad("best_of", "'best_of' other than n is supported with 'use_beam_search' only");
    return;
  }
  if (best_of < out.n)
    bad("best_of", fmt::format("'best_of' ({}) must be at least n ({})", best_of, out.n));
  if (out.logprobs >= 0) bad("logprobs", "logprobs are not supported with beam search");
  const sampling::SamplingParams& p = out.request.sampling;
  if (p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1)
    bad("", "penalties are not supported with beam search");
  if (!p.logit_bias.empty()) bad("logit_bias", "'logit_bias' is not supported with beam search");
  if (p.dry() || p.mirostat != 0 || p.uses_llama_cpp_samplers())
    bad("",
        "DRY, Mirostat, XTC, typical_p, top_n_sigma and dynatemp are not supported with beam "
        "search");
  out.request.beam_width = static_cast<int32_t>(best_of);
  out.request.beam_results = out.n;
  out.request.length_penalty = static_cast<float>(length_penalty);
}

}  // namespace

sampling::SamplingParams openai_sampling_defaults() {
  sampling::SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 1.0f;
  p.top_k = -1;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  return p;
}

sampling::SamplingParams llama_sampling_defaults() {
  sampling::SamplingParams p = openai_sampling_defaults();
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.95f;
  p.min_p = 0.05f;
  p.llama_cpp_order = true;  // and its order of the filters
  return p;
}

void check_model(const json& body, const ParseContext& ctx) {
  const json* v = field(body, "model");
  if (v == nullptr) return;
  if (!v->is_string()) bad("model", "'model' must be a string");
  const std::string name = v->get<std::string>();
  if (name.empty() || !ctx.strict_model_name) return;
  for (const std::string& id : ctx.model_ids) {
    if (id == name) return;
  }
  if (ctx.lora != nullptr && ctx.lora->has_module(name)) return;
  throw ApiError(404,
                 fmt::format("The model '{}' does not exist; this server has '{}'", name,
                             ctx.model_ids.empty() ? "" : ctx.model_ids.front()),
                 "model", "invalid_request_error", "model_not_found");
}

namespace {

std::string model_field(const json& body) {
  const json* v = field(body, "model");
  return v != nullptr && v->is_string() ? v->get<std::string>() : "";
}

}  // namespace

std::vector<float> parse_lora_scales(const json& body, const ParseContext& ctx) {
  static const LoraRegistry kNoAdapters;
  const LoraRegistry& registry = ctx.lora != nullptr ? *ctx.lora : kNoAdapters;
  return registry.request_scales(field(body, "lora"), model_field(body));
}

std::string reported_model(const json& body, const ParseContext& ctx) {
  const std::string name = model_field(body);
  if (ctx.lora != nullptr && !name.empty() && ctx.lora->has_module(name)) return name;
  return ctx.model_ids.empty() ? "" : ctx.model_ids.front();
}

namespace {

// gpt-oss's template ends a conversation that ends with the assistant with <|return|>, as its
// training data does; a prompt goes on after it, so the turn ends with <|end|> as in the rest
// of the history (llama-server does the same).
void end_harmony_turn(std::string& prompt) {
  constexpr std::string_view kReturn = "<|return|>";
  const size_t at = prompt.rfind(kReturn);
  if (at != std::string::npos) prompt.replace(at, kReturn.size(), "<|end|>");
}

}  // namespace

std::string render_chat_prompt(const json& body, const ParseContext& ctx) {
  json messages = parse_messages(body);
  prepare_tool_history(messages);
  const bool harmony = ctx.tool_format == ToolCallFormat::kHarmony;
  if (harmony) prepare_harmony_history(messages);
  const ToolRequest tools = parse_tools(body);
  // A conversation that ends with an assistant message without tool calls asks for that message
  // to be continued (llama-server's "prefill"; vLLM's continue_final_message): the template
  // renders the turns before it with the assistant's opening, and its text (parts already
  // joined by normalize_content) follows as is. add_generation_prompt true with
  // continue_final_message true contradict each other.
  const bool continue_final = boolean(body, "continue_final_message", true);
  if (boolean(body, "add_generation_prompt", true) && field(body, "continue_final_message") &&
      continue_final)
    bad("continue_final_message",
        "'continue_final_message' continues the last message, 'add_generation_prompt' starts a "
        "new one: set add_generation_prompt to false");
  std::string prefill;
  bool add_generation_prompt = boolean(body, "add_generation_prompt", true);
  const json& last = messages.back();
  if (continue_final && last.value("role", "") == "assistant" && !last.contains("tool_calls")) {
    if (last.contains("content") && last["content"].is_string())
      prefill = last["content"].get<std::string>();
    messages.erase(messages.end() - 1);
    add_generation_prompt = true;  // the assistant's opening, then its text to continue
    // gpt-oss's opening leaves the channel to the model: the text continues the final answer.
    if (harmony) prefill = "<|channel|>final<|message|>" + prefill;
  }
  try {
    std::string prompt =
        ctx.render_chat(messages, tools.active() ? tools.tools : json(), add_generation_prompt);
    if (harmony && !add_generation_prompt) end_harmony_turn(prompt);
    return prompt + prefill;
  } catch (const Error& e) {
    bad("messages", fmt::format("the chat template failed: {}", e.what()));
  }
}

std::optional<structured::GrammarSpec> parse_output_constraint(const json& body,
                                                               std::string& param) {
  using Kind = structured::GrammarSpec::Kind;
  std::optional<structured::GrammarSpec> found;
  bool any_whitespace = false;
  auto take = [&](std::string name, structured::GrammarSpec spec) {
    if (found) {
      bad(name, fmt::format("'{}' and '{}' both constrain the output: give one", param, name));
    }
    param = std::move(name);
    found = std::move(spec);
  };
  // A schema given as an object or as a JSON string of one.
  auto schema_text = [](const json& v, const std::string& name) {
    if (v.is_object() || v.is_boolean()) return v.dump();
    if (v.is_string()) return v.get<std::string>();
    bad(name, fmt::format("'{}' must be a JSON schema (an object)", name));
  };
  auto text = [](const json& v, const std::string& name) {
    if (!v.is_string() || v.get<std::string>().empty())
      bad(name, fmt::format("'{}' must be a non-empty string", name));
    return v.get<std::string>();
  };
  auto choices = [](const json& v, const std::string& name) {
    if (!v.is_array() || v.empty()) bad(name, fmt::format("'{}' must be a non-empty list", name));
    std::vector<std::string> out;
    for (const json& c : v) {
      if (!c.is_string()) bad(name, fmt::format("'{}' must hold strings", name));
      out.push_back(c.get<std::string>());
    }
    return out;
  };
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad("response_format", "'response_format' must be an object with a 'type'");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      // llama-server also takes a schema here.
      if (const json* schema = field(*rf, "schema")) {
        take("response_format",
             {Kind::kJsonSchema, schema_text(*schema, "response_format.schema"), {}});
      } else {
        take("response_format", {Kind::kJsonObject, {}, {}});
      }
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      const json* schema = js != nullptr && js->is_object() ? field(*js, "schema") : nullptr;
      if (schema == nullptr) schema = field(*rf, "schema");  // llama-server's shorter form
      if (schema == nullptr) {
        bad("response_format.json_schema.schema",
            "response_format of type json_schema needs 'json_schema': {\"name\": ..., \"schema\": "
            "{...}}");
      }
      take("response_format",
           {Kind::kJsonSchema, schema_text(*schema, "response_format.json_schema.schema"), {}});
    } else if (type != "text") {
      bad("response_format.type",
          fmt::format("response_format type '{}' is not one of text, json_object, json_schema",
                      type));
    }
  }
  if (const json* so = field(body, "structured_outputs")) {
    if (!so->is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : so->items()) {
      if (value.is_null()) continue;
      const std::string name = "structured_outputs." + key;
      if (key == "json") {
        take(name, {Kind::kJsonSchema, schema_text(value, name), {}});
      } else if (key == "regex") {
        take(name, {Kind::kRegex, text(value, name), {}});
      } else if (key == "choice") {
        take(name, {Kind::kChoice, {}, choices(value, name)});
      } else if (key == "grammar") {
        take(name, {Kind::kEbnf, text(value, name), {}});
      } else if (key == "json_object") {
        if (!value.is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name));
        if (value.get<bool>()) take(name, {Kind::kJsonObject, {}, {}});
      } else if (key == "disable_any_whitespace") {
        if (!value.is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name));
        any_whitespace = !value.get<bool>();
      } else if (key == "disable_additional_properties" || key == "whitespace_pattern" ||
                 key == "structural_tag") {
        bad(name, fmt::format("'{}' is not supported", name));
      } else {
        bad(name, fmt::format("unknown field '{}'", name));
      }
    }
  }
  // vLLM's older names, and llama-server's.
  if (const json* v = field(body, "guided_json"))
    take("guided_json", {Kind::kJsonSchema, schema_text(*v, "guided_json"), {}});
  if (const json* v = field(body, "guided_regex"))
    take("guided_regex", {Kind::kRegex, text(*v, "guided_regex"), {}});
  if (const json* v = field(body, "guided_choice"))
    take("guided_choice", {Kind::kChoice, {}, choices(*v, "guided_choice")});
  if (const json* v = field(body, "guided_grammar"))
    take("guided_grammar", {Kind::kEbnf, text(*v, "guided_grammar"), {}});
  if (const json* v = field(body, "json_schema"))
    take("json_schema", {Kind::kJsonSchema, schema_text(*v, "json_schema"), {}});
  if (const json* v = field(body, "grammar"))
    take("grammar", {Kind::kEbnf, text(*v, "grammar"), {}});
  if (found) found->any_whitespace = any_whitespace;
  return found;
}

ReasoningSplitter reasoning_splitter(const CompletionRequest& request) {
  if (request.tool_format == ToolCallFormat::kGemma4) return ReasoningSplitter::gemma4();
  if (request.tool_format != ToolCallFormat::kHarmony)
    return ReasoningSplitter(request.reasoning_open);
  return ReasoningSplitter::harmony(request.prompt_text, request.tools.active());
}

std::vector<json> completion_prompts(const json& prompt) {
  // Up to this many prompts in one request (each runs as a request of its own).
  constexpr size_t kMaxPrompts = 256;
  if (!prompt.is_array() ||
      std::all_of(prompt.begin(), prompt.end(), [](const json& e) { return e.is_number(); })) {
    if (prompt.is_array() && prompt.empty()) bad("prompt", "'prompt' is an empty list");
    return {prompt};
  }
  if (prompt.size() > kMaxPrompts)
    bad("prompt",
        fmt::format("at most {} prompts in one request, got {}", kMaxPrompts, prompt.size()));
  std::vector<json> prompts;
  for (const json& p : prompt) {
    if (!p.is_string() && !p.is_array())
      bad("prompt", "a list of prompts holds texts or lists of token ids");
    prompts.push_back(p);
  }
  return prompts;
}

CompletionRequest parse_completion(const json& body, bool chat, const ParseContext& ctx) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  check_model(body, ctx);
  CompletionRequest out;
  out.chat = chat;
  out.model = reported_model(body, ctx);
  out.request.lora_scales = parse_lora_scales(body, ctx);
  const int32_t n_vocab = ctx.tokenizer->vocab().size();
  if (chat) {
    out.prompt_text = render_chat_prompt(body, ctx);
    // gpt-oss always writes channels: auto splits them.
    const bool thinks = ctx.template_thinks || ctx.tool_format == ToolCallFormat::kHarmony;
    out.split_reasoning = ctx.reasoning_format == ReasoningFormat::kDeepseek ||
                          (ctx.reasoning_format == ReasoningFormat::kAuto && thinks);
    const size_t end = out.prompt_text.find_last_not_of(" \t\r\n");
    out.reasoning_open = out.split_reasoning && end != std::string::npos && end + 1 >= 7 &&
                         out.prompt_text.compare(end + 1 - 7, 7, "<think>") == 0;
    out.request.prompt = ctx.tokenizer->encode(out.prompt_text, true, true);
  } else {
    out.request.prompt = parse_prompt(body, ctx, out.prompt_text);
  }
  const auto prompt_tokens = static_cast<int64_t>(out.request.prompt.size());
  const char* prompt_param = chat ? "messages" : "prompt";
  if (prompt_tokens == 0) bad(prompt_param, "the prompt is empty");
  if (prompt_tokens >= ctx.context) {
    // OpenAI's code, llama-server's type and fields, so either kind of client can tell it apart.
    ApiError e(400,
               fmt::format("the prompt is {} tokens; this model's context is {}", prompt_tokens,
                           ctx.context),
               prompt_param, "exceed_context_size_error", "context_length_exceeded");
    e.details = {{"n_prompt_tokens", prompt_tokens}, {"n_ctx", ctx.context}};
    throw e;
  }
  const char* max_name = field(body, "max_completion_tokens") != nullptr && chat
                             ? "max_completion_tokens"
                             : "max_tokens";
  // Completions default to 16 tokens (as OpenAI); chat to the rest of the context; the
  // server's -n to itself, within the context.
  const int64_t default_max = ctx.default_max_tokens > 0
                                  ? std::min(ctx.default_max_tokens, ctx.context - prompt_tokens)
                              : chat ? ctx.context - prompt_tokens
                                     : 16;
  // Echo with max_tokens 0 scores the prompt alone (OpenAI's legacy completions allowed it).
  out.echo = !chat && boolean(body, "echo", false);
  out.request.max_tokens = integer(body, max_name, default_max, out.echo ? 0 : 1, INT32_MAX);
  if (out.request.max_tokens == 0) {
    out.score_only = true;
    out.request.max_tokens = 1;
  }
  if (prompt_tokens + out.request.max_tokens > ctx.context) {
    bad(max_name, fmt::format("the prompt ({} tokens) plus {} = {} is {} tokens, more than this "
                              "model's context of {}",
                              prompt_tokens, max_name, out.request.max_tokens,
                              prompt_tokens + out.request.max_tokens, ctx.context));
  }
  out.request.sampling = parse_sampling(body, n_vocab, ctx.sampling_defaults);
  out.request.stop = parse_stop(body);
  out.request.ignore_eos = boolean(body, "ignore_eos", false);
  // vLLM's extras (engine/request.h): token ids that stop like EOS, and a floor on the output
  // before EOS or those can end it.
  out.request.stop_token_ids = parse_token_ids(body, "stop_token_ids", n_vocab, kMaxStopTokenIds);
  out.request.min_tokens = integer(body, "min_tokens", 0, 0, out.request.max_tokens);
  out.request.include_stop_str = boolean(body, "include_stop_str_in_output", false);
  out.request.allowed_token_ids = parse_token_ids(body, "allowed_token_ids", n_vocab, n_vocab);
  if (field(body, "allowed_token_ids") != nullptr && out.request.allowed_token_ids.empty())
    bad("allowed_token_ids", "'allowed_token_ids' must not be empty");
  if (const json* words = field(body, "bad_words")) {  // vLLM's
    if (!words->is_array() ||
        !std::all_of(words->begin(), words->end(), [](const json& w) { return w.is_string(); }))
      bad("bad_words", "'bad_words' must be a list of strings");
    try {
      out.request.bad_words =
          engine::bad_word_sequences(*ctx.tokenizer, words->get<std::vector<std::string>>());
    } catch (const Error& e) {
      bad("bad_words", e.what());
    }
  }
  out.request.report_progress = boolean(body, "return_progress", false);
  out.timings_per_token = boolean(body, "timings_per_token", false);
  if (const json* salt = field(body, "cache_salt")) {
    if (!salt->is_string() || salt->get<std::string>().empty())
      bad("cache_salt", "'cache_salt' must be a non-empty string");
    out.request.cache_salt = salt->get<std::string>();
  }
  // llama-server's per-request draft limit; 0 turns speculative decoding off for this request.
  if (const json* spec = field(body, "speculative.n_max")) {
    if (!spec->is_number_integer() || spec->get<int64_t>() < 0 ||
        spec->get<int64_t>() > ctx.spec_tokens) {
      bad("speculative.n_max",
          fmt::format("'speculative.n_max' must be an integer from 0 to {} (the server's "
                      "--spec-k; 0 when it runs without speculative decoding)",
                      ctx.spec_tokens));
    }
    out.request.spec_tokens = spec->get<int32_t>();
  }
  out.logprobs = parse_logprobs(body, chat);
  out.request.logprobs = out.logprobs;
  out.prompt_logprobs =
      static_cast<int32_t>(integer(body, "prompt_logprobs", -1, 0, kMaxTopLogprobs));
  out.request.prompt_logprobs =
      std::max(out.prompt_logprobs, out.echo && out.logprobs >= 0 ? out.logprobs : -1);
  out.request.post_sampling_probs = boolean(body, "post_sampling_probs", false);
  out.n = static_cast<int>(integer(body, "n", 1, 1, kMaxN));
  parse_beam_search(body, out);
  out.stream = boolean(body, "stream", false);
  if (out.stream && out.request.prompt_logprobs >= 0) {
    bad(out.prompt_logprobs >= 0 ? "prompt_logprobs" : "echo",
        "the prompt's logprobs (prompt_logprobs, or echo with logprobs) are not streamed: "
        "ask without stream");
  }
  if (out.stream && out.score_only) bad(max_name, "echo with max_tokens 0 is not streamed");
  if (out.request.prompt_logprobs >= 0 && out.request.beam_width > 0)
    bad("prompt_logprobs", "the prompt's logprobs are not supported with beam search");
  if (!out.request.bad_words.empty() && out.request.beam_width > 0)
    bad("bad_words", "'bad_words' is not supported with beam search");
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) bad("stream_options", "'stream_options' must be an object");
    out.include_usage = boolean(*options, "include_usage", false);
  }
  std::string constraint_param;
  std::optional<structured::GrammarSpec> constraint =
      parse_output_constraint(body, constraint_param);
  if (chat) {
    out.tools = parse_tools(body);
    out.tool_format = ctx.tool_format;
    // "required" or a named function: the grammar makes the model write the call.
    if (out.tools.choice == ToolChoice::kRequired || out.tools.choice == ToolChoice::kNamed) {
      if (constraint) {
        bad("tool_choice",
            fmt::format("tool_choice '{}' and '{}' both constrain the output",
                        out.tools.choice == ToolChoice::kNamed ? out.tools.name : "required",
                        constraint_param));
      }
      constraint = tool_call_grammar(out.tools, out.tool_format);
      constraint_param = "tools";
    }
  } else if (field(body, "tools") != nullptr) {
    bad("tools", "tools are for /v1/chat/completions");
  }
  if (const auto& spec = constraint) {
    if (ctx.grammars == nullptr)
      bad(constraint_param, "structured output is not available on this server");
    if (out.request.beam_width > 0)
      bad(constraint_param, "structured output and beam search do not mix");
    try {
      out.request.grammar = ctx.grammars->compile(*spec);
    } catch (const Error& e) {
      bad(constraint_param, e.what());
    }
  }
  try {
    out.request.sampling.validate(n_vocab);
  } catch (const Error& e) {
    bad("", e.what());
  }
  return out;
}

}  // namespace inferd::server
