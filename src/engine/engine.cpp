#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <utility>

#include "dist/model_parallel.h"
#include "engine/beam_search.h"
#include "engine/stop_matcher.h"
#include "model/registry.h"
#include "sampling/sampler.h"
#include "structured/grammar.h"
#include "tokenizer/detokenizer.h"
#include "util/error.h"

namespace inferd::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

// A request inside the engine: its sequence plus the per-request state of the output path.
struct Engine::Active {
  Sequence seq;
  std::unique_ptr<sampling::Sampler> sampler;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopMatcher> stop;
  std::string stop_word;                    // the stop string that ended the output, if one did
  std::vector<sampling::TokenLogprob> top;  // [request.logprobs], sized at admission
  bool stop_hit = false;
  Clock::time_point arrival, first_scheduled, first_token, last_token;
  bool was_scheduled = false;
  bool done = false;  // finished: on_finish was called
  // n > 1: the other choices (request ids), which fork from this one at its first logits.
  std::vector<uint64_t> choices;
  std::unique_ptr<BeamState> beams;  // a beam search only
  // Speculative decoding: the most draft tokens per step (0: none), and the decayed counts of
  // accepted and rejected drafts that set how many to propose (with a draft model; n-gram
  // drafts count per kind of proposal).
  int32_t spec_max = 0;
  double spec_accepted = 0, spec_rejected = 0;
  int32_t shadow_draft = -1;  // a proposal not verified, compared with the next token instead
  // N-gram drafts: this step's proposal (verified, or compared as shadow_draft), where the
  // text copies from next (-1: no idea), and decayed [accepted, rejected] counts per kind.
  NgramProposal proposal;
  int64_t copy_from = -1;
  std::array<std::array<double, 2>, kNgramKinds> ngram_counts{};
  std::unique_ptr<DraftModel::State> draft_state;  // --spec draft: its tokens in the draft cache
  std::vector<int32_t> draft_out;                  // [kMaxPositions] the draft model's proposal
  std::unique_ptr<structured::GrammarMatcher> grammar;  // constrained decoding only
  // This step's first logits row already has the grammar's mask (finish_grammar_masks).
  bool mask_applied = false;
  // An embedding request: its answer, sized at admission ([1, n_embd] pooled, [prompt, n_embd]
  // per token), and the first position not folded in yet (a preempted prompt is computed again:
  // its positions before this one are skipped, so a mean never counts one twice).
  std::vector<float> embedding;
  int64_t embed_next = 0;
};

// A beam search's beams. Beam slot 0 is the request's own sequence; each slot's sequence is
// reused when its beam is dropped, so nothing is allocated after admission.
struct Engine::BeamState {
  BeamState(const Request& request, Sequence& first)
      : search(request.beam_width, request.beam_results, request.length_penalty,
               request.max_tokens),
        others(static_cast<size_t>(request.beam_width - 1)) {
    const auto width = static_cast<size_t>(request.beam_width);
    seqs.push_back(&first);
    for (Sequence& s : others) seqs.push_back(&s);
    cum.assign(width, 0.0);
    live.assign(width, 0);
    reported.assign(width, 0);
    children.assign(width, 0);
    top.resize(width * static_cast<size_t>(search.candidates_per_beam()));
    live_cum.reserve(width);
    live_length.reserve(width);
    live[0] = 1;
    first.slots = request.beam_width;  // one running slot per beam, held by the first until forks
  }
  int32_t width() const { return search.width(); }
  int32_t slot_of(const Sequence& seq) const {
    for (size_t i = 0; i < seqs.size(); ++i)
      if (seqs[i] == &seq) return static_cast<int32_t>(i);
    fail("beam search: sequence {} is not one of its beams", seq.id);
  }

  BeamSearch search;
  std::vector<Sequence> others;             // [width - 1]
  std::vector<Sequence*> seqs;              // [width] slot -> its sequence
  std::vector<double> cum;                  // [width] cumulative log-probability of each beam
  std::vector<uint8_t> live, reported;      // [width]
  std::vector<int32_t> children;            // [width] scratch: next beams per parent
  std::vector<sampling::TokenLogprob> top;  // [width, 2 * width] each beam's candidates
  std::vector<double> live_cum;             // [width] scratch
  std::vector<int64_t> live_length;         // [width] scratch
};

namespace {

constexpr int64_t kDefaultContextCap = 4096;
constexpr int32_t kMaxTopLogprobs = 20;

int64_t resolve_context(const EngineConfig& config, int64_t model_context) {
  if (config.context < 0) fail("context size {} must not be negative", config.context);
  if (config.context == 0) return std::min(model_context, kDefaultContextCap);
  return config.context;
}

// The memory the kernel could give this process now without swapping (MemAvailable), or -1.
int64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

// A hybrid model's recurrent state slots: one a sequence, and with speculative decoding a
// second, the state before a verification, restored when a draft is rejected.
int32_t state_slots(const EngineConfig& c) { return c.max_seqs * (c.spec.enabled() ? 2 : 1); }

// How many snapshots of `state_bytes` each the config asks for (EngineConfig::state_snapshots,
// state_cache_bytes). A multi-turn chat resumes each conversation from the snapshot its last
// turn left, so the pool must hold about two per conversation in flight (its prompt's and its
// answer's ends), not two per running sequence: 8 conversations on 4 sequences found 6% of
// their prefixes with 2 x max_seqs slots.
int32_t resolve_state_snapshots(const EngineConfig& c, int64_t state_bytes) {
  if (c.state_snapshots > 0) return c.state_snapshots;
  const int64_t floor = 2 * int64_t{c.max_seqs};
  int64_t budget = c.state_cache_bytes;
  int64_t cap = std::numeric_limits<int32_t>::max();
  if (budget < 0) {
    constexpr int64_t kDefaultBudget = int64_t{2} << 30;
    const int64_t available = available_memory_bytes();
    budget = available < 0 ? kDefaultBudget : std::min(kDefaultBudget, available / 8);
    cap = 64 * int64_t{c.max_seqs};
  }
  const int64_t fit = budget / std::max<int64_t>(state_bytes, 1);
  return static_cast<int32_t>(std::clamp(fit, floor, std::max(floor, cap)));
}

}  // namespace

// The default KV pool (max_seqs sequences of the whole context) of a large model can exceed the
// machine's memory: 16 sequences of 4096 tokens of the 30B-A3B shape are 6.4 GB on top of its
// 18 GB of weights, and the pool is faulted in at start-up, so the kernel killed the server.
// A pool that would leave less than kKvHeadroom of the available memory is cut to what fits
// (at least one whole sequence; sequences beyond it wait or are preempted, as with any full
// pool), and kv_blocks_capped() says so. An explicit kv_blocks is taken as it is.
int32_t Engine::fit_kv_blocks(int32_t wanted, int64_t blocks_per_seq) {
  constexpr int64_t kKvHeadroom = int64_t{1} << 30;
  // On a device the blocks take device memory: what the executor leaves for them (model.h).
  const int64_t device = model_->device_memory_for_kv();
  int64_t available = device >= 0 ? device + kKvHeadroom : available_memory_bytes();
  if (available < 0) return wanted;
  // A hybrid model's state and snapshot slots come out of the same memory.
  available -= model_->config().recurrent_state_floats * int64_t{sizeof(float)} *
               (state_slots(config_) + config_.state_snapshots);
  kv::KvCacheConfig one = model_->kv_config(1, config_.block_size, config_.kv_key_type,
                                            config_.kv_value_type);
  one.num_sliding_blocks = one.sliding_layers.empty() ? 0 : 1;
  one.state_floats = 0;  // counted above
  one.num_state_slots = 0;
  const int64_t block_bytes = kv::KvCache(one).bytes();  // a block of every group
  const int64_t fit = std::max<int64_t>((available - kKvHeadroom) / std::max<int64_t>(block_bytes, 1),
                                        blocks_per_seq);
  if (fit >= wanted) return wanted;
  kv_blocks_capped_ = true;
  return static_cast<int32_t>(fit);
}

