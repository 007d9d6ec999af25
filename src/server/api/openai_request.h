// OpenAI request bodies -> engine requests. Every field is checked for type and range; a bad
// one is an ApiError naming it, with the HTTP status and OpenAI error type to answer with.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api/lora_adapters.h"
#include "server/chat/reasoning.h"
#include "server/chat/tool_calls.h"
#include "server/chat/tools.h"
#include "server/json/api_error.h"
#include "structured/grammar.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace inferd::server {

// temperature 1, top_p 1, no top-k or min-p, no penalties, a new seed each request.
sampling::SamplingParams openai_sampling_defaults();
// llama.cpp's (its /completion's defaults): temperature 0.8, top_k 40, top_p 0.95, min_p 0.05,
// no penalties, a new seed each request.
sampling::SamplingParams llama_sampling_defaults();

// The most alternatives a request may ask for per token (logprobs, top_logprobs, n_probs).
constexpr int kMaxTopLogprobs = 20;

// What parsing needs to know about the served model.
struct ParseContext {
  const tokenizer::Tokenizer* tokenizer = nullptr;
  int64_t context = 0;                 // tokens per sequence (prompt + output)
  std::vector<std::string> model_ids;  // the served names; the first is reported
  // true: a request's "model" must be one of model_ids (vLLM); false: any name is taken to
  // mean the one model served (llama-server), so clients with a fixed name work unchanged.
  bool strict_model_name = false;
  // What a request gets for the sampling fields it leaves out: OpenAI's defaults unless the
  // server's command line set others (llama-server's --temp, --top-k, --seed, ...).
  sampling::SamplingParams sampling_defaults = openai_sampling_defaults();
  // The same for llama-server's own API (/completion, /infill): llama.cpp's defaults, except
  // where the server's command line set a value.
  sampling::SamplingParams native_sampling_defaults = llama_sampling_defaults();
  // max_tokens when a request gives none (llama-server's -n); 0: OpenAI's (16 for completions,
  // the rest of the context for chat).
  int64_t default_max_tokens = 0;
  int32_t spec_tokens = 0;  // the server's draft tokens per step (0: no speculative decoding)
  // Compiles response_format / structured_outputs constraints; null: they are refused.
  const structured::GrammarCompiler* grammars = nullptr;
  // Thinking models: whether chat answers are split into reasoning_content and content.
  ReasoningFormat reasoning_format = ReasoningFormat::kAuto;
  bool template_thinks = false;  // the chat template writes <think> (what kAuto looks for)
  // Renders the request's messages (a validated JSON list) and tools (a list, or null for none)
  // with the chat template, with the assistant's opening at the end or not.
  std::function<std::string(const nlohmann::ordered_json& messages,
                            const nlohmann::ordered_json& tools, bool add_generation_prompt)>
      render_chat;
  // How the served model writes tool calls (from its chat template).
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  // The LoRA adapters requests may choose (server/api/lora_adapters.h); null: none.
  const LoraRegistry* lora = nullptr;
};

struct CompletionRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // llama-server's return_progress (request.report_progress): a stream reports how far the
  // prompt is (prompt_progress chunks); timings_per_token: those carry timings too.
  bool timings_per_token = false;
  int n = 1;
  int32_t logprobs = -1;  // alternatives per token; -1: no logprobs
  // Completions' echo: the prompt comes back before the answer, with the logprobs of its
  // tokens when logprobs are asked for (OpenAI's legacy scoring: token_logprobs[0] is null).
  // score_only: echo with max_tokens 0 (one token is generated and left out).
  bool echo = false;
  bool score_only = false;
  // vLLM's prompt_logprobs (request.prompt_logprobs also serves echo's): -1 none.
  int32_t prompt_logprobs = -1;
  std::string model;
  std::string prompt_text;  // the prompt as text (chat: the rendered template)
  // Chat answers of thinking models: <think>...</think> (gpt-oss: the analysis channel) goes to
  // reasoning_content; the rendered prompt may already have opened the block.
  bool split_reasoning = false;
  bool reasoning_open = false;
  // Chat with tools: the answer is parsed for calls in `tool_format` when tools.active().
  ToolRequest tools;
  ToolCallFormat tool_format = ToolCallFormat::kGeneric;
  engine::Request request;  // prompt ids, sampling, max_tokens, stop, ignore_eos, logprobs
};

// The splitter of one choice's output into reasoning and content, for a request with
// split_reasoning: <think> tags, or gpt-oss's channels read from the end of its prompt.
ReasoningSplitter reasoning_splitter(const CompletionRequest& request);

// Parses /v1/completions (chat = false) or /v1/chat/completions (chat = true).
// The prompt text a chat body's "messages" render to (the BOS the tokenizer adds left out);
// ApiError for bad messages, a template that fails, or a model without a template.
std::string render_chat_prompt(const nlohmann::ordered_json& body, const ParseContext& ctx);
// The prompts of a /v1/completions body's "prompt": a text or token ids (one prompt), or a
// list of texts or of token-id lists (a batch: each is answered as its own request, its
// choices after the previous prompt's). ApiError for an empty or malformed list.
std::vector<nlohmann::ordered_json> completion_prompts(const nlohmann::ordered_json& prompt);
CompletionRequest parse_completion(const nlohmann::ordered_json& body, bool chat,
                                   const ParseContext& ctx);

// The output constraint a body asks for, if any: OpenAI's response_format (json_object,
// json_schema), vLLM's structured_outputs (json, regex, choice, grammar, json_object) and its
// older guided_* fields, llama-server's json_schema and grammar. More than one is an ApiError,
// as is a malformed one. Sets `param` to the field it came from.
std::optional<structured::GrammarSpec> parse_output_constraint(const nlohmann::ordered_json& body,
                                                               std::string& param);

// The model named in a request body, or an ApiError 404 when it is not one we serve (a name of
// the server's or of one of its LoRA modules).
void check_model(const nlohmann::ordered_json& body, const ParseContext& ctx);
// The LoRA scales a request body asks for (engine::Request::lora_scales): its `lora`, the
// module its `model` names, or the server's; ApiError for a bad `lora` or one on a server
// without adapters.
std::vector<float> parse_lora_scales(const nlohmann::ordered_json& body, const ParseContext& ctx);
// The name a response reports: the LoRA module the body's `model` names, else the server's.
std::string reported_model(const nlohmann::ordered_json& body, const ParseContext& ctx);

}  // namespace inferd::server
