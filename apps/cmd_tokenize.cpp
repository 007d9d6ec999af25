// Placeholder until the tokenizer lands (replaced by the tokenizer module).
#include "commands.h"
namespace inferd::app {
void register_tokenize(CLI::App&) {}
void register_detokenize(CLI::App&) {}
}  // namespace inferd::app