Engine::Engine(const gguf::GgufFile& file, const EngineConfig& config)
    : config_(config), target_file_bytes_(file.file_size()) {
  tokenizer_ = tokenizer::Tokenizer::from_gguf(file);
  model::ModelOptions options;
  options.max_batch_tokens = config.max_batched_tokens;
  config_.context = resolve_context(config, model::ModelConfig::from_gguf(file).context_length);
  options.max_context = config_.context;
  options.device = config.device;
  options.mtp = config.spec.enabled() && config.spec.method == SpecMethod::kMtp;
  const dist::ParallelWorld world =
      dist::parallel_world(config.tensor_parallel, config.pipeline_parallel, "run|chat|serve");
  options.tp = world.tensor;
  options.pp = world.pipeline;
  dist::check_expert_parallel(config.expert_parallel, world);
  options.expert_parallel = config.expert_parallel;
  if (options.mtp && config.device != model::Device::kCpu)
    fail("--spec mtp runs on the CPU executor only");
  if (config.spec.enabled() && config.spec.method == SpecMethod::kEagle3 &&
      config.device != model::Device::kCpu)
    fail("--spec eagle3 runs on the CPU executor only");
  if (config.spec.enabled() && config.spec.method == SpecMethod::kEagle3 &&
      world.ranks() > 1)
    fail("--spec eagle3 with --tensor-parallel or --pipeline-parallel is not implemented (the "
         "ranks hand out no hidden states)");
  model_ = model::load_model(file, options);
  config_.state_snapshots =
      model_->has_recurrent_state() && config_.prefix_caching
          ? resolve_state_snapshots(config_, model_->config().recurrent_state_floats *
                                                 int64_t{sizeof(float)})
          : 0;
  const int64_t blocks_per_seq = (config_.context + config.block_size - 1) / config.block_size;
  if (config_.kv_blocks == 0) {
    config_.kv_blocks = static_cast<int32_t>(blocks_per_seq * config.max_seqs);
    config_.kv_blocks = fit_kv_blocks(config_.kv_blocks, blocks_per_seq);
  }
  if (config_.kv_blocks < blocks_per_seq) {
    fail("KV cache of {} blocks cannot hold one sequence of {} tokens ({} blocks of {})",
         config_.kv_blocks, config_.context, blocks_per_seq, config.block_size);
  }
  kv::KvCacheConfig kv = model_->kv_config(config_.kv_blocks, config.block_size, config.kv_key_type,
                                           config.kv_value_type, state_slots(config));
  // --swa-full: every layer keeps all its keys. Sliding layers of their own shape (Gemma 4)
  // keep their group, which then frees nothing; the others join the full group.
  if (config.swa_full && (kv.sliding_head_dim > 0 || kv.sliding_n_kv_heads > 0)) {
    kv.sliding_keeps_all = true;
  } else if (config.swa_full) {
    kv.sliding_layers.clear();
  }
  if (!kv.sliding_layers.empty() && !kv.sliding_keeps_all) {
    // A running sequence holds at most the blocks of its window plus one step's tokens (the
    // scheduler frees the rest before each step), so this many never run short.
    const int64_t per_seq =
        (config.max_batched_tokens + kv.sliding_window - 1 + config.block_size - 1) /
            config.block_size +
        1;
    kv.num_sliding_blocks =
        static_cast<int32_t>(std::min<int64_t>(config_.kv_blocks, per_seq * config.max_seqs));
  }
  // A hybrid model's state after a prefix is not in its KV blocks: a prefix is resumed from a
  // snapshot of the state at a block end (kv/kv_cache.h), kept in the snapshot slots counted
  // above. (Not with sliding-window layers, whose cut prefixes would need blocks the match did
  // not take; no such model exists.)
  if (model_->has_recurrent_state() && config_.prefix_caching) {
    if (!kv.sliding_layers.empty()) {
      config_.prefix_caching = false;
      config_.state_snapshots = 0;
    } else {
      kv.num_snapshot_slots = config_.state_snapshots;
    }
  }
  cache_ = std::make_unique<kv::KvCache>(kv);
  model_->attach_cache(kv, config.threads);  // the other ranks' caches, alike
  if (config_.prefix_caching) {
    prefix_cache_ =
        std::make_unique<kv::PrefixCache>(cache_->groups(), config.block_size, blocks_per_seq + 1);
  }
  pool_ = std::make_unique<ThreadPool>(config.threads, config.pin_threads);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{config.max_batched_tokens, config.max_seqs, config.block_size},
      cache_->groups(), prefix_cache_.get());
  config.spec.validate();
  runner_ = std::make_unique<ModelRunner>(*model_, *cache_, *pool_, config.max_batched_tokens,
                                          config.max_seqs,
                                          config.spec.enabled() ? config.spec.num_tokens : 0);
  drafts_.resize(SpecDecodeStats::kMaxPositions);
  if (config.spec.enabled() && config.spec.method == SpecMethod::kDraftModel) {
    draft_ = std::make_unique<DraftModel>(config.spec.draft_model, tokenizer_->vocab(),
                                          config_.context, config.max_seqs, config.block_size,
                                          config.max_batched_tokens, *pool_);
    draft_jobs_.reserve(static_cast<size_t>(config.max_seqs));
    draft_owners_.reserve(static_cast<size_t>(config.max_seqs));
  }
  if (model_->config().mtp) {
    runner_->enable_mtp_catch_up();
    mtp_ = std::make_unique<MtpDrafter>(*model_, *cache_, *pool_, config.max_seqs);
    mtp_jobs_.reserve(static_cast<size_t>(config.max_seqs));
  }
  if (config.spec.enabled() && config.spec.method == SpecMethod::kEagle3) load_eagle3_head();
  scheduled_.reserve(static_cast<size_t>(config.max_seqs));
  grammar_fills_.reserve(static_cast<size_t>(config.max_seqs));
  grammar_fill_rows_.reserve(static_cast<size_t>(config.max_seqs));
  const bool spare_cpu = static_cast<int>(allowed_cpus().size()) > config.threads;
  if (config.grammar_thread == GrammarThread::kOn ||
      (config.grammar_thread == GrammarThread::kAuto && spare_cpu)) {
    mask_prefetcher_ = std::make_unique<MaskPrefetcher>(static_cast<size_t>(config.max_seqs));
  }
  finished_ids_.reserve(static_cast<size_t>(config.max_seqs));
  beam_steps_.reserve(static_cast<size_t>(config.max_seqs));
  fork_logits_.resize(static_cast<size_t>(model_->config().n_vocab));
  scheduler_->set_block_copier([model = model_.get(), cache = cache_.get()](
                                   size_t group, int32_t from, int32_t to) {
    model->copy_kv_block(*cache, group, from, to);
  });
  if (kv::BlockPool* snapshots = cache_->snapshot_pool()) {
    scheduler_->set_snapshots(
        snapshots,
        [model = model_.get(), cache = cache_.get()](int32_t state, int32_t snapshot) {
          model->save_state_snapshot(*cache, state, snapshot);
        },
        [model = model_.get(), cache = cache_.get()](int32_t snapshot, int32_t state) {
          model->load_state_snapshot(*cache, snapshot, state);
        });
  }
  if (cache_->has_state()) {
    scheduler_->set_state_pool(
        cache_->state_pool(),
        [model = model_.get(), cache = cache_.get()](int32_t from, int32_t to) {
          model->copy_state(*cache, from, to);
        },
        config.spec.enabled());
  }
}

