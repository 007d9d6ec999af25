#include "engine/engine.h"

#include "engine/engine_state.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <utility>

#include "dist/model_parallel.h"
#include "engine/bad_words.h"
#include "engine/beam_search.h"
#include "engine/stop_matcher.h"
#include "model/data_parallel.h"
#include "model/registry.h"
#include "sampling/sampler.h"
#include "structured/grammar.h"
#include "tokenizer/detokenizer.h"
#include "util/error.h"
#include "util/machine_memory.h"

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

namespace {

constexpr int64_t kDefaultContextCap = 4096;
constexpr int32_t kMaxTopLogprobs = 20;
// Rows of logits a step has for prompt logprobs: a prompt that asks for them is computed this
// many positions a step (a row is n_vocab floats; 64 of a 128K vocabulary are 32 MiB).
constexpr int64_t kPromptLogitRows = 64;

int64_t resolve_context(const EngineConfig& config, int64_t model_context) {
  if (config.context < 0) fail("context size {} must not be negative", config.context);
  if (config.context == 0) return std::min(model_context, kDefaultContextCap);
  return config.context;
}

// State slots (a hybrid model's recurrent state, a quantized cache's exact copies): one a
// sequence, and for a recurrent state with speculative decoding a second, the state before a
// verification, restored when a draft is rejected.
int32_t state_slots(const EngineConfig& c, bool recurrent) {
  return c.max_seqs * (c.spec.enabled() && recurrent ? 2 : 1);
}

// How many snapshots of `state_bytes` each the config asks for (EngineConfig::state_snapshots,
// state_cache_bytes). A multi-turn chat resumes each conversation from the snapshot its last
// turn left, so the pool must hold about two per conversation in flight (its prompt's and its
// answer's ends), not two per running sequence: 8 conversations on 4 sequences found 6% of
// their prefixes with 2 x max_seqs slots.
//
// Without a recurrent state (only a quantized cache's exact copies) a prefix whose snapshot is
// gone is still taken, reading its blocks quantized: by default the floor alone, so that the
// copies of a few sequences' turns do not take memory no one asked for; --cache-ram sizes the
// pool as for a hybrid model.
int32_t resolve_state_snapshots(const EngineConfig& c, int64_t state_bytes, bool recurrent) {
  if (c.state_snapshots > 0) return c.state_snapshots;
  const int64_t floor = 2 * int64_t{c.max_seqs};
  int64_t budget = c.state_cache_bytes;
  int64_t cap = std::numeric_limits<int32_t>::max();
  if (budget < 0 && !recurrent) return static_cast<int32_t>(floor);
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

// The bytes of one state slot's exact copies (kv/kv_cache.h), measured on a cache of one block
// and one slot; 0 when the cache keeps none (an F16 cache, --cache-exact-recent 0, a device).
// Rank 0's copies: every layer's (a pipeline's other layers included), but under -tp only its
// share of the kv heads.
int64_t Engine::exact_copy_bytes_per_slot() const {
  kv::KvCacheConfig probe = model_->kv_config(1, config_.block_size, config_.kv_key_type,
                                              config_.kv_value_type, 1, config_.kv_exact_recent);
  if (!probe.keeps_exact_copies()) return 0;
  probe.state_floats = 0;
  probe.num_sliding_blocks = probe.sliding_layers.empty() ? 0 : 1;
  probe.remote_layers.clear();
  return kv::KvCache(probe).state_bytes();
}

// The default KV pool (max_seqs sequences of the whole context) of a large model can exceed the
// machine's memory: 16 sequences of 4096 tokens of the 30B-A3B shape are 6.4 GB on top of its
// 18 GB of weights, and the pool is faulted in at start-up, so the kernel killed the server.
// A pool that would leave less than kKvHeadroom of the available memory is cut to what fits
// (at least one whole sequence; sequences beyond it wait or are preempted, as with any full
// pool), and kv_blocks_capped() says so. An explicit kv_blocks is taken as it is.
//
// A split model's ranks each allocate as many blocks as this one, of their own layers and
// heads, on their own machines: every machine must hold the blocks of all its ranks (-tp 2 on
// one machine: two halves of each block; -pp 2 on two: the larger run of layers' block on
// each), so the pool fits the machine that runs short first, each rank measuring its own.
int32_t Engine::fit_kv_blocks(int32_t wanted, int64_t blocks_per_seq) {
  constexpr int64_t kKvHeadroom = int64_t{1} << 30;
  kv::KvCacheConfig one =
      model_->kv_config(1, config_.block_size, config_.kv_key_type, config_.kv_value_type, 1,
                        config_.kv_exact_recent);
  one.num_sliding_blocks = one.sliding_layers.empty() ? 0 : 1;
  one.state_floats = 0;  // counted below
  one.num_state_slots = 0;
  // A hybrid model's state, a quantized cache's exact copies and their snapshot slots come out
  // of the same memory (every rank's layers' part of them: taken whole on each machine, which
  // errs on the safe side).
  const int64_t state_bytes =
      (model_->config().recurrent_state_floats * int64_t{sizeof(float)} + exact_slot_bytes_) *
      (state_slots(config_, model_->has_recurrent_state()) + config_.state_snapshots);
  struct Machine {
    int64_t available = std::numeric_limits<int64_t>::max();
    int64_t block_bytes = 0;  // of every rank on it
  };
  std::vector<std::pair<uint32_t, Machine>> machines;
  // On a device the blocks take device memory: what the executor leaves for them (model.h).
  const int64_t device = model_->device_memory_for_kv();
  if (device >= 0) {
    machines.push_back({0, {device + kKvHeadroom, kv::KvCache(one).bytes()}});
  } else {
    for (const model::RankMemory& rank : model_->rank_memory(one)) {
      if (rank.available < 0) return wanted;  // unknown: as asked
      auto it = std::find_if(machines.begin(), machines.end(),
                             [&](const auto& m) { return m.first == rank.machine; });
      if (it == machines.end()) it = machines.insert(machines.end(), {rank.machine, Machine{}});
      it->second.available = std::min(it->second.available, rank.available);
      it->second.block_bytes += rank.block_bytes;
    }
  }
  int64_t fit = std::numeric_limits<int64_t>::max();
  for (const auto& [id, m] : machines) {
    const int64_t usable = m.available - state_bytes - kKvHeadroom;
    fit = std::min(fit, usable / std::max<int64_t>(m.block_bytes, 1));
  }
  fit = std::max(fit, blocks_per_seq);
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
  options.lora = config.lora;
  options.mtp = config.spec.enabled() && config.spec.method == SpecMethod::kMtp;
  dist::ParallelWorld world;
  if (config.pipeline_ranks != nullptr) {  // (tests)
    if (config.pipeline_ranks->size() != config.pipeline_parallel)
      fail("--pipeline-parallel {} over {} ranks", config.pipeline_parallel,
           config.pipeline_ranks->size());
    world.pipeline = options.pp = config.pipeline_ranks;
  } else if (config.data_ranks != nullptr) {  // (tests)
    if (config.data_ranks->size() != config.data_parallel)
      fail("--data-parallel {} over {} ranks", config.data_parallel, config.data_ranks->size());
    world.data = options.dp = config.data_ranks;
    options.expert_parallel = config.expert_parallel;
  } else {
    world = dist::apply_parallel_world(
        options, {config.tensor_parallel, config.pipeline_parallel, config.data_parallel},
        config.expert_parallel, "run|chat|serve");
  }
  if (options.mtp && config.device != model::Device::kCpu)
    fail("--spec mtp runs on the CPU executor only");
  if (config.spec.enabled() && config.spec.method == SpecMethod::kEagle3 &&
      config.device != model::Device::kCpu)
    fail("--spec eagle3 runs on the CPU executor only");
  if (config.spec.enabled() && config.spec.method == SpecMethod::kEagle3 && world.ranks() > 1)
    fail(
        "--spec eagle3 with --tensor-parallel, --pipeline-parallel or --data-parallel is not "
        "implemented (the ranks hand out no hidden states)");
  model_ = model::load_model(file, options);
  if (config.kv_exact_recent < 0) fail("--cache-exact-recent {} is negative", config.kv_exact_recent);
  exact_slot_bytes_ = exact_copy_bytes_per_slot();
  const bool recurrent = model_->has_recurrent_state();
  config_.state_snapshots =
      config_.prefix_caching && (recurrent || exact_slot_bytes_ > 0)
          ? resolve_state_snapshots(
                config_,
                model_->config().recurrent_state_floats * int64_t{sizeof(float)} + exact_slot_bytes_,
                recurrent)
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
                                           config.kv_value_type,
                                           state_slots(config, model_->has_recurrent_state()),
                                           config.kv_exact_recent);
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
  } else if (config_.prefix_caching && kv.keeps_exact_copies()) {
    // A quantized cache's exact copies are not in the blocks either: a prefix taken from the
    // cache reads its first and latest blocks exactly only from a snapshot of them.
    kv.num_snapshot_slots = config_.state_snapshots;
  }
  cache_ = std::make_unique<kv::KvCache>(kv);
  model_->attach_cache(kv, config.threads);  // the other ranks' caches, alike
  if (config_.prefix_caching) {
    prefix_cache_ =
        std::make_unique<kv::PrefixCache>(cache_->groups(), config.block_size, blocks_per_seq + 1);
    if (model_->splits_sequences())  // (each rank holds its own sequences' K/V)
      prefix_cache_->set_block_rank([model = model_.get()](size_t group, int32_t block) {
        return model->rank_of_block(group, block);
      });
  }
  pool_ = std::make_unique<ThreadPool>(config.threads, config.pin_threads);
  const int64_t prompt_rows = std::min(kPromptLogitRows, config.max_batched_tokens);
  scheduler_ = std::make_unique<Scheduler>(
      SchedulerConfig{config.max_batched_tokens, config.max_seqs, config.block_size, prompt_rows},
      cache_->groups(), prefix_cache_.get());
  config.spec.validate();
  runner_ = std::make_unique<ModelRunner>(
      *model_, *cache_, *pool_, config.max_batched_tokens, config.max_seqs,
      config.spec.enabled() ? config.spec.num_tokens : 0, prompt_rows, config.bf16_prompts);
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
  // Pipeline parallelism: a flight for each step in flight, each runner its own pipeline slot.
  // Speculative decoding drafts from the step just finished and verifies in the next: one at a
  // time.
  if (config.steps_in_flight < 0)
    fail("steps in flight: {} (0: as many as the pipeline has ranks, or a count)", config.steps_in_flight);
  const int depth = config.steps_in_flight > 0
                        ? std::min(config.steps_in_flight, model_->pipeline_depth())
                        : model_->pipeline_depth();
  if (depth > 1 && !config.spec.enabled() && !model_->config().mtp) {
    flights_.resize(static_cast<size_t>(depth));
    flights_[0].runner = std::move(runner_);  // (runner_ holds a flight's only while it is swapped in)
    for (Flight& f : flights_) {
      if (!f.runner)
        f.runner =
            std::make_unique<ModelRunner>(*model_, *cache_, *pool_, config.max_batched_tokens,
                                          config.max_seqs, 0, prompt_rows, config.bf16_prompts);
      f.scheduled.reserve(static_cast<size_t>(config.max_seqs));
    }
  }
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
  scheduler_->set_block_copier(
      [model = model_.get(), cache = cache_.get()](size_t group, int32_t from, int32_t to) {
        model->copy_kv_block(*cache, group, from, to);
      });
  if (kv::BlockPool* snapshots = cache_->snapshot_pool()) {
    if (model_->splits_sequences()) {
      const size_t placing = model::placing_group(*cache_);
      scheduler_->set_snapshot_check(
          [model = model_.get(), placing](const kv::BlockTables& tables, int32_t snapshot) {
            return !tables[placing].empty() &&
                   model->rank_of_snapshot(snapshot) == model->rank_of_block(placing, tables[placing][0]);
          });
    }
    scheduler_->set_snapshots(
        snapshots,
        [model = model_.get(), cache = cache_.get()](int32_t state, int32_t snapshot) {
          model->save_state_snapshot(*cache, state, snapshot);
        },
        [model = model_.get(), cache = cache_.get()](int32_t snapshot, int32_t state) {
          model->load_state_snapshot(*cache, snapshot, state);
        },
        model_->has_recurrent_state());
  }
  if (cache_->has_state()) {
    // Checkpoints for speculative decoding only where a rejected draft cannot be undone
    // otherwise (a recurrent state): exact copies are rewritten with the positions they hold.
    scheduler_->set_state_pool(
        cache_->state_pool(),
        [model = model_.get(), cache = cache_.get()](int32_t from, int32_t to) {
          model->copy_state(*cache, from, to);
        },
        config.spec.enabled() && model_->has_recurrent_state());
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
  // Beams are ranked by the model's log-probabilities; these samplers would have to reshape them.
  const sampling::SamplingParams& s = request.sampling;
  if (s.dry() || s.mirostat != 0 || s.uses_llama_cpp_samplers())
    fail(
        "DRY, Mirostat, XTC, typical-p, top-n-sigma and dynamic temperature do not apply to "
        "beam search");
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

std::shared_ptr<const sampling::DryBreakers> Engine::dry_breakers(
    const std::vector<std::string>& strings) {
  // Building searches every token's text, milliseconds for a large vocabulary; most requests
  // use the same few lists (llama.cpp's default above all).
  constexpr size_t kMaxCachedLists = 16;
  if (const auto it = dry_breakers_.find(strings); it != dry_breakers_.end()) return it->second;
  if (dry_breakers_.size() >= kMaxCachedLists) dry_breakers_.clear();
  auto built = sampling::DryBreakers::build(*tokenizer_, strings);
  dry_breakers_.emplace(strings, built);
  return built;
}

Engine::~Engine() {
  // Steps still in flight: their results are waited for (the other ranks send them whatever
  // happens here), and dropped.
  while (flights_finished_ < flights_launched_) {
    Flight& f = flights_[static_cast<size_t>(flights_finished_++ % std::ssize(flights_))];
    try {
      f.runner->finish();
    } catch (const std::exception&) {  // (ending anyway)
    }
  }
}

void Engine::normalize_lora_scales(std::vector<float>& scales) const {
  if (scales.empty()) return;
  if (scales.size() != config_.lora.size())
    fail("the request gives {} LoRA scale(s); the engine has {} adapter(s)", scales.size(),
         config_.lora.size());
  bool own = true;
  for (size_t i = 0; i < scales.size(); ++i) {
    if (!std::isfinite(scales[i])) fail("LoRA scale {} is not a finite number", scales[i]);
    if (scales[i] == 0.0f) scales[i] = 0.0f;  // (-0 keys the prefix cache as 0 does)
    own = own && scales[i] == config_.lora[i].scale;
  }
  // The adapters' own scales: the same blocks as a request that gives none.
  if (own) scales.clear();
}

size_t Engine::add_lora_adapter(const std::string& path) {
  if (!idle())
    fail("LoRA adapter {}: adapters are added while no request is queued or running", path);
  const model::LoraSpec spec{path, 0.0f};
  model_->add_lora_adapter(spec);
  config_.lora.push_back(spec);
  return config_.lora.size() - 1;
}

uint64_t Engine::add_request(Request request) {
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0) fail("the prompt is empty");
  if (request.embed) {
    // Nothing is generated: the prompt alone must fit, and nothing of the output path applies.
    if (prompt > config_.context)
      fail("input of {} tokens is too large for the context of {}", prompt, config_.context);
    if (request.beam_width > 0 || request.grammar || request.logprobs >= 0 ||
        request.prompt_logprobs >= 0 || !request.more_outputs.empty())
      fail("an embedding request has no beams, grammar, logprobs or further choices");
    request.max_tokens = 1;  // the sizes made at admission stay within the context
  }
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got {}", request.max_tokens);
  if (!request.embed && prompt + request.max_tokens > config_.context) {
    fail("prompt of {} tokens plus max_tokens {} is {} tokens, more than the context of {}", prompt,
         request.max_tokens, prompt + request.max_tokens, config_.context);
  }
  const int32_t n_vocab = model_->config().n_vocab;
  // Token ids the request names (`what`: whose, in the message) must lie in the vocabulary.
  const auto check_ids = [n_vocab](const std::vector<int32_t>& ids, const char* what) {
    for (int32_t id : ids) {
      if (id < 0 || id >= n_vocab)
        fail("{} token id {} is outside the vocabulary of {}", what, id, n_vocab);
    }
  };
  check_ids(request.prompt, "prompt");
  request.sampling.validate(n_vocab);  // (its logit_bias ids too)
  if (request.beam_width > 0) check_beam_request(request);
  if (request.logprobs > kMaxTopLogprobs) {
    fail("logprobs must be at most {}, got {}", kMaxTopLogprobs, request.logprobs);
  }
  if (request.prompt_logprobs < -1 || request.prompt_logprobs > kMaxTopLogprobs) {
    fail("prompt_logprobs must be -1 (none) or 0 to {}, got {}", kMaxTopLogprobs,
         request.prompt_logprobs);
  }
  if (request.prompt_logprobs >= 0 && request.beam_width > 0)
    fail("prompt logprobs and beam search do not mix");
  if (!request.output) fail("request has no output channel");
  if (request.grammar && request.beam_width > 0)
    fail("structured output (a grammar or JSON schema) and beam search do not mix");
  check_ids(request.stop_token_ids, "stop");
  if (request.min_tokens < 0 || request.min_tokens > request.max_tokens) {
    fail("min_tokens must be in [0, max_tokens = {}], got {}", request.max_tokens,
         request.min_tokens);
  }
  check_ids(request.allowed_token_ids, "allowed");
  std::sort(request.allowed_token_ids.begin(), request.allowed_token_ids.end());
  request.allowed_token_ids.erase(
      std::unique(request.allowed_token_ids.begin(), request.allowed_token_ids.end()),
      request.allowed_token_ids.end());
  for (const std::vector<int32_t>& word : request.bad_words) {
    if (word.empty()) fail("a bad word has no tokens");
    check_ids(word, "bad word");
  }
  if (request.beam_width > 0 && (request.min_tokens > 0 || !request.stop_token_ids.empty() ||
                                 !request.allowed_token_ids.empty() || !request.bad_words.empty()))
    fail("min_tokens, stop_token_ids, allowed_token_ids and bad_words do not mix with beams");
  normalize_lora_scales(request.lora_scales);
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
    // The prompt's logprobs are the first choice's: the others neither compute them again nor
    // carry entries that would stay empty (a forked choice takes the prompt as it is).
    choice.prompt_logprobs = -1;
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
  seq.prefix.root = kv::PrefixCache::root_key(request.cache_salt, request.lora_scales);
  active->sampler = std::make_unique<sampling::Sampler>(
      request.sampling, n_vocab, request.logprobs >= 0,
      request.sampling.dry() ? dry_breakers(request.sampling.dry_sequence_breakers) : nullptr);
  active->detokenizer = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_);
  active->top.resize(static_cast<size_t>(std::max(0, request.logprobs)));
  if (request.grammar)
    active->grammar = std::make_unique<structured::GrammarMatcher>(request.grammar);
  active->stop = std::make_unique<StopMatcher>(request.stop, tokenizer_->max_piece_bytes() * 3 + 4);
  if (request.prompt_logprobs >= 0) {
    active->prompt_logprobs.resize(static_cast<size_t>(prompt));
    for (size_t p = 0; p < static_cast<size_t>(prompt); ++p) {
      PromptTokenLogprob& entry = active->prompt_logprobs[p];
      entry.token = request.prompt[p];
      if (p == 0) {
        entry.logprob = std::numeric_limits<float>::quiet_NaN();
      } else {
        entry.top.resize(static_cast<size_t>(request.prompt_logprobs));
      }
    }
  }
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
  if (!flights_.empty()) return step_pipelined();
  if (launch_step(0, -1)) finish_step();
}

