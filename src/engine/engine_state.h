// The engine's per-request state (Engine::Active, Engine::BeamState), shared by the files that
// implement Engine: engine.cpp (the step loop), engine_forks.cpp, engine_speculation.cpp. Not
// for anyone else.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "engine/beam_search.h"
#include "engine/engine.h"
#include "engine/stop_matcher.h"
#include "sampling/sampler.h"
#include "structured/grammar.h"
#include "tokenizer/detokenizer.h"
#include "util/error.h"

namespace inferd::engine {

// A request inside the engine: its sequence plus the per-request state of the output path.
struct Engine::Active {
  Sequence seq;
  std::unique_ptr<sampling::Sampler> sampler;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopMatcher> stop;
  std::string stop_word;                    // the stop string that ended the output, if one did
  int32_t stop_token = -1;                  // the stop_token_ids entry that ended it, if one did
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
  // Prompt logprobs: one entry per prompt token, each with room for its alternatives, sized at
  // admission and filled as the prompt is computed (Sequence::prompt_logprobs_next says how far).
  std::vector<PromptTokenLogprob> prompt_logprobs;
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

}  // namespace inferd::engine
