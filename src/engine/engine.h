// Engine: the step loop. Owns the model, KV cache, scheduler and runner; each step schedules
// tokens, runs one batched forward, samples, checks stops and streams text to each request.
// `inferd run` drives it with one request, the server with many: there is no other path.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/draft_model.h"
#include "engine/mask_prefetcher.h"
#include "engine/mask_stats.h"
#include "engine/model_runner.h"
#include "engine/mtp_drafter.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "engine/step_cost_model.h"
#include "gguf/gguf.h"
#include "kv/kv_cache.h"
#include "kv/prefix_cache.h"
#include "model/model.h"
#include "sampling/dry.h"
#include "tokenizer/tokenizer.h"
#include "util/thread_pool.h"

namespace inferd::engine {

// Where a step's grammar masks are computed (structured output): on a thread of their own while
// the forward pass runs (kOn), or after it, spread over the engine's threads (kOff). kAuto: on
// when the process may use more CPUs than `threads` (the forward pass's threads spin on theirs).
enum class GrammarThread { kAuto, kOn, kOff };

struct EngineConfig {
  int threads = 2;
  bool pin_threads = true;  // ThreadPool's `pin`: each thread on its own CPU when they match
  // The model split over this many ranks of the process's world (dist/communicator.h; this
  // engine is rank 0's, the others run dist::run_worker): mpirun -n N.
  int tensor_parallel = 1;
  int pipeline_parallel = 1;  // (dist/model_parallel.h; not with tensor_parallel above 1)
  // Steps in flight at once under pipeline parallelism (vLLM's virtual engines): while the
  // other ranks run one step, rank 0 starts the next with other sequences. 0: as many as the
  // pipeline has ranks; 1: one step at a time. Speculative decoding takes one at a time.
  int steps_in_flight = 0;
  // Tests: rank 0's communicator of a pipeline whose ranks are threads of this process
  // (dist::ThreadGroup, the others in dist::run_worker) instead of the process's MPI world.
  dist::Communicator* pipeline_ranks = nullptr;
  // Tests: the same for data parallelism (data_parallel ranks as threads).
  dist::Communicator* data_ranks = nullptr;
  // Or each rank the whole model and its own sequences (data parallelism; not with the others).
  int data_parallel = 1;
  bool expert_parallel = false;  // experts spread whole over the tensor_ or data_parallel ranks
  int64_t context = 0;      // tokens per sequence (prompt + output); 0: the model's, capped at 4096
  int64_t max_batched_tokens = 512;
  int max_seqs = 16;
  int block_size = 16;
  int32_t kv_blocks = 0;             // 0: enough for max_seqs sequences of `context` tokens
  DType kv_key_type = DType::F16;    // F16, Q8_0 or Q4_0 (kv/kv_cache.h)
  DType kv_value_type = DType::F16;  // F16, Q8_0 or Q4_0
  // A quantized cache's exact copies (kv/kv_cache.h): F16 copies of each sequence's first block
  // and of at least its latest this many keys; 0: none.
  int kv_exact_recent = kv::kDefaultExactRecentTokens;
  // Sliding-window layers keep every position, as full-attention ones (llama.cpp --swa-full);
  // by default they hold only their window (kv/kv_cache.h).
  bool swa_full = false;
  // Automatic prefix caching (kv/prefix_cache.h): a request starts at its longest prefix whose
  // K/V are still in the cache.
  bool prefix_caching = true;
  // The tokens of long prompts take the kernels' bf16 route where the CPU has one (AMX-BF16;
  // model/batch.h): faster and more precise than the int8 kernels, which generated tokens take.
  // Off: every row takes the int8 kernels, so a token's K/V has the same bits whether it was
  // computed as a prompt token or generated, and a chat turn resumed from the prefix cache (whose
  // history holds the earlier answers' generated K/V) equals the same turn computed from scratch.
  bool bf16_prompts = true;
  // Hybrid models and quantized caches with exact copies, with prefix caching: slots of state
  // snapshots at block ends, one per running sequence and the rest for prefixes to resume from
  // (a chat's next turn). 0: as many as state_cache_bytes holds, at least twice max_seqs (with
  // exact copies only and no state_cache_bytes: twice max_seqs). Engine::config() has the count
  // the cache holds (0 without prefix caching, or with neither).
  int32_t state_snapshots = 0;
  // The memory for those snapshots (llama-server's --cache-ram); -1: the smaller of 2 GiB and an
  // eighth of the memory available at start-up, at most 64 snapshots per sequence.
  int64_t state_cache_bytes = -1;
  // Speculative decoding (engine/speculative.h); off by default.
  SpeculativeConfig spec;
  GrammarThread grammar_thread = GrammarThread::kAuto;
  model::Device device = model::Device::kCpu;  // where the target model runs
  // LoRA adapters on the target model, each at its scale for requests that give none of their
  // own (Request::lora_scales)
  std::vector<model::LoraSpec> lora;
};

class Engine {
 public:
  // `file` must outlive the engine: weights are used in place from its map.
  Engine(const gguf::GgufFile& file, const EngineConfig& config);
  ~Engine();

