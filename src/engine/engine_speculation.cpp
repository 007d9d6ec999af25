// The engine's speculative decoding (engine/speculative.h): proposing drafts (n-gram, a draft
// model, MTP, EAGLE-3) under the step cost model, verifying them row by row, rolling a hybrid
// model's recurrent state back after a rejection, and the acceptance statistics. Part of Engine
// (engine/engine.h), apart from the step loop.
#include "engine/engine.h"

#include "engine/engine_state.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "model/registry.h"
#include "sampling/sampler.h"
#include "util/error.h"

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
      // No exact copies: its batches carry the target's state slots, which are not its own.
      eagle3_->kv_config(cache_->groups()[0].pool.num_blocks(), config_.block_size,
                         config_.kv_key_type, config_.kv_value_type, 1, 0));
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