void Engine::check_beam_request(const Request& request) const {
  const int32_t width = request.beam_width;
  if (width > config_.max_seqs) {
    fail(
        "beam search with {} beams needs as many running sequences; this engine runs {} "
        "(max_seqs)",
        width, config_.max_seqs);
  }
  if (request.beam_results < 1 || request.beam_results > width) {
    fail("beam search returns 1 to {} beams (its width), asked for {}", width,
         request.beam_results);
  }
  if (request.logprobs >= 0) fail("logprobs are not supported with beam search");
  if (!std::isfinite(request.length_penalty)) fail("length_penalty must be a finite number");
  // The beams share the prompt's blocks; each holds its own generated ones (+1 partly filled).
  const int64_t bs = config_.block_size;
  const auto prompt = static_cast<int64_t>(request.prompt.size());
  const int64_t need = (prompt + bs - 1) / bs + width * ((request.max_tokens + bs - 1) / bs + 1);
  if (need > config_.kv_blocks) {
    fail(
        "beam search with {} beams over {} + {} tokens needs up to {} KV blocks; the cache has "
        "{}",
        width, prompt, request.max_tokens, need, config_.kv_blocks);
  }
}

Engine::~Engine() = default;

uint64_t Engine::add_request(Request request) {
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0) fail("the prompt is empty");
  if (request.embed) {
    // Nothing is generated: the prompt alone must fit, and nothing of the output path applies.
    if (prompt > config_.context)
      fail("input of {} tokens is too large for the context of {}", prompt, config_.context);
    if (request.beam_width > 0 || request.grammar || request.logprobs >= 0 ||
        !request.more_outputs.empty())
      fail("an embedding request has no beams, grammar, logprobs or further choices");
    request.max_tokens = 1;  // the sizes made at admission stay within the context
  }
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got {}", request.max_tokens);
  if (!request.embed && prompt + request.max_tokens > config_.context) {
    fail("prompt of {} tokens plus max_tokens {} is {} tokens, more than the context of {}", prompt,
         request.max_tokens, prompt + request.max_tokens, config_.context);
  }
  const int32_t n_vocab = model_->config().n_vocab;
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= n_vocab)
      fail("prompt token id {} is outside the vocabulary of {}", id, n_vocab);
  }
  request.sampling.validate();
  if (request.beam_width > 0) check_beam_request(request);
  if (request.logprobs > kMaxTopLogprobs) {
    fail("logprobs must be at most {}, got {}", kMaxTopLogprobs, request.logprobs);
  }
  if (!request.output) fail("request has no output channel");
  if (request.grammar && request.beam_width > 0)
    fail("structured output (a grammar or JSON schema) and beam search do not mix");
  if (request.spec_tokens < -1 || request.spec_tokens > config_.spec.num_tokens) {
    fail("speculative tokens per step must be -1 (the server's), 0 (off) or up to {}, got {}",
         config_.spec.num_tokens, request.spec_tokens);
  }

  if (!request.more_outputs.empty()) {
    if (request.beam_width > 0) fail("n > 1 choices and beam search do not mix: use beam_results");
    for (const auto& output : request.more_outputs)
      if (!output) fail("request has no output channel for one of its choices");
  }
  std::vector<std::shared_ptr<OutputChannel>> more = std::move(request.more_outputs);
  request.more_outputs.clear();
  std::unique_ptr<Active> active = make_active(request);
  Sequence& seq = active->seq;
  const uint64_t id = seq.id;
  // The choices fork from the first when they can all run together; otherwise (more choices
  // than running sequences) each is queued on its own and finds the prompt in the prefix cache.
  const bool fork = static_cast<int64_t>(more.size()) + 1 <= config_.max_seqs;
  if (fork) seq.slots = std::max<int32_t>(seq.slots, static_cast<int32_t>(more.size()) + 1);
  scheduler_->add(&seq);
  for (size_t i = 0; i < more.size(); ++i) {
    Request choice = request;
    choice.output = std::move(more[i]);
    if (choice.sampling.seed != sampling::SamplingParams::kRandomSeed)
      choice.sampling.seed += i + 1;
    std::unique_ptr<Active> other = make_active(std::move(choice));
    if (fork) {
      other->seq.status = SequenceStatus::kFinished;  // not scheduled until it forks
      active->choices.push_back(other->seq.id);
    } else {
      scheduler_->add(&other->seq);
    }
    active_.emplace(other->seq.id, std::move(other));
  }
  active_.emplace(id, std::move(active));
  return id;
}

std::unique_ptr<Engine::Active> Engine::make_active(Request request) {
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  const int32_t n_vocab = model_->config().n_vocab;
  auto active = std::make_unique<Active>();
  active->arrival = Clock::now();
  Sequence& seq = active->seq;
  seq.id = next_id_++;
  seq.request_id = seq.id;
  seq.num_prompt_tokens = prompt;
  seq.tokens.reserve(static_cast<size_t>(prompt + request.max_tokens));
  seq.tokens = request.prompt;
  if (mtp_) seq.mtp_hidden.assign(static_cast<size_t>(mtp_->hidden_width()), 0.0f);
  const auto max_blocks =
      static_cast<size_t>((prompt + request.max_tokens) / config_.block_size + 1);
  for (std::vector<int32_t>& table : seq.block_tables) table.reserve(max_blocks);
  seq.prefix.hashes.reserve(max_blocks);
  seq.prefix.root = kv::PrefixCache::root_key(request.cache_salt);
  active->sampler =
      std::make_unique<sampling::Sampler>(request.sampling, n_vocab, request.logprobs >= 0);
  active->detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_);
  active->top.resize(static_cast<size_t>(std::max(0, request.logprobs)));
  if (request.grammar)
    active->grammar = std::make_unique<structured::GrammarMatcher>(request.grammar);
  active->stop = std::make_unique<StopMatcher>(request.stop, tokenizer_->max_piece_bytes() * 3 + 4);
  if (request.embed) {
    const auto n_embd = static_cast<size_t>(model_->config().n_embd);
    const size_t rows = *request.embed == Pooling::kNone ? static_cast<size_t>(prompt) : 1;
    active->embedding.assign(rows * n_embd, 0.0f);
  }
  if (config_.spec.enabled() && request.beam_width == 0 && !request.embed)
    active->spec_max = request.spec_tokens < 0 ? config_.spec.num_tokens : request.spec_tokens;
  if (draft_ && active->spec_max > 0) {
    active->draft_state = std::make_unique<DraftModel::State>();
    draft_->reserve(*active->draft_state, prompt + request.max_tokens + 1);
  }
  if ((draft_ || mtp_) && active->spec_max > 0)
    active->draft_out.resize(SpecDecodeStats::kMaxPositions);
  if (request.beam_width > 0) {
    active->beams = std::make_unique<BeamState>(request, seq);
    for (Sequence& other : active->beams->others) {
      other.id = next_id_++;
      other.request_id = seq.id;
      other.status = SequenceStatus::kFinished;  // not in the scheduler until forked into
      other.tokens.reserve(seq.tokens.capacity());
      for (std::vector<int32_t>& table : other.block_tables) table.reserve(max_blocks);
      other.prefix.hashes.reserve(max_blocks);
    }
  }
  seq.request = std::move(request);
  return active;
}