void Engine::step_pipelined() {
  const auto depth = static_cast<int64_t>(flights_.size());
  const auto swap = [&](Flight& f) {
    std::swap(runner_, f.runner);
    scheduled_.swap(f.scheduled);
  };
  bool launched = false;
  if (flights_launched_ - flights_finished_ < depth) {
    const auto slot = static_cast<int>(flights_launched_ % depth);
    Flight& f = flights_[static_cast<size_t>(slot)];
    // The running sequences shared between the steps in flight, so that each step has some:
    // a step that took them all would leave the next nothing to run while the ranks work.
    const auto live = static_cast<int64_t>(scheduler_->num_running() + scheduler_->num_waiting());
    const auto share = static_cast<int>(std::max<int64_t>(1, (live + depth - 1) / depth));
    swap(f);
    try {
      launched = launch_step(slot, share);
    } catch (...) {
      swap(f);
      throw;
    }
    for (const ScheduledSequence& s : scheduled_) s.seq->in_flight = true;
    swap(f);
    if (launched) {
      f.launched = true;
      if (flights_launched_ > flights_finished_) ++overlapped_steps_;
      ++flights_launched_;
    }
  }
  if (flights_finished_ == flights_launched_) return;
  if (launched && flights_launched_ - flights_finished_ < depth) return;  // room for another
  Flight& oldest = flights_[static_cast<size_t>(flights_finished_ % depth)];
  ++flights_finished_;
  oldest.launched = false;
  swap(oldest);
  for (const ScheduledSequence& s : scheduled_) s.seq->in_flight = false;
  try {
    finish_step();
  } catch (...) {
    swap(oldest);
    throw;
  }
  swap(oldest);
}

