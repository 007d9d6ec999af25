#include "stream_output.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tokenizer/builtin_templates.h"
#include "util/error.h"

namespace inferd::app {

void print_stats(const inferd::RequestOutput& output, const inferd::EngineStats& engine) {
  const inferd::RequestMetrics& s = output.metrics;
  const inferd::CompletionOutput& first = output.outputs.front();
  const double prefill_tps = s.prefill_s > 0 ? double(s.prompt_tokens) / s.prefill_s : 0.0;
  const double decode_tps = s.decode_s > 0 ? double(s.completion_tokens - 1) / s.decode_s : 0.0;
  const double mean_itl_s =
      s.completion_tokens > 1 ? s.decode_s / double(s.completion_tokens - 1) : 0.0;
  fmt::print(
      stderr,
      "\n[inferd] prompt {} tokens, TTFT {:.1f} ms, prefill {:.1f} tok/s | generated {} tokens, "
      "decode {:.1f} tok/s, mean ITL {:.2f} ms | finish: {} | {} threads | KV peak {:.2f} MiB\n",
      s.prompt_tokens, s.ttft_s * 1e3, prefill_tps, s.completion_tokens, decode_tps,
      mean_itl_s * 1e3, inferd::finish_reason_name(first.finish_reason), engine.threads,
      double(engine.peak_kv_bytes) / 1048576.0);
  if (engine.spec_drafts > 0) {
    fmt::print(stderr,
               "[inferd] speculative: {} drafts, {} draft tokens, {} accepted ({:.1f}%), "
               "{:.2f} tokens per verification step\n",
               engine.spec_drafts, engine.spec_draft_tokens, engine.spec_accepted_tokens,
               100.0 * double(engine.spec_accepted_tokens) / double(engine.spec_draft_tokens),
               1.0 + double(engine.spec_accepted_tokens) / double(engine.spec_drafts));
  }
  if (engine.grammar_masks > 0) {
    fmt::print(stderr,
               "[inferd] grammar: {} token masks, computed in median {:.1f} us, p99 {:.1f} us, "
               "mean {:.1f} us; applied in median {:.1f} us\n",
               engine.grammar_masks, engine.grammar_mask_median_us, engine.grammar_mask_p99_us,
               engine.grammar_mask_mean_us, engine.grammar_apply_median_us);
  }
  if (first.finish_reason == inferd::FinishReason::kError)
    fmt::print(stderr, "[inferd] error: {}\n", first.error);
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

}  // namespace inferd::app
