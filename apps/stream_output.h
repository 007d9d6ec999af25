// Terminal plumbing shared by `run` and `chat`: the timing summary, and chat-template loading
// for the --chat-template option (`template`, `serve`).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "inferd/engine.h"
#include "tokenizer/chat_template.h"

namespace inferd::app {

// Prompt tokens, TTFT, prefill tok/s, generated tokens, decode tok/s and mean ITL of a request's
// first choice, and the engine's speculative and grammar counters, to stderr.
void print_stats(const inferd::RequestOutput& output, const inferd::EngineStats& engine);

// A --chat-template value: a built-in name (chatml) or a template file.
tokenizer::ChatTemplate load_chat_template(const std::string& name_or_file);
// The model's template, or the override when one is given.
tokenizer::ChatTemplate load_chat_template(const gguf::GgufFile& file,
                                           const std::string& override_name);

}  // namespace inferd::app