void Engine::step() {
  reap_cancelled();
  scheduler_->schedule(scheduled_);
  if (scheduled_.empty()) return;
  peak_kv_bytes_ = std::max(peak_kv_bytes_, cache_->used_bytes());
  const auto now = Clock::now();
  for (const ScheduledSequence& s : scheduled_) {
    Active& active = *active_.at(s.seq->request_id);
    if (!active.was_scheduled) {
      active.first_scheduled = now;
      // Before any of the prompt is computed: what the prefix cache held.
      if (s.seq->request.report_progress) report_prompt_progress(active, *s.seq, now);
    }
    active.was_scheduled = true;
  }
  const auto started = Clock::now();
  checkpoint_recurrent_states();
  // The MTP block's K/V are computed where a draft may follow; under a load at which nobody
  // drafts they are left out (they cost 4% of a step at 16 sequences on a 9B model): a sequence
  // that drafts again later attends over a gap there, which may cost acceptance, never
  // correctness.
  if (mtp_) runner_->set_mtp_catch_up(anyone_may_draft());
  start_grammar_masks();
  try {
    runner_->run(scheduled_);
  } catch (...) {
    if (mask_prefetcher_) mask_prefetcher_->wait();  // it holds matchers of this step
    throw;
  }
  finish_grammar_masks();
  if (config_.spec.enabled())
    record_step_time(std::chrono::duration<double>(Clock::now() - started).count());
  if (draft_) catch_up_draft_on_prompts();
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    Sequence& seq = *scheduled_[i].seq;
    const int64_t first_position = seq.num_computed;
    seq.num_computed += scheduled_[i].num_new_tokens;
    computed_tokens_ += scheduled_[i].num_new_tokens;
    // (With drafts, once verify_drafts has settled num_computed: a hybrid model's rollback keeps
    // the hidden state of the position before the step.)
    if (mtp_ && seq.num_draft == 0) remember_mtp_hidden(seq, i);
    if (seq.request.report_progress && first_position < seq.num_prompt_tokens)
      report_prompt_progress(*active_.at(seq.request_id), seq, Clock::now());
    // Draft tokens are not indexed: a rejected one's K/V is overwritten later. Accepted ones
    // are indexed with the next step.
    if (prefix_cache_) {
      prefix_cache_->index_computed(seq.tokens,
                                    std::min(seq.num_computed, seq.num_tokens() - seq.num_draft),
                                    seq.prefix, seq.block_tables);
    }
    if (seq.request.embed) {
      take_hidden_states(*active_.at(seq.request_id), i, first_position);
      continue;
    }
    if (!runner_->wants_logits(i)) continue;
    Active& active = *active_.at(seq.request_id);
    if (active.beams) {
      observe_beam(active, seq, runner_->logits_for(i));
    } else if (seq.num_draft > 0) {
      verify_drafts(active, i, first_position);
      if (mtp_) remember_mtp_hidden(seq, i);  // num_computed moved back over rejected drafts
    } else {
      if (!active.choices.empty()) fork_choices(active, runner_->logits_for(i));
      const int32_t token = process_output(active, runner_->logits_for(i));
      if (active.shadow_draft >= 0) {
        const bool right = token == active.shadow_draft;
        update_acceptance(active, 1, right ? 1 : 0, /*shadow=*/true);
      } else if (active.copy_from >= 0) {
        ++active.copy_from;  // no proposal: keep pace with the text
      }
      active.shadow_draft = -1;
      active.proposal = {};  // (drafts a preemption dropped were never verified)
    }
  }
  // Hybrid prefix caching: each sequence's state at a block end, now that its drafts are
  // settled (Scheduler::snapshot_after_step).
  if (cache_->snapshot_pool() != nullptr)
    for (const ScheduledSequence& s : scheduled_) scheduler_->snapshot_after_step(*s.seq);
  for (Active* active : beam_steps_) advance_beams(*active);
  beam_steps_.clear();
  // The step's output is all reported: wake each reader once, before the drafts of the next
  // step are proposed (a draft model's forward takes a while).
  for (const auto& [id, active] : active_) {
    if (!active->done) active->seq.request.output->on_step_end();
  }
  // Drafts for the next step, within the rows a step may take before drafting stops paying.
  if (config_.spec.enabled()) {
    const int64_t rows = config_.spec.max_step_rows;
    const auto running = static_cast<int64_t>(scheduler_->num_running());
    int64_t budget = rows > 0 ? rows - running : std::numeric_limits<int64_t>::max();
    int64_t drafted = 0;
    for (size_t i = 0; i < scheduled_.size() && budget > 0; ++i) {
      Active& active = *active_.at(scheduled_[i].seq->request_id);
      if (active.done || active.spec_max == 0) continue;
      const int64_t n = propose_drafts(active, budget, running - 1 + drafted, i);
      budget -= n;
      drafted += n;
    }
    if (!draft_jobs_.empty()) {  // the draft model proposes for all of them in one batch
      draft_->propose(draft_jobs_);
      for (size_t j = 0; j < draft_jobs_.size(); ++j) {
        Sequence& seq = draft_owners_[j]->seq;
        const DraftModel::Job& job = draft_jobs_[j];
        seq.tokens.insert(seq.tokens.end(), job.out.begin(), job.out.begin() + job.proposed);
        seq.num_draft = job.proposed;
      }
      draft_jobs_.clear();
      draft_owners_.clear();
    }
    if (!mtp_jobs_.empty()) {  // likewise the MTP block
      mtp_->propose(mtp_jobs_);
      for (const MtpDrafter::Job& job : mtp_jobs_) {
        job.seq->tokens.insert(job.seq->tokens.end(), job.out.begin(),
                               job.out.begin() + job.proposed);
        job.seq->num_draft = job.proposed;
      }
      mtp_jobs_.clear();
    }
  }
  for (uint64_t id : finished_ids_) active_.erase(id);
  finished_ids_.clear();
}

void Engine::report_prompt_progress(const Active& active, const Sequence& seq,
                                    Clock::time_point now) {
  PromptProgress p;
  p.total = seq.num_prompt_tokens;
  p.cached = std::max<int64_t>(0, seq.num_cached_tokens);
  p.processed = std::max(p.cached, std::min(seq.num_computed, seq.num_prompt_tokens));
  p.elapsed_s = std::chrono::duration<double>(now - active.first_scheduled).count();
  seq.request.output->on_prompt_progress(p);
}

void Engine::run_until_idle() {
  while (!idle()) step();
}

void Engine::start_grammar_masks() {
  grammar_fills_.clear();
  grammar_fill_rows_.clear();
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    const ScheduledSequence& s = scheduled_[i];
    const Sequence& seq = *s.seq;
    // The sequence samples this step when the step reaches its last real token (as
    // ModelRunner decides which rows get logits); with drafts, the first row's mask is the one
    // known before any of them is verified.
    if (seq.num_computed + s.num_new_tokens < seq.num_tokens() - seq.num_draft) continue;
    Active& active = *active_.at(seq.request_id);
    if (active.grammar && !active.done) {
      grammar_fills_.push_back(active.grammar.get());
      grammar_fill_rows_.push_back({&active, i});
    }
  }
  if (mask_prefetcher_ && !grammar_fills_.empty()) mask_prefetcher_->start(grammar_fills_);
}

void Engine::finish_grammar_masks() {
  if (grammar_fills_.empty()) return;
  if (mask_prefetcher_) mask_prefetcher_->wait();
  // Each mask is applied to its sequence's first logits row here, on every thread: with a
  // large vocabulary that is a pass over a row the cache no longer holds (a megabyte for 262K
  // tokens), too slow to make one after another in the sampling loop. Matchers and rows are
  // independent, one per thread at a time. A fill that fails leaves its row alone: the sampling
  // step's own mask() then fills again and reports the error.
  pool_->for_each_dynamic(static_cast<int64_t>(grammar_fills_.size()), [&](int64_t i) {
    structured::GrammarMatcher& matcher = *grammar_fills_[static_cast<size_t>(i)];
    const GrammarFillRow& fill = grammar_fill_rows_[static_cast<size_t>(i)];
    if (!runner_->wants_logits(fill.scheduled_index) || !matcher.try_fill()) return;
    matcher.mask(runner_->logits_for(fill.scheduled_index));  // filled: writes the row only
    fill.active->mask_applied = true;
  });
  grammar_fills_.clear();
  grammar_fill_rows_.clear();
}