  // Validates and queues a request. A prompt that is empty, or that with max_tokens does not fit
  // the context, or bad sampling parameters: inferd::Error naming the limit; nothing is queued.
  uint64_t add_request(Request request);
  // One more LoRA adapter on the model while no request is queued or running (vLLM loads a
  // LoRARequest's adapter when a request first names it): at scale 0 for requests that give
  // none, so that their cached blocks stay right; a request applies it through lora_scales (one
  // more entry). Returns its index. An inferd::Error names what is wrong; nothing changes then.
  size_t add_lora_adapter(const std::string& path);
  // One scheduler step; finished requests get on_finish before it returns.
  void step();
  bool idle() const { return scheduler_->idle(); }
  // Runs steps until every queued request has finished.
  void run_until_idle();

  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const model::ModelConfig& model_config() const { return model_->config(); }
  const EngineConfig& config() const { return config_; }
  // Whether the default KV pool was cut to fit the machine's available memory (config().kv_blocks
  // says how many blocks it has).
  bool kv_blocks_capped() const { return kv_blocks_capped_; }
  // A state slot's exact copies of a quantized cache (kv/kv_cache.h); 0: the cache keeps none.
  int64_t exact_copy_bytes() const { return exact_slot_bytes_; }
  int64_t num_preemptions() const { return scheduler_->num_preemptions(); }
  const kv::KvCache& kv_cache() const { return *cache_; }
  size_t num_running() const { return scheduler_->num_running(); }
  size_t num_waiting() const { return scheduler_->num_waiting(); }
  // The most KV cache bytes in use at once since start-up, over every KV group.
  int64_t peak_kv_bytes() const { return peak_kv_bytes_; }
  // Tokens run through the model (prompts and generated tokens alike) and tokens sampled, since
  // start-up.
  int64_t computed_tokens() const { return computed_tokens_; }
  // Steps launched while another was in flight (several steps in flight), since start-up.
  int64_t overlapped_steps() const { return overlapped_steps_; }
  int64_t generated_tokens() const { return generated_tokens_; }
  // Prompt tokens looked up in the prefix cache and found there (zeros when it is off).
  kv::PrefixCacheStats prefix_cache_stats() const {
    return prefix_cache_ ? prefix_cache_->stats() : kv::PrefixCacheStats{};
  }
  const SpecDecodeStats& spec_decode_stats() const { return spec_stats_; }
  // Time spent on grammar masks (requests with structured output): computing each token's mask,
  // and applying it to the logits.
  const MaskStats& grammar_mask_stats() const { return grammar_stats_; }
  const MaskStats& grammar_apply_stats() const { return grammar_apply_stats_; }
  // Whether grammar masks are computed while the forward pass runs (EngineConfig::grammar_thread).
  bool grammar_masks_overlap() const { return mask_prefetcher_ != nullptr; }

 private:
  int32_t fit_kv_blocks(int32_t wanted, int64_t blocks_per_seq);
  int64_t exact_copy_bytes_per_slot() const;
  struct Active;
  struct BeamState;
  using Clock = std::chrono::steady_clock;

