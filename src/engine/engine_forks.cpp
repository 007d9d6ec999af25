// The engine's forks: a request's n > 1 choices, each a sequence of its own that shares the
// parent's prompt blocks, and beam search's beams (engine/beam_search.h), which fork, are
// ranked and dropped each step. Part of Engine (engine/engine.h), apart from the step loop.
#include "engine/engine.h"

#include "engine/engine_state.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "engine/beam_search.h"
#include "sampling/sampler.h"
#include "util/error.h"

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
