#include "stream_output.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tokenizer/builtin_templates.h"
#include "util/error.h"

namespace inferd::app {

void print_stats(const engine::RequestResult& result, const engine::Engine& engine) {
  const engine::RequestStats& s = result.stats;
  const double prefill_tps = s.prefill_s > 0 ? double(s.prompt_tokens) / s.prefill_s : 0.0;
  const double decode_tps = s.decode_s > 0 ? double(s.completion_tokens - 1) / s.decode_s : 0.0;
  fmt::print(
      stderr,
      "\n[inferd] prompt {} tokens, TTFT {:.1f} ms, prefill {:.1f} tok/s | generated {} tokens, "
      "decode {:.1f} tok/s, mean ITL {:.2f} ms | finish: {} | {} threads | KV peak {:.2f} MiB\n",
      s.prompt_tokens, s.ttft_s * 1e3, prefill_tps, s.completion_tokens, decode_tps,
      s.mean_itl_s() * 1e3, engine::finish_reason_name(result.finish_reason),
      engine.config().threads, double(engine.peak_kv_bytes()) / 1048576.0);
  if (const engine::SpecDecodeStats& spec = engine.spec_decode_stats(); spec.num_drafts > 0) {
    fmt::print(stderr,
               "[inferd] speculative: {} drafts, {} draft tokens, {} accepted ({:.1f}%), "
               "{:.2f} tokens per verification step\n",
               spec.num_drafts, spec.num_draft_tokens, spec.num_accepted_tokens,
               100.0 * double(spec.num_accepted_tokens) / double(spec.num_draft_tokens),
               1.0 + double(spec.num_accepted_tokens) / double(spec.num_drafts));
  }
  if (const engine::MaskStats& masks = engine.grammar_mask_stats(); masks.masks > 0) {
    const engine::MaskStats& applies = engine.grammar_apply_stats();
    fmt::print(stderr,
               "[inferd] grammar: {} token masks, computed in median {:.1f} us, p99 {:.1f} us, "
               "mean {:.1f} us; applied in median {:.1f} us\n",
               masks.masks, masks.quantile_us(0.5), masks.quantile_us(0.99),
               masks.total_s * 1e6 / double(masks.masks), applies.quantile_us(0.5));
  }
  if (result.finish_reason == engine::FinishReason::kError)
    fmt::print(stderr, "[inferd] error: {}\n", result.error);
}

tokenizer::ChatTemplate load_chat_template(const std::string& name_or_file) {
  if (auto builtin = tokenizer::ChatTemplate::builtin(name_or_file)) return *builtin;
  std::ifstream in(name_or_file);
  if (!in)
    fail("--chat-template '{}' is neither a built-in template ({}) nor a readable file",
         name_or_file, fmt::join(tokenizer::builtin_template_names(), ", "));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return tokenizer::ChatTemplate(text.str());
  } catch (const Error& e) {
    fail("{}: {}", name_or_file, e.what());
  }
}

tokenizer::ChatTemplate load_chat_template(const gguf::GgufFile& file,
                                           const std::string& override_name) {
  if (override_name.empty()) return tokenizer::ChatTemplate::from_gguf(file);
  return load_chat_template(override_name);
}

std::string render_chat(const tokenizer::Tokenizer& tokenizer,
                        const tokenizer::ChatTemplate& chat_template,
                        const nlohmann::ordered_json& messages) {
  tokenizer::ChatInputs inputs;
  inputs.messages = messages;
  return tokenizer::render_chat_prompt(chat_template, tokenizer, std::move(inputs));
}

std::string render_chat(const tokenizer::Tokenizer& tokenizer,
                        const tokenizer::ChatTemplate& chat_template,
                        const std::vector<tokenizer::ChatMessage>& messages) {
  return render_chat(tokenizer, chat_template, tokenizer::to_json(messages));
}

}  // namespace inferd::app