  // An embedding request: folds the hidden states this step computed for it (positions from
  // `first_position` on) into its answer, and finishes it once its prompt is done.
  void take_hidden_states(Active& active, size_t scheduled_index, int64_t first_position);
  // Prompt logprobs (Request::prompt_logprobs): scores the prompt positions this step computed
  // rows of logits for, on the thread pool.
  void take_prompt_logprobs(Active& active, size_t scheduled_index);
  // on_prompt_progress for a request that asked (Request::report_progress).
  void report_prompt_progress(const Active& active, const Sequence& seq, Clock::time_point now);
  // Samples the next token from `logits` and takes it (stops, limits, streaming); returns it.
  int32_t process_output(Active& active, std::span<float> logits);
  // A sequence that ran with draft tokens: keeps those the model's sampling agrees with and the
  // token it sampled where they part, and moves num_computed back over the rejected ones.
  // first_position: the sequence's num_computed before this step.
  void verify_drafts(Active& active, size_t scheduled_index, int64_t first_position);
  // Hybrid models: the state of every sequence about to verify drafts, kept in its checkpoint
  // slot.
  void checkpoint_recurrent_states();
  // Appends up to `budget` draft tokens to a decoding sequence, as many as pay in a step that
  // has `other_rows` rows besides this sequence's; returns how many.
  // scheduled_index: the sequence's place in this step (its hidden states, --spec mtp).
  int64_t propose_drafts(Active& active, int64_t budget, int64_t other_rows,
                         size_t scheduled_index);
  // A draft row's cost relative to a one-row decode step: from step_costs_ once it is known,
  // else the configured guess.
  double draft_row_cost() const;
  // The drafter's cost per drafted token relative to a one-row decode step: a draft model's
  // step, or an MTP block's (0 for n-gram lookup).
  double draft_model_cost() const;
  // --spec mtp: keeps the model's final hidden state at the sequence's last computed position,
  // when this step computed it (scheduled[i]), for the MTP block's next step.
  void remember_mtp_hidden(Sequence& seq, size_t scheduled_index);
  // --spec eagle3: opens the head (SpeculativeConfig::draft_model) against the model, its
  // cache, the runner's catch-up and the drafter.
  void load_eagle3_head();
  void record_step_time(double seconds);
  // Whether a sequence beside `other_rows` others could gain from drafts even if all were
  // accepted: beyond that batch size computing its text in the draft model is wasted.
  bool drafts_could_pay(int64_t other_rows) const;
  // Whether this step's sequences may draft after it: within the row budget, and in a batch in
  // which a draft could pay (drafts_could_pay).
  bool anyone_may_draft() const;
  // The prompt tokens this step computed, computed in the draft model's cache too.
  void catch_up_draft_on_prompts();
  // Folds a verification (or a shadow check of one draft) into a sequence's acceptance, and for
  // an n-gram proposal moves on where the text copies from.
  void update_acceptance(Active& active, int64_t drafted, int64_t accepted, bool shadow = false);
  // The per-token acceptance expected of a sequence's next drafts (`proposal`: an n-gram
  // proposal, or none with a draft model).
  double expected_acceptance(const Active& active, const NgramProposal& proposal) const;
  // Beam search: records a beam's candidates; once every live beam has its own, advance_beams
  // forks, drops and extends the beams and finishes the request when the search is settled.
  void observe_beam(Active& active, const Sequence& seq, std::span<const float> logits);
  void advance_beams(Active& active);
  void drop_beam(BeamState& beams, int32_t slot);
  void check_beam_request(const Request& request) const;
  // A request's LoRA scales checked against the adapters (one each, finite) and emptied when
  // they are the adapters' own, so that such requests share cached blocks with those that give
  // none.
  void normalize_lora_scales(std::vector<float>& scales) const;
  std::shared_ptr<const sampling::DryBreakers> dry_breakers(
      const std::vector<std::string>& strings);
  // n > 1: the choices waiting on `parent` fork from it and sample from its first logits.
  void fork_choices(Active& parent, std::span<const float> logits);
  std::unique_ptr<Active> make_active(Request request);
  bool emit_token(Active& active, int32_t token);
  void finish(Active& active, FinishReason reason, std::string error = {});
  void reap_cancelled();
  // A step in two halves: launch_step schedules it (at most `max_seqs` sequences; false when
  // nothing is ready) and starts its forward pass in pipeline slot `slot`; finish_step waits for
  // its logits and takes its output. Both work on scheduled_ and runner_.
  bool launch_step(int slot, int max_seqs);
  void finish_step();
  // Several steps in flight (steps_in_flight above 1): launches into the next free flight, and
  // finishes the oldest once every flight is taken or nothing more can start.
  void step_pipelined();
  bool in_flight(const Active& active) const;
  // The grammar masks of the sequences that sample this step: collected before the forward pass
  // and filled during it (MaskPrefetcher) or right after it, on every thread.
  void start_grammar_masks();
  void finish_grammar_masks();