void Engine::take_hidden_states(Active& active, size_t scheduled_index, int64_t first_position) {
  Sequence& seq = active.seq;
  const auto n_embd = static_cast<size_t>(model_->config().n_embd);
  const std::span<const float> rows = runner_->hidden_for(scheduled_index);  // [n, n_embd]
  const Pooling pooling = *seq.request.embed;
  const int64_t last = seq.num_prompt_tokens - 1;
  for (size_t r = 0; r < rows.size() / n_embd; ++r) {
    const int64_t pos = first_position + static_cast<int64_t>(r);
    if (pos < active.embed_next) continue;  // folded in before a preemption
    active.embed_next = pos + 1;
    const std::span<const float> row = rows.subspan(r * n_embd, n_embd);
    switch (pooling) {
      case Pooling::kNone:
        std::copy(row.begin(), row.end(),
                  active.embedding.data() + static_cast<size_t>(pos) * n_embd);
        break;
      case Pooling::kMean:
        for (size_t j = 0; j < n_embd; ++j) active.embedding[j] += row[j];
        break;
      case Pooling::kCls:
        if (pos == 0) std::copy(row.begin(), row.end(), active.embedding.begin());
        break;
      case Pooling::kLast:
        if (pos == last) std::copy(row.begin(), row.end(), active.embedding.begin());
        break;
    }
  }
  if (seq.num_computed < seq.num_prompt_tokens) return;
  if (pooling == Pooling::kMean) {
    const float scale = 1.0f / static_cast<float>(seq.num_prompt_tokens);
    for (float& v : active.embedding) v *= scale;
  }
  finish(active, FinishReason::kStop);
}

int32_t Engine::process_output(Active& active, std::span<float> logits) {
  Sequence& seq = active.seq;
  const auto prompt =
      std::span<const int32_t>(seq.tokens).first(static_cast<size_t>(seq.num_prompt_tokens));
  const auto output =
      std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.num_prompt_tokens));
  if (active.grammar) {
    if (!active.mask_applied) active.grammar->mask(logits);
    active.mask_applied = false;  // later rows (drafts) are this step's own
    grammar_stats_.record(active.grammar->fill_seconds());
    grammar_apply_stats_.record(active.grammar->apply_seconds());
  }
  const int32_t token = active.sampler->sample(logits, prompt, output);
  ++generated_tokens_;
  const auto now = Clock::now();
  if (seq.num_generated() == 0) active.first_token = now;
  active.last_token = now;
  // The end-of-generation token is reported with its logprob too (OpenAI and vLLM do); it
  // joins the output only with ignore_eos, below.
  if (seq.request.logprobs >= 0) {
    float logprob = active.sampler->last_logprob();
    const size_t n = seq.request.post_sampling_probs
                         ? active.sampler->post_sampling_top(logits, token, active.top, logprob)
                         : active.sampler->top_logprobs(logits, active.top);
    seq.request.output->on_token(token, logprob,
                                 std::span<const sampling::TokenLogprob>(active.top).first(n));
  }
  // The grammar advances over the token with the next mask (off this thread where it can).
  if (active.grammar && !active.grammar->take(token)) {
    finish(active, FinishReason::kError,
           fmt::format("internal error: the sampler chose token {}, which the grammar forbids",
                       token));
    return token;
  }
  // A complete grammar ends the output on an end-of-generation token even with ignore_eos:
  // nothing else may follow it.
  const bool eog = tokenizer_->vocab().is_eog(token);
  if (eog && (!seq.request.ignore_eos || (active.grammar && active.grammar->terminated()))) {
    finish(active, FinishReason::kStop);
    return token;
  }
  seq.tokens.push_back(token);
  if (emit_token(active, token)) {
    finish(active, FinishReason::kStop);
  } else if (seq.num_generated() >= seq.request.max_tokens || seq.num_tokens() >= config_.context) {
    finish(active, FinishReason::kLength);
  }
  return token;
}

bool Engine::emit_token(Active& active, int32_t token) {
  const std::string_view text = active.detokenizer->push(token);
  if (text.empty()) return false;
  StopMatcher::Result r = active.stop->push(text);
  if (!r.emit.empty()) active.seq.request.output->on_text(r.emit);
  active.stop_hit = r.stopped;
  if (r.stopped) active.stop_word = r.word;
  return r.stopped;
}

void Engine::finish(Active& active, FinishReason reason, std::string error) {
  Sequence& seq = active.seq;
  active.done = true;
  seq.drop_drafts();  // cancelled between a proposal and its verification
  if (active.draft_state) draft_->release(*active.draft_state);
  // Choices still waiting to fork from this one (it was cancelled or failed before its prompt
  // was computed) compute their prompt themselves, from the prefix cache where it has it.
  for (const uint64_t id : active.choices) {
    const auto it = active_.find(id);
    if (it == active_.end() || it->second->done) continue;
    it->second->seq.slots = 1;
    scheduler_->add(&it->second->seq);
  }
  active.choices.clear();
  const bool complete = reason != FinishReason::kCancelled && reason != FinishReason::kError;
  RequestResult result;
  if (active.beams) {
    BeamState& b = *active.beams;
    if (complete) {
      for (const BeamSearch::Hypothesis& h : b.search.results()) {
        BeamResult& r = result.beams.emplace_back();
        r.tokens = h.tokens;
        r.text = tokenizer_->decode(h.tokens, true);
        for (const std::string& stop : seq.request.stop) {
          if (const size_t at = r.text.find(stop); at != std::string::npos) r.text.resize(at);
        }
        r.cum_logprob = h.cum_logprob;
        r.score = h.score;
        r.finish_reason = h.reason;
      }
      if (!result.beams.empty()) reason = result.beams.front().finish_reason;
    }
    for (int32_t slot = 0; slot < b.width(); ++slot) {
      if (b.live[static_cast<size_t>(slot)]) scheduler_->remove(b.seqs[static_cast<size_t>(slot)]);
      b.live[static_cast<size_t>(slot)] = 0;
    }
  } else if (!active.stop_hit && complete) {
    // Flush what the detokenizer and the stop matcher held back.
    StopMatcher::Result r = active.stop->push(active.detokenizer->flush());
    std::string tail(r.emit);
    if (!r.stopped) tail += active.stop->finish();
    if (!tail.empty()) seq.request.output->on_text(tail);
  }
  if (seq.request.embed && complete) result.embedding = std::move(active.embedding);
  result.finish_reason = reason;
  result.error = std::move(error);
  result.stop_word = active.stop_word;
  if (active.beams) {
    if (!result.beams.empty()) result.output_tokens = result.beams.front().tokens;
  } else {
    result.output_tokens.assign(seq.tokens.begin() + seq.num_prompt_tokens, seq.tokens.end());
  }
  RequestStats& s = result.stats;
  const auto now = Clock::now();
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  s.prompt_tokens = seq.num_prompt_tokens;
  s.cached_tokens = std::max<int64_t>(0, seq.num_cached_tokens);
  s.completion_tokens = static_cast<int64_t>(result.output_tokens.size());
  s.e2e_s = seconds(now - active.arrival);
  if (active.was_scheduled) {
    s.queue_s = seconds(active.first_scheduled - active.arrival);
    if (active.first_token != Clock::time_point{}) {
      s.ttft_s = seconds(active.first_token - active.arrival);
      s.prefill_s = seconds(active.first_token - active.first_scheduled);
      s.decode_s = seconds(active.last_token - active.first_token);
    }
  }
  if (!active.beams) scheduler_->remove(&seq);
  seq.request.output->on_finish(result);
  finished_ids_.push_back(seq.request_id);
}

