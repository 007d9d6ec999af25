// Request: what a caller asks the engine for (prompt ids, sampling, limits) and the channel
// the engine streams its answer into. One type serves `inferd run` and the HTTP server.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace inferd::structured {
class CompiledGrammar;
}

namespace inferd::engine {

enum class FinishReason { kStop, kLength, kCancelled, kError };

// How an embedding request folds the final hidden states of its prompt tokens (after the output
// norm, before the vocabulary projection) into its answer.
enum class Pooling {
  kNone,  // no folding: one vector per prompt token
  kMean,  // the mean over the prompt's tokens
  kCls,   // the first token's
  kLast,  // the last token's: in a causal model the only one that has seen the whole input
};
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", ...

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double queue_s = 0;         // arrival -> first scheduled
  double ttft_s = 0;          // arrival -> first generated token
  double prefill_s = 0;       // first scheduled -> first generated token
  double decode_s = 0;        // first -> last generated token
  double e2e_s = 0;           // arrival -> finish
  int64_t cached_tokens = 0;  // prompt tokens whose K/V came from the prefix cache
  double mean_itl_s() const {
    return completion_tokens > 1 ? decode_s / static_cast<double>(completion_tokens - 1) : 0.0;
  }
};

// One hypothesis of a beam search, as returned.
struct BeamResult {
  std::vector<int32_t> tokens;  // generated, no EOS
  std::string text;             // their text, cut before the first stop string
  double cum_logprob = 0;       // sum of the tokens' log-probabilities (with the EOS's)
  double score = 0;             // cum_logprob / length ^ length_penalty
  FinishReason finish_reason = FinishReason::kStop;
};

// A prompt token's log-probability under the model's distribution at the position before it
// (vLLM's prompt_logprobs; OpenAI's echo with logprobs). The first prompt token has none.
struct PromptTokenLogprob {
  int32_t token = -1;
  float logprob = 0;  // NaN for the first prompt token
  int32_t rank = 0;   // 1 + the number of tokens the model found more likely (0: the first token)
  std::vector<sampling::TokenLogprob>
      top;  // the request's prompt_logprobs most likely, first first
};

struct RequestResult {
  FinishReason finish_reason = FinishReason::kStop;
  std::string error;      // set when finish_reason is kError
  std::string stop_word;  // the stop string that ended the output (finish_reason kStop), if any
  int32_t stop_token = -1;  // the stop_token_ids entry that ended it, if one did
  RequestStats stats;
  std::vector<int32_t> output_tokens;  // a beam search: the best beam's
  std::vector<BeamResult> beams;       // a beam search: its best hypotheses, best first
  // An embedding request: [1, n_embd] pooled, or [prompt tokens, n_embd] with Pooling::kNone;
  // as the model computed them (normalizing is the caller's choice).
  std::vector<float> embedding;
  // Request::prompt_logprobs >= 0: one entry per prompt token, in order (n > 1 choices: the
  // first choice's result has them).
  std::vector<PromptTokenLogprob> prompt_logprobs;
};

// Receives a request's output on the engine thread. Implementations must be quick and must
// not throw (the CLI writes to stdout; the server hands pieces to its connection).
// How far a request's prompt is: reported at its first step and after each prompt chunk when
// the request asks (llama-server's return_progress).
struct PromptProgress {
  int64_t total = 0;      // prompt tokens
  int64_t cached = 0;     // of them, found in the prefix cache
  int64_t processed = 0;  // cached + computed so far
  double elapsed_s = 0;   // since the request was first scheduled
};

class OutputChannel {
 public:
  virtual ~OutputChannel() = default;
  // Text that is final: whole UTF-8 characters, never part of a stop string.
  virtual void on_text(std::string_view text) = 0;
  // Each generated token with its log-probability and the request's `logprobs` most likely
  // alternatives, before its text; only when the request asked for logprobs (>= 0).
  virtual void on_token(int32_t /*token*/, float /*logprob*/,
                        std::span<const sampling::TokenLogprob> /*top*/) {}
  // Only when the request's report_progress is set.
  virtual void on_prompt_progress(const PromptProgress& /*progress*/) {}
  // After every step, once the step's text and tokens for this request have been reported (a
  // step that verified drafts reports several tokens). A channel that hands output to another
  // thread wakes it here, once a step rather than once a token.
  virtual void on_step_end() {}
  // Exactly once, last.
  virtual void on_finish(const RequestResult& result) = 0;
  // Polled every step; true cancels the request and frees its KV blocks.
  virtual bool cancelled() const { return false; }
};