  EngineConfig config_;
  bool kv_blocks_capped_ = false;
  int64_t exact_slot_bytes_ = 0;  // a state slot's exact copies (0: the cache keeps none)
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  // DRY's sequence breakers as tokens, by list of strings (dry_breakers()).
  std::map<std::vector<std::string>, std::shared_ptr<const sampling::DryBreakers>> dry_breakers_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<kv::KvCache> cache_;
  std::unique_ptr<kv::PrefixCache> prefix_cache_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  std::map<uint64_t, std::unique_ptr<Active>> active_;
  std::vector<ScheduledSequence> scheduled_;
  // Steps in flight (step_pipelined), each with its own runner (its batch's arrays and logits;
  // the first takes runner_'s, which is then empty between steps) and scheduled sequences,
  // swapped with runner_ and scheduled_ while it is launched or finished; empty: one step at a
  // time. Launched in order and finished in that order.
  struct Flight {
    std::unique_ptr<ModelRunner> runner;
    std::vector<ScheduledSequence> scheduled;
    bool launched = false;
  };
  std::vector<Flight> flights_;
  int64_t flights_launched_ = 0, flights_finished_ = 0, overlapped_steps_ = 0;
  Clock::time_point step_started_;
  std::vector<uint64_t> finished_ids_;
  std::vector<Active*> beam_steps_;          // beam searches that got logits this step
  std::vector<float> fork_logits_;           // [n_vocab] a choice's copy of the logits it forks at
  std::vector<int32_t> drafts_;              // [SpecDecodeStats::kMaxPositions] scratch
  std::unique_ptr<DraftModel> draft_;        // --spec draft only
  // --spec eagle3: the head's file, the head (which may read the model's embeddings and
  // output, so it goes before the model) and its K/V cache.
  std::unique_ptr<gguf::GgufFile> eagle3_file_;
  std::unique_ptr<model::Model> eagle3_;
  std::unique_ptr<kv::KvCache> eagle3_cache_;
  std::unique_ptr<MtpDrafter> mtp_;          // --spec mtp and eagle3 only
  std::vector<MtpDrafter::Job> mtp_jobs_;    // [max_seqs] this step's MTP proposals
  std::vector<DraftModel::Job> draft_jobs_;  // [max_seqs] this step's proposals
  std::vector<Active*> draft_owners_;        // [max_seqs] the sequence of each job
  SpecDecodeStats spec_stats_;
  // N-gram drafts of all sequences: decayed [accepted, rejected] counts per kind of proposal
  // (ngram_kind), the prior of each sequence's own counts.
  std::array<std::array<double, 2>, kNgramKinds> ngram_acceptance_{};
  MaskStats grammar_stats_, grammar_apply_stats_;
  std::unique_ptr<MaskPrefetcher> mask_prefetcher_;         // null: masks fill after the pass
  std::vector<structured::GrammarMatcher*> grammar_fills_;  // [max_seqs] this step's masks
  struct GrammarFillRow {
    Active* active;
    size_t scheduled_index;  // its logits: runner_->logits_for(scheduled_index)
  };
  std::vector<GrammarFillRow> grammar_fill_rows_;  // [max_seqs] beside grammar_fills_
  StepCostModel step_costs_;                       // decode steps timed by their row count
  uint64_t next_id_ = 1;
  uint64_t target_file_bytes_;  // the model's file size: its cost against the draft's at first
  int64_t peak_kv_bytes_ = 0;
  int64_t computed_tokens_ = 0, generated_tokens_ = 0;
};

}  // namespace inferd::engine
