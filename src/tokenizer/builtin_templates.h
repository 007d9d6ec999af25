// Chat templates shipped with inferd, by name, for GGUF files that carry none
// (`--chat-template llama3`): the prompt formats llama.cpp knows by the same names.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::tokenizer {

// The Jinja source of a built-in template ("chatml", "llama3", "gemma", ... or an alias such as
// "qwen2"); nullopt for a name we do not know.
std::optional<std::string> builtin_template_source(std::string_view name);

// Every name builtin_template_source() accepts, aliases included, sorted.
std::vector<std::string> builtin_template_names();

}  // namespace inferd::tokenizer