void Engine::reap_cancelled() {
  for (auto& [id, active] : active_) {
    if (!active->done && active->seq.request.output->cancelled()) {
      finish(*active, FinishReason::kCancelled);
    }
  }
  for (uint64_t id : finished_ids_) active_.erase(id);
  finished_ids_.clear();
}

}  // namespace inferd::engine

namespace inferd::engine {

void Engine::fork_choices(Active& parent, std::span<const float> logits) {
  // Before the parent samples: each choice copies its prompt and shares its blocks, then
  // samples its own first token from the same logits (a copy: samplers work in place).
  for (const uint64_t id : parent.choices) {
    const auto it = active_.find(id);
    if (it == active_.end() || it->second->done) continue;
    Active& choice = *it->second;
    choice.first_scheduled = parent.first_scheduled;
    choice.was_scheduled = true;
    if (!scheduler_->fork(parent.seq, choice.seq)) {  // it waits and computes its own
      choice.seq.num_cached_tokens = -1;              // counted at its admission
      continue;
    }
    choice.seq.num_cached_tokens = choice.seq.num_prompt_tokens;  // it computed none of them
    if (prefix_cache_)
      prefix_cache_->count(choice.seq.num_prompt_tokens, choice.seq.num_prompt_tokens);
    std::copy(logits.begin(), logits.end(), fork_logits_.begin());
    process_output(choice, fork_logits_);
  }
  parent.choices.clear();
}

void Engine::observe_beam(Active& active, const Sequence& seq, std::span<const float> logits) {
  BeamState& b = *active.beams;
  const int32_t slot = b.slot_of(seq);
  const auto per_beam = static_cast<size_t>(b.search.candidates_per_beam());
  top_logprobs(logits, std::span(b.top).subspan(static_cast<size_t>(slot) * per_beam, per_beam));
  b.reported[static_cast<size_t>(slot)] = 1;
  const auto now = Clock::now();
  if (active.first_token == Clock::time_point{}) active.first_token = now;
  active.last_token = now;
  if (std::find(beam_steps_.begin(), beam_steps_.end(), &active) == beam_steps_.end())
    beam_steps_.push_back(&active);
}

void Engine::drop_beam(BeamState& b, int32_t slot) {
  // Its running slots go to another live beam: the search keeps `width` of them in all.
  Sequence& seq = *b.seqs[static_cast<size_t>(slot)];
  b.live[static_cast<size_t>(slot)] = 0;
  for (int32_t other = 0; other < b.width(); ++other) {
    if (b.live[static_cast<size_t>(other)]) {
      b.seqs[static_cast<size_t>(other)]->slots += seq.slots;
      break;
    }
  }
  seq.slots = 0;
  scheduler_->remove(&seq);
}

void Engine::advance_beams(Active& active) {
  if (active.done) return;
  BeamState& b = *active.beams;
  const auto width = static_cast<size_t>(b.width());
  for (size_t s = 0; s < width; ++s) {
    if (b.live[s] && !b.reported[s]) return;  // wait for every live beam's logits
  }
  const Request& request = active.seq.request;
  const auto per_beam = static_cast<size_t>(b.search.candidates_per_beam());
  const auto generated = [&](size_t s) {
    const Sequence& seq = *b.seqs[s];
    return std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(seq.num_prompt_tokens));
  };
  b.search.clear_candidates();
  for (size_t s = 0; s < width; ++s) {
    if (!b.live[s]) continue;
    for (size_t j = 0; j < per_beam; ++j) {
      const sampling::TokenLogprob& c = b.top[s * per_beam + j];
      if (c.token < 0) continue;  // a vocabulary smaller than 2 * width
      const bool ends = !request.ignore_eos && tokenizer_->vocab().is_eog(c.token);
      b.search.add_candidate(static_cast<int32_t>(s), c.token, b.cum[s] + c.logprob, ends);
    }
    b.reported[s] = 0;
  }
  b.search.select();
  for (const BeamSearch::Choice& e : b.search.ended())
    b.search.offer(generated(static_cast<size_t>(e.parent)), e.cum_logprob, FinishReason::kStop);

  // Beams without a next beam are dropped; the others keep one running slot each and the
  // spare ones pool on the first live beam, from which forks take theirs.
  std::fill(b.children.begin(), b.children.end(), 0);
  for (const BeamSearch::Choice& c : b.search.next()) ++b.children[static_cast<size_t>(c.parent)];
  for (size_t s = 0; s < width; ++s) {
    if (b.live[s] && b.children[s] == 0) drop_beam(b, static_cast<int32_t>(s));
  }
  int32_t spare = 0;
  for (size_t s = 0; s < width; ++s) {
    if (!b.live[s]) continue;
    spare += b.seqs[s]->slots - 1;
    b.seqs[s]->slots = 1;
  }
  // Forks first (a child copies its parent before the parent takes its own next token), into
  // the slots of dropped or unused beams; then every parent's first child extends it in place.
  for (size_t s = 0; s < width; ++s) b.children[s] = 0;
  size_t free_slot = 0;
  for (const BeamSearch::Choice& c : b.search.next()) {
    const auto parent = static_cast<size_t>(c.parent);
    if (b.children[parent]++ == 0) continue;
    while (b.live[free_slot]) ++free_slot;  // forks <= width - live beams: always found
    Sequence& child = *b.seqs[free_slot];
    b.seqs[parent]->slots += 1;
    spare -= 1;
    scheduler_->fork(*b.seqs[parent], child);
    child.tokens.push_back(c.token);
    b.cum[free_slot] = c.cum_logprob;
    b.live[free_slot] = 2;  // forked this step: not extended again below
  }
  std::fill(b.children.begin(), b.children.end(), 0);
  for (const BeamSearch::Choice& c : b.search.next()) {
    const auto parent = static_cast<size_t>(c.parent);
    if (b.live[parent] != 1 || b.children[parent]++ > 0) continue;
    b.seqs[parent]->tokens.push_back(c.token);
    b.cum[parent] = c.cum_logprob;
  }
  int64_t length = 0;
  for (size_t s = 0; s < width; ++s) {
    if (!b.live[s]) continue;
    b.live[s] = 1;
    if (spare > 0) b.seqs[s]->slots += std::exchange(spare, 0);
    ++generated_tokens_;
    length = b.seqs[s]->num_generated();
  }
  // A beam whose text reaches a stop string is a finished hypothesis.
  if (!request.stop.empty()) {
    for (size_t s = 0; s < width; ++s) {
      if (!b.live[s]) continue;
      const std::string text = tokenizer_->decode(generated(s), true);
      for (const std::string& stop : request.stop) {
        if (text.find(stop) == std::string::npos) continue;
        b.search.offer(generated(s), b.cum[s], FinishReason::kStop);
        drop_beam(b, static_cast<int32_t>(s));
        break;
      }
    }
  }
  const bool at_limit =
      length >= request.max_tokens || active.seq.num_prompt_tokens + length >= config_.context;
  b.live_cum.clear();
  b.live_length.clear();
  for (size_t s = 0; s < width; ++s) {
    if (!b.live[s]) continue;
    if (at_limit) b.search.offer(generated(s), b.cum[s], FinishReason::kLength);
    b.live_cum.push_back(b.cum[s]);
    b.live_length.push_back(b.seqs[s]->num_generated());
  }
  if (at_limit || b.search.settled(b.live_cum, b.live_length)) finish(active, FinishReason::kStop);
}

}  // namespace inferd::engine