struct Request {
  std::vector<int32_t> prompt;
  sampling::SamplingParams sampling;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;  // stop strings; never part of the output
  bool ignore_eos = false;
  // vLLM's stop_token_ids: sampling one of these ends the output as an end-of-generation token
  // does (finish reason stop; the token is not part of the text), ignore_eos or not.
  std::vector<int32_t> stop_token_ids;
  // vLLM's min_tokens: until this many tokens are generated, neither an end-of-generation token
  // nor one of stop_token_ids is sampled (stop strings still stop).
  int64_t min_tokens = 0;
  // vLLM's include_stop_str_in_output: the stop string that ends the output is kept at its end.
  bool include_stop_str = false;
  // vLLM's allowed_token_ids: when not empty, only these tokens are sampled (end tokens count
  // only if listed). Sorted and deduplicated by add_request.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words as token sequences (engine/bad_words.h makes them from words): a
  // sequence's last token is not sampled where the output so far ends with its other tokens.
  std::vector<std::vector<int32_t>> bad_words;
  bool report_progress = false;  // on_prompt_progress while the prompt is computed
  int32_t logprobs = -1;         // -1: none; k >= 0: report each token's logprob and k alternatives
  // -1: none; k >= 0: the result's prompt_logprobs, each prompt token's log-probability and the
  // k most likely tokens at its place, from the model's logits (no penalties, bias or
  // temperature). Such a prompt is computed whole (never started from cached blocks), a few
  // dozen positions a step (the rows of logits a step holds).
  int32_t prompt_logprobs = -1;
  // The logprobs above from the distribution the sampler drew from (after temperature, min-p,
  // top-k and top-p; llama-server's post_sampling_probs) instead of the model's.
  bool post_sampling_probs = false;
  // Requests share cached KV blocks only when their salts are equal (vLLM's cache_salt).
  std::string cache_salt;
  // An engine with LoRA adapters (EngineConfig::lora): this request's scale of each, in their
  // order (llama-server's per-request `lora`; vLLM's adapter chosen by model name is 1 for it
  // and 0 for the others); empty: each adapter's own scale. Requests share cached KV blocks
  // only with requests of the same scales.
  std::vector<float> lora_scales;
  // Beam search (vLLM's use_beam_search) when beam_width > 0: that many beams, ranked by the
  // model's log-probabilities (the sampling parameters do not apply); the result's `beams`
  // holds the beam_results best hypotheses. Text is not streamed: it is known at the end.
  int32_t beam_width = 0;
  int32_t beam_results = 1;
  float length_penalty = 1.0f;
  // Speculative decoding for this request: -1 the engine's setting, 0 off, k > 0 at most k draft
  // tokens per step (with the engine's drafter; no effect when the engine has none).
  int32_t spec_tokens = -1;
  // Constrained decoding (structured/grammar.h): each token is sampled among those the grammar
  // allows next, and the output ends when it is complete. Null: unconstrained.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  // An embedding request when set: nothing is sampled; the prompt is computed and the result's
  // `embedding` holds its hidden states pooled this way (max_tokens, sampling and stops do not
  // apply).
  std::optional<Pooling> embed;
  std::shared_ptr<OutputChannel> output;
  // n > 1 choices of this prompt: choice i (1..) streams into more_outputs[i - 1]. They fork
  // from the first choice when its prompt is computed (sharing its blocks), each with its own
  // sampler (seed + i when the seed is fixed).
  std::vector<std::shared_ptr<OutputChannel>> more_outputs;
};

}  // namespace inferd::engine
