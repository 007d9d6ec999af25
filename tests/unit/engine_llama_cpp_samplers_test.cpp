// llama.cpp's samplers inside the engine: DRY keeps the greedy text of the tiny model free of
// long repeats; seeded Mirostat, XTC and DRY give the same text with n-gram drafts as without
// (each draft is verified by sampling it, so the samplers' state and coins advance as one token
// at a time would); beam search refuses them.
#include <memory>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "tiny_engine.h"
#include "util/error.h"

namespace inferd::engine {
namespace {

// How many runs of `length` tokens of `text` occurred earlier in it.
int repeated_runs(const std::vector<int32_t>& text, size_t length) {
  std::set<std::vector<int32_t>> seen;
  int repeats = 0;
  for (size_t i = 0; i + length <= text.size(); ++i)
    repeats += !seen.emplace(text.begin() + i, text.begin() + i + length).second;
  return repeats;
}

class LlamaCppSamplersEngineTest : public TinyEngineFixture {
 protected:
  std::vector<int32_t> generate(Engine& e, const sampling::SamplingParams& s, int spec) {
    Request r = greedy_request(prompt(9), nullptr, 40);
    r.sampling = s;
    r.spec_tokens = spec;
    return generate_to_length(e, std::move(r));
  }
};

TEST_F(LlamaCppSamplersEngineTest, DryBreaksTheGreedyLoop) {
  auto e = engine(2);
  sampling::SamplingParams s;
  s.temperature = 0;
  const std::vector<int32_t> plain = generate(*e, s, 0);
  ASSERT_GT(repeated_runs(plain, 3), 5) << "the tiny model's greedy text does not loop";
  s.dry_multiplier = 1000;  // a repeat longer than 2 tokens is never extended
  s.dry_allowed_length = 2;
  s.dry_penalty_last_n = -1;
  s.dry_sequence_breakers.clear();
  const std::vector<int32_t> dry = generate(*e, s, 0);
  EXPECT_EQ(repeated_runs(dry, 3), 0);
}

TEST_F(LlamaCppSamplersEngineTest, DraftsKeepSeededStatefulSamplersExact) {
  EngineConfig c = config(2);
  c.spec.method = SpecMethod::kNgram;
  c.spec.num_tokens = 4;
  c.spec.row_cost = 0;  // draft the most every step
  c.spec.measure_row_cost = false;
  auto e = engine(c);
  for (const int mode : {0, 1, 2}) {
    sampling::SamplingParams s;
    s.temperature = 0.7f;
    s.seed = 17 + static_cast<uint64_t>(mode);
    if (mode == 0) s.mirostat = 2, s.mirostat_tau = 2.0f;
    if (mode == 1) s.xtc_probability = 0.5f, s.xtc_threshold = 0.05f, s.typical_p = 0.95f;
    if (mode == 2) s.dry_multiplier = 0.8f, s.dynatemp_range = 0.3f, s.mirostat = 1;
    const std::vector<int32_t> undrafted = generate(*e, s, 0);
    const int64_t before = e->spec_decode_stats().num_draft_tokens;
    const std::vector<int32_t> drafted = generate(*e, s, -1);
    EXPECT_GT(e->spec_decode_stats().num_draft_tokens, before) << "nothing was drafted, " << mode;
    EXPECT_EQ(drafted, undrafted) << "mode " << mode;
  }
}

TEST_F(LlamaCppSamplersEngineTest, BeamSearchRefusesThem) {
  auto e = engine(4);
  Request r = greedy_request(prompt(4), std::make_shared<Collect>(), 4);
  r.beam_width = 2;
  r.beam_results = 1;
  r.sampling.mirostat = 2;
  EXPECT_THROW(e->add_request(r), Error);
  r.sampling.mirostat = 0;
  r.sampling.dry_multiplier = 0.5f;
  EXPECT_THROW(e->add_request(r), Error);
  r.sampling.dry_multiplier = 0;
  EXPECT_NO_THROW(e->add_request(r));
  e->run_until_idle();
}

}  // namespace
}  // namespace inferd::engine