namespace inferd::engine {

void Engine::checkpoint_recurrent_states() {
  if (!cache_->has_state()) return;
  for (const ScheduledSequence& s : scheduled_) {
    if (s.seq->num_draft > 0 && s.seq->checkpoint_slot >= 0)
      model_->copy_state(*cache_, s.seq->state_slot, s.seq->checkpoint_slot);
  }
}

void Engine::verify_drafts(Active& active, size_t scheduled_index, int64_t first_position) {
  Sequence& seq = active.seq;
  const int64_t drafted = seq.num_draft;
  const int32_t rows = runner_->num_logit_rows(scheduled_index);
  const int64_t computed = seq.num_computed;
  std::copy(seq.tokens.end() - drafted, seq.tokens.end(), drafts_.begin());
  seq.drop_drafts();
  // Row j holds the logits after draft j - 1: sampled as if the drafts before it had been
  // sampled one step at a time; the draft is kept while it is what the sampler chose.
  int64_t accepted = 0;
  for (int32_t j = 0; j < rows; ++j) {
    const int32_t token = process_output(active, runner_->logits_for(scheduled_index, j));
    const bool agrees = j < drafted && token == drafts_[static_cast<size_t>(j)];
    accepted += agrees;
    if (active.done || !agrees) break;
  }
  // K/V are valid up to the last kept token, which is not computed yet.
  if (!active.done) seq.num_computed = std::min(computed, seq.num_tokens() - 1);
  // A hybrid model's state has gone through every draft: after a rejected one it goes back to
  // the step's start, and the kept tokens are computed again with the next step's.
  if (!active.done && accepted < drafted && seq.checkpoint_slot >= 0) {
    model_->copy_state(*cache_, seq.checkpoint_slot, seq.state_slot);
    seq.num_computed = first_position;
  }
  spec_stats_.num_drafts += 1;
  spec_stats_.num_draft_tokens += drafted;
  spec_stats_.num_accepted_tokens += accepted;
  for (int64_t j = 0; j < accepted; ++j) spec_stats_.accepted_per_position[j] += 1;
  update_acceptance(active, drafted, accepted);
}

void Engine::catch_up_draft_on_prompts() {
  // The draft model computes a prompt in the steps that compute it for the target, before the
  // first token is sampled: its cost is then part of the prompt's (as in llama.cpp), not a
  // pause after the first token. Not under a load at which nobody drafts (propose_drafts's row
  // budget, or a batch so large that no draft pays even if all are accepted): a sequence that
  // starts to draft later catches up then.
  if (!anyone_may_draft()) return;
  for (const ScheduledSequence& s : scheduled_) {
    const Sequence& seq = *s.seq;
    if (seq.num_computed >= seq.num_prompt_tokens) continue;  // num_computed is not advanced yet
    Active& active = *active_.at(seq.request_id);
    if (!active.draft_state || active.done) continue;
    const int64_t end = std::min(seq.num_computed + s.num_new_tokens, seq.num_tokens());
    draft_jobs_.push_back(
        {active.draft_state.get(), std::span(seq.tokens).first(static_cast<size_t>(end)), 0, {}});
  }
  if (draft_jobs_.empty()) return;
  draft_->propose(draft_jobs_);
  draft_jobs_.clear();
}

void Engine::update_acceptance(Active& active, int64_t drafted, int64_t accepted, bool shadow) {
  // Decayed counts: recent drafts weigh more, so a sequence that leaves a quoted passage
  // drafts less soon after. The decay is per draft token, so the counts cover about the last
  // 20 tokens whether a step verified one draft or eight (per step, few drafts a step kept
  // the estimate near its prior, which kept the drafts few).
  constexpr double kDecayPerToken = 0.95;
  const double decay = std::pow(kDecayPerToken, static_cast<double>(std::max<int64_t>(drafted, 1)));
  const double missed = accepted < drafted ? 1.0 : 0.0;
  active.spec_accepted = active.spec_accepted * decay + static_cast<double>(accepted);
  active.spec_rejected = active.spec_rejected * decay + missed;
  if (active.proposal.count == 0) return;
  const int kind = ngram_kind(active.proposal);
  for (std::array<double, 2>* counts : {&active.ngram_counts[kind], &ngram_acceptance_[kind]}) {
    (*counts)[0] = (*counts)[0] * decay + static_cast<double>(accepted);
    (*counts)[1] = (*counts)[1] * decay + missed;
  }
  // A shadow proposal's first token was compared with the model's token itself; verified
  // drafts precede it. A match away from where the text was copying that is wrong from its
  // first token does not move that place: the text has not gone there.
  const int64_t next =
      next_copy_position(active.seq.tokens, active.proposal, shadow ? 0 : accepted);
  const bool moved = active.proposal.near || next != active.proposal.source || active.copy_from < 0;
  if (!active.done) active.copy_from = moved ? next : active.copy_from + 1;
  active.proposal = {};
}

bool Engine::anyone_may_draft() const {
  const int64_t rows = config_.spec.max_step_rows;
  const auto running = static_cast<int64_t>(scheduler_->num_running());
  return !(rows > 0 && running >= rows) && drafts_could_pay(running - 1);
}

bool Engine::drafts_could_pay(int64_t other_rows) const {
  // propose_drafts's rate with every draft accepted: k drafts make `other` + 1 + k tokens in a
  // step of 1 + r other + c k, which beats plain decoding for some k exactly when it does for
  // k = 1 (the sign of the gain does not depend on k).
  const double r = draft_row_cost();
  const double c = r + draft_model_cost();
  const double other = static_cast<double>(std::max<int64_t>(other_rows, 0));
  const double base = 1 + r * other;
  return (other + 2) / (base + c) > (other + 1) / base;
}

double Engine::expected_acceptance(const Active& active, const NgramProposal& proposal) const {
  if (proposal.count == 0)  // a draft model: the sequence's own record, prior 1/2
    return (active.spec_accepted + 1) / (active.spec_accepted + active.spec_rejected + 2);
  // An n-gram proposal: the sequence's record for this kind of match, with the rate of all
  // sequences' matches of the kind (prior 1/2) weighing as two drafts. How reliable a match
  // is depends most on its kind (a 5-token match where the text was copying from is right far
  // more often than a 2-token one elsewhere); the sequence's own record says how closely this
  // text copies.
  const int kind = ngram_kind(proposal);
  const std::array<double, 2>& all = ngram_acceptance_[static_cast<size_t>(kind)];
  const std::array<double, 2>& own = active.ngram_counts[static_cast<size_t>(kind)];
  const double prior = (all[0] + 1) / (all[0] + all[1] + 2);
  return (own[0] + 2 * prior) / (own[0] + own[1] + 2);
}

void Engine::record_step_time(double seconds) {
  // Decode steps only: every sequence computes its last token and its drafts, nothing else.
  int64_t rows = 0;
  for (const ScheduledSequence& s : scheduled_) {
    if (s.num_new_tokens != 1 + s.seq->num_draft) return;
    rows += s.num_new_tokens;
  }
  step_costs_.record(rows, seconds);
}

double Engine::draft_model_cost() const {
  const double seconds = draft_ ? draft_->step_seconds() : mtp_ ? mtp_->step_seconds() : 0;
  if (seconds == 0 || !config_.spec.measure_row_cost) return 0;
  const std::optional<StepCostModel::Cost> cost = step_costs_.cost();
  const double one_row = cost ? cost->one_row : 0;
  if (one_row > 0) return seconds / one_row;
  // Until the engine has timed its own steps, the draft's size against the target's stands
  // in for their time (decode reads every weight once per step); an MTP block is one layer
  // and the vocabulary projection: about two layers' worth.
  if (mtp_) return 2.0 / model_->config().n_layers;
  return static_cast<double>(draft_->file_bytes()) / static_cast<double>(target_file_bytes_);
}

void Engine::load_eagle3_head() {
  const std::string& path = config_.spec.draft_model;
  eagle3_file_ = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(path));
  if (eagle3_file_->architecture() != "eagle3")
    fail("{}: architecture '{}' is no EAGLE-3 head (--spec eagle3 takes one; --spec draft a "
         "draft model)",
         path, eagle3_file_->architecture());
  model::ModelOptions options;
  options.max_batch_tokens = config_.max_batched_tokens;
  options.max_context = config_.context;
  options.target = model_.get();
  eagle3_ = model::load_model(*eagle3_file_, options);
  // Its one layer's K/V at the positions of the model's full-attention group (group 0), whose
  // block tables place them (ModelRunner::enable_eagle3).
  eagle3_cache_ = std::make_unique<kv::KvCache>(
      eagle3_->kv_config(cache_->groups()[0].pool.num_blocks(), config_.block_size,
                         config_.kv_key_type, config_.kv_value_type));
  runner_->enable_eagle3(*eagle3_, *eagle3_cache_);
  mtp_ = std::make_unique<MtpDrafter>(*eagle3_, *eagle3_cache_, *cache_, *pool_, config_.max_seqs);
  mtp_jobs_.reserve(static_cast<size_t>(config_.max_seqs));
}