bool Engine::in_flight(const Active& active) const {
  if (active.seq.in_flight) return true;
  if (active.beams) {
    for (const Sequence* seq : active.beams->seqs) {
      if (seq->in_flight) return true;
    }
  }
  return false;
}

bool Engine::launch_step(int slot, int max_seqs) {
  scheduler_->schedule(scheduled_, max_seqs);
  if (scheduled_.empty()) return false;
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
  step_started_ = Clock::now();
  checkpoint_recurrent_states();
  // The MTP block's K/V are computed where a draft may follow; under a load at which nobody
  // drafts they are left out (they cost 4% of a step at 16 sequences on a 9B model): a sequence
  // that drafts again later attends over a gap there, which may cost acceptance, never
  // correctness.
  if (mtp_) runner_->set_mtp_catch_up(anyone_may_draft());
  // The grammar masks are filled while the pass runs; with several steps in flight, while this
  // step's results are waited for (finish_step), since the steps launched in between have
  // masks of their own.
  if (flights_.empty()) start_grammar_masks();
  try {
    runner_->launch(scheduled_, slot);
  } catch (...) {
    if (mask_prefetcher_ && flights_.empty()) mask_prefetcher_->wait();  // it holds matchers of this step
    throw;
  }
  return true;
}

void Engine::finish_step() {
  if (!flights_.empty()) start_grammar_masks();
  try {
    runner_->finish();
  } catch (...) {
    if (mask_prefetcher_) mask_prefetcher_->wait();  // it holds matchers of this step
    throw;
  }
  finish_grammar_masks();
  if (config_.spec.enabled())
    record_step_time(std::chrono::duration<double>(Clock::now() - step_started_).count());
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
    if (runner_->num_prompt_rows(i) > 0) take_prompt_logprobs(*active_.at(seq.request_id), i);
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
  // Prefix caching with snapshots (a hybrid model's state, a quantized cache's exact copies):
  // each sequence's state at a block end, now that its drafts are settled
  // (Scheduler::snapshot_after_step).
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

void Engine::take_prompt_logprobs(Active& active, size_t scheduled_index) {
  Sequence& seq = active.seq;
  const int64_t first = runner_->prompt_row_position(scheduled_index);
  const int32_t rows = runner_->num_prompt_rows(scheduled_index);
  // Row r is position first + r's logits: the distribution of prompt token first + r + 1.
  pool_->for_each_dynamic(rows, [&](int64_t r) {
    PromptTokenLogprob& entry = active.prompt_logprobs[static_cast<size_t>(first + r + 1)];
    const sampling::TokenScore score =
        sampling::score_token(runner_->prompt_logits_for(scheduled_index, static_cast<int32_t>(r)),
                              entry.token, entry.top);
    entry.logprob = score.logprob;
    entry.rank = score.rank;
    entry.top.resize(score.top);  // (smaller only when the vocabulary is: no allocation)
  });
  seq.prompt_logprobs_next = first + rows;
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
  // min_tokens: the tokens that would end the output are not sampled yet (unless a complete
  // grammar allows nothing else).
  if (seq.num_generated() < seq.request.min_tokens &&
      !(active.grammar && active.grammar->terminated())) {
    const auto never = [&](int32_t id) {  // (ids past the logits: a vocabulary larger than them)
      if (static_cast<size_t>(id) < logits.size())
        logits[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
    };
    for (const int32_t id : tokenizer_->vocab().eog_ids()) never(id);
    for (const int32_t id : seq.request.stop_token_ids) never(id);
  }
  ban_bad_words(seq.request.bad_words, output, logits);
  // Where the masks and biases leave no token, the request ends with an error rather than with
  // a token they forbade.
  const auto nothing_to_sample = [&](const char* why) {
    finish(active, FinishReason::kError,
           fmt::format("no token can be sampled at output token {}: {}", seq.num_generated(), why));
    return -1;
  };
  // allowed_token_ids: every other token out, in one pass beside the sorted list; where the
  // grammar or min_tokens has already ruled out every allowed token, nothing may be sampled.
  if (const auto& allowed = seq.request.allowed_token_ids; !allowed.empty()) {
    auto next = allowed.begin();
    bool any_left = false;
    for (size_t id = 0; id < logits.size(); ++id) {
      if (next != allowed.end() && static_cast<size_t>(*next) == id) {
        any_left = any_left || logits[id] > -std::numeric_limits<float>::infinity();
        ++next;
      } else {
        logits[id] = -std::numeric_limits<float>::infinity();
      }
    }
    if (!any_left)
      return nothing_to_sample(
          "the grammar or min_tokens rules out every one of allowed_token_ids");
  }
  const int32_t token = active.sampler->sample(logits, prompt, output);
  if (token == sampling::Sampler::kNoToken)  // logit_bias banned what the masks above left
    return nothing_to_sample(
        "with logit_bias added, every token that the grammar, min_tokens and allowed_token_ids "
        "leave has a logit of -inf (or NaN)");
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
  const auto& stop_ids = seq.request.stop_token_ids;
  if (!stop_ids.empty() && std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
    active.stop_token = token;
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
  if (r.stopped) {
    active.stop_word = r.word;
    if (active.seq.request.include_stop_str) active.seq.request.output->on_text(r.word);
  }
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
          if (const size_t at = r.text.find(stop); at != std::string::npos)
            r.text.resize(seq.request.include_stop_str ? at + stop.size() : at);
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
  if (complete) result.prompt_logprobs = std::move(active.prompt_logprobs);
  result.finish_reason = reason;
  result.error = std::move(error);
  result.stop_word = active.stop_word;
  result.stop_token = active.stop_token;
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
    // (A step in flight still has its sequences: they go when it has finished.)
    if (!active->done && active->seq.request.output->cancelled() && !in_flight(*active)) {
      finish(*active, FinishReason::kCancelled);
    }
  }
  for (uint64_t id : finished_ids_) active_.erase(id);
  finished_ids_.clear();
}

}  // namespace inferd::engine