void Engine::remember_mtp_hidden(Sequence& seq, size_t scheduled_index) {
  const int64_t pos = seq.num_computed - 1;
  if (pos < 0 || pos == seq.mtp_hidden_pos) return;
  const std::span<const float> hidden = runner_->token_hidden(scheduled_index, pos);
  if (hidden.empty() || hidden.size() != seq.mtp_hidden.size()) return;
  std::copy(hidden.begin(), hidden.end(), seq.mtp_hidden.begin());
  seq.mtp_hidden_pos = pos;
}

double Engine::draft_row_cost() const {
  if (!config_.spec.measure_row_cost) return config_.spec.row_cost;
  const std::optional<StepCostModel::Cost> cost = step_costs_.cost();
  if (!cost) return config_.spec.row_cost;
  return std::clamp(cost->per_row / cost->one_row, 0.0, 10.0);
}

int64_t Engine::propose_drafts(Active& active, int64_t budget, int64_t other_rows,
                               size_t scheduled_index) {
  Sequence& seq = active.seq;
  // One token to compute, or with a hybrid model after a rejected draft the kept ones again
  // (verify_drafts): drafts then follow them in the same step.
  const bool catching_up = seq.checkpoint_slot >= 0 && seq.num_computed >= seq.num_prompt_tokens &&
                           seq.num_uncomputed() <= 1 + SpecDecodeStats::kMaxPositions;
  if (seq.num_draft > 0 || (seq.num_uncomputed() != 1 && !catching_up) || seq.num_generated() == 0)
    return 0;
  // Drafts past max_tokens or the context would be thrown away.
  const int64_t room =
      std::min(seq.request.max_tokens - seq.num_generated(), config_.context - seq.num_tokens()) -
      1;
  // An n-gram proposal comes first: how far to trust it depends on what kind of match it is.
  NgramProposal proposal;
  if (!draft_ && !mtp_) {
    const int64_t most = std::min<int64_t>({active.spec_max, room, budget});
    if (most <= 0) return 0;
    proposal =
        propose_ngram(seq.tokens, config_.spec.prompt_lookup_min, config_.spec.prompt_lookup_max,
                      std::span(drafts_).first(static_cast<size_t>(most)), active.copy_from);
    if (proposal.count == 0) return 0;
  }
  // How many drafts pay: with a per-token acceptance a (expected_acceptance), k drafts yield
  // 1 + a + ... + a^k tokens and add c k to the step (c: a draft token's cost, its row and the
  // draft model's step, in one-row decode steps, measured). The step's other rows make `other`
  // tokens in a step of 1 + r other (r: a row's cost): the k that makes the most tokens per unit of
  // time wins. Alone (other = 0) that is yield / (1 + c k); in a full batch a draft must beat the
  // batch's own rate, which it seldom does. None when no k beats plain decoding; an n-gram proposal
  // is then only checked against the next token (free), so the estimate follows the text and
  // drafting resumes where it starts to pay.
  const double a = expected_acceptance(active, proposal);
  const double r = draft_row_cost();
  const double c = r + draft_model_cost();
  const auto other = static_cast<double>(other_rows);
  const double base = 1 + r * other;
  int32_t k = 0;
  double best = (other + 1) / base, yield = 1, power = 1;
  for (int32_t n = 1; n <= active.spec_max; ++n) {
    power *= a;
    yield += power;
    if (const double rate = (other + yield) / (base + c * n); rate > best) {
      best = rate;
      k = n;
    }
  }
  if (!step_costs_.cost() && config_.spec.measure_row_cost && k < active.spec_max) {
    // The fit needs steps of two widths: once this width is timed often enough, draft one
    // more, so that a cost guessed too high cannot keep drafting at one width for good.
    const int64_t rows = static_cast<int64_t>(scheduled_.size()) + std::max(k, 1);
    if (step_costs_.timed_enough(rows)) k = std::max(k, 1) + 1;
  }
  // A draft model has no free check: alone, a sequence drafts at least one token so that its
  // acceptance stays known; in a batch that does not pay, it drafts nothing. Nor does it in a
  // batch when its draft cache lags far behind (it started under a load at which nobody
  // drafted): catching up its whole text, a prefill on the draft model, would cost more than
  // the few tokens left to a sequence at the tail of a busy period can save.
  if (draft_ && other_rows > 0) {
    constexpr int64_t kMaxLagInBatch = SpecDecodeStats::kMaxPositions;
    if (k == 0 || seq.num_tokens() - active.draft_state->seq.num_computed > kMaxLagInBatch)
      return 0;
  }
  if (mtp_ && other_rows > 0 && k == 0) return 0;  // as a draft model's, in a batch
  const int64_t want = std::min<int64_t>({std::max(k, 1), room, budget});
  if (want <= 0) return 0;
  if (mtp_) {  // from the model's hidden state at the position before the last token
    const int64_t before = seq.num_tokens() - 2;
    const std::span<const float> h = runner_->token_hidden(scheduled_index, before);
    const float* hidden = !h.empty()                      ? h.data()
                          : seq.mtp_hidden_pos == before ? seq.mtp_hidden.data()
                                                         : nullptr;
    if (hidden == nullptr) return 0;
    mtp_jobs_.push_back(
        {&seq, hidden, want, std::span(active.draft_out).first(static_cast<size_t>(want))});
    return want;
  }
  if (draft_) {  // proposed with the others after this pass
    draft_jobs_.push_back({active.draft_state.get(), seq.tokens, want,
                           std::span(active.draft_out).first(static_cast<size_t>(want))});
    draft_owners_.push_back(&active);
    return want;
  }
  active.proposal = proposal;
  if (k == 0) {  // not worth verifying: only see whether it would have been right
    active.shadow_draft = drafts_[0];
    return 0;
  }
  const int64_t n = std::min(want, static_cast<int64_t>(proposal.count));
  seq.tokens.insert(seq.tokens.end(), drafts_.begin(), drafts_.begin() + n);
  seq.num_draft = n;
  return n;
}

}  // namespace inferd::engine
