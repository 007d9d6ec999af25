// Sequences that fork from others and share their blocks. Beam search: the selection rules
// against a plain re-implementation of vLLM's loop (run to max_tokens, every hypothesis kept,
// one sort at the end), on synthetic distributions and on a tiny random model whose every
// hypothesis is recomputed from scratch; block sharing (peak KV against separate sequences),
// cancellation and stop strings through the engine. n > 1 choices: the same tokens as
// separate requests, the prompt's blocks held once.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "engine/beam_search.h"
#include "engine/engine.h"
#include "model/registry.h"
#include "tiny_engine.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace inferd::engine {
namespace {

// The next-token log-probabilities after `generated` tokens.
using Distribution = std::function<std::vector<float>(const std::vector<int32_t>& generated)>;

struct Hyp {
  std::vector<int32_t> tokens;
  double cum = 0;
  double score = 0;
};

// vLLM's beam search, written out plainly: every candidate of every beam, no early stop.
std::vector<Hyp> reference_search(const Distribution& dist, int width, int results,
                                  float length_penalty, int64_t max_tokens, int32_t eos) {
  std::vector<Hyp> beams{{}}, done;
  int64_t step = 0;
  for (; step < max_tokens && !beams.empty(); ++step) {
    struct Cand {
      size_t beam;
      int32_t token;
      double cum;
    };
    std::vector<Cand> cands;
    for (size_t b = 0; b < beams.size(); ++b) {
      const std::vector<float> lp = dist(beams[b].tokens);
      std::vector<int32_t> order(lp.size());
      for (size_t i = 0; i < lp.size(); ++i) order[i] = static_cast<int32_t>(i);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t x, int32_t y) { return lp[size_t(x)] > lp[size_t(y)]; });
      order.resize(std::min<size_t>(order.size(), size_t(2 * width)));
      for (int32_t t : order) {
        const double cum = beams[b].cum + lp[size_t(t)];
        if (t == eos) {
          done.push_back(
              {beams[b].tokens, cum, beam_score(cum, std::ssize(beams[b].tokens), length_penalty)});
        } else {
          cands.push_back({b, t, cum});
        }
      }
    }
    std::stable_sort(cands.begin(), cands.end(),
                     [](const Cand& a, const Cand& b) { return a.cum > b.cum; });
    std::vector<Hyp> next;
    for (size_t i = 0; i < cands.size() && std::ssize(next) < width; ++i) {
      Hyp h = beams[cands[i].beam];
      h.tokens.push_back(cands[i].token);
      h.cum = cands[i].cum;
      next.push_back(std::move(h));
    }
    beams = std::move(next);
  }
  for (Hyp& h : beams) {
    h.score = beam_score(h.cum, std::ssize(h.tokens), length_penalty);
    done.push_back(h);
  }
  std::stable_sort(done.begin(), done.end(),
                   [](const Hyp& a, const Hyp& b) { return a.score > b.score; });
  done.resize(std::min<size_t>(done.size(), size_t(results)));
  return done;
}

// The BeamSearch class driven as the engine drives it (early stop included).
std::vector<Hyp> class_search(const Distribution& dist, int width, int results,
                              float length_penalty, int64_t max_tokens, int32_t eos,
                              bool* stopped_early = nullptr) {
  BeamSearch search(width, results, length_penalty, max_tokens);
  std::vector<Hyp> beams{{}};
  std::vector<sampling::TokenLogprob> top(static_cast<size_t>(2 * width));
  while (true) {
    search.clear_candidates();
    for (size_t b = 0; b < beams.size(); ++b) {
      const std::vector<float> lp = dist(beams[b].tokens);
      std::fill(top.begin(), top.end(), sampling::TokenLogprob{});
      top_logprobs(lp, top);  // log-softmax of log-probabilities is themselves
      for (const sampling::TokenLogprob& c : top) {
        if (c.token >= 0)
          search.add_candidate(int32_t(b), c.token, beams[b].cum + c.logprob, c.token == eos);
      }
    }
    search.select();
    for (const BeamSearch::Choice& e : search.ended())
      search.offer(beams[size_t(e.parent)].tokens, e.cum_logprob, FinishReason::kStop);
    std::vector<Hyp> next;
    for (const BeamSearch::Choice& c : search.next()) {
      Hyp h = beams[size_t(c.parent)];
      h.tokens.push_back(c.token);
      h.cum = c.cum_logprob;
      next.push_back(std::move(h));
    }
    beams = std::move(next);
    std::vector<double> cum;
    std::vector<int64_t> len;
    const bool at_limit = !beams.empty() && std::ssize(beams[0].tokens) >= max_tokens;
    for (const Hyp& h : beams) {
      if (at_limit) search.offer(h.tokens, h.cum, FinishReason::kLength);
      cum.push_back(h.cum);
      len.push_back(std::ssize(h.tokens));
    }
    if (at_limit) break;
    if (search.settled(cum, len)) {
      if (stopped_early != nullptr) *stopped_early = true;
      break;
    }
  }
  std::vector<Hyp> out;
  for (const BeamSearch::Hypothesis& h : search.results())
    out.push_back({h.tokens, h.cum_logprob, h.score});
  return out;
}

void expect_same(const std::vector<Hyp>& got, const std::vector<Hyp>& want, double tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << what << " hypothesis " << i;
    EXPECT_NEAR(got[i].cum, want[i].cum, tol) << what << " hypothesis " << i;
    EXPECT_NEAR(got[i].score, want[i].score, tol) << what << " hypothesis " << i;
  }
}

TEST(BeamSearch, TopLogprobsIsTheLogSoftmaxOfTheBest) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f};
  std::vector<sampling::TokenLogprob> top(3);
  top_logprobs(logits, top);
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  EXPECT_EQ(top[0].token, 1);  // the tie at 3.0: lower id first
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 0);
  EXPECT_NEAR(top[0].logprob, 3.0 - std::log(z), 1e-5);
  EXPECT_NEAR(top[2].logprob, 1.0 - std::log(z), 1e-5);
}

TEST(BeamSearch, EarlyStopGivesTheResultsOfTheFullSearch) {
  // Synthetic distributions: random logits hashed from the prefix, over 7 tokens (0 = EOS,
  // made likely enough that hypotheses finish at many lengths).
  int early_stops = 0;
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    const Distribution dist = [seed](const std::vector<int32_t>& prefix) {
      uint32_t h = seed * 2654435761u;
      for (int32_t t : prefix) h = (h ^ uint32_t(t + 1)) * 16777619u;
      std::mt19937 rng(h);
      std::normal_distribution<float> normal(0.0f, 1.5f);
      std::vector<float> logits(7);
      for (float& x : logits) x = normal(rng);
      logits[0] += 0.5f;
      double z = 0;
      for (float x : logits) z += std::exp(double(x));
      for (float& x : logits) x -= static_cast<float>(std::log(z));
      return logits;
    };
    for (const int width : {1, 2, 3, 4}) {
      for (const float lp : {1.0f, 0.0f, 0.6f, 2.0f, -0.5f}) {
        const int results = 1 + int(seed % static_cast<uint32_t>(width));
        const std::string what = "seed " + std::to_string(seed) + " width " +
                                 std::to_string(width) + " penalty " + std::to_string(lp);
        bool early = false;
        expect_same(class_search(dist, width, results, lp, 9, 0, &early),
                    reference_search(dist, width, results, lp, 9, 0), 1e-5, what);
        early_stops += early;
      }
    }
  }
  EXPECT_GT(early_stops, 100);  // of 600 searches: the early stop is exercised
}

TEST(BeamSearch, BadSettingsAreErrors) {
  EXPECT_THROW(BeamSearch(0, 1, 1.0f, 4), Error);
  EXPECT_THROW(BeamSearch(2, 3, 1.0f, 4), Error);
  EXPECT_THROW(BeamSearch(2, 1, NAN, 4), Error);
}

// --- through the engine, on a tiny random model -------------------------------------------

class TinyEngineTest : public TinyEngineFixture {
 protected:
  // Log-probabilities after prompt + generated, computed from scratch in a cache of its own.
  std::vector<float> fresh_logprobs(const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& generated) {
    auto model = model::load_model(*file_, {64, 256});
    kv::KvCache cache(model->kv_config(64, 16, DType::F16, DType::F16));
    ThreadPool pool(1, false);
    std::vector<int32_t> tokens = prompt;
    tokens.insert(tokens.end(), generated.begin(), generated.end());
    const kv::BlockTables tables = cache.allocate_sequence(std::ssize(tokens));
    std::vector<int32_t> pos(tokens.size()), rows{static_cast<int32_t>(tokens.size() - 1)};
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    model::BatchSequence seq{0, std::ssize(tokens), &tables};
    model::Batch batch{tokens, pos, {&seq, 1}, rows};
    std::vector<float> logits(static_cast<size_t>(model->config().n_vocab));
    model->forward(batch, cache, logits.data(), pool);
    std::vector<sampling::TokenLogprob> all(logits.size());
    top_logprobs(logits, all);
    std::vector<float> lp(logits.size());
    for (const sampling::TokenLogprob& t : all) lp[size_t(t.token)] = t.logprob;
    return lp;
  }
  static Request beam_request(std::vector<int32_t> p, int64_t max_tokens, int width, int results,
                              std::shared_ptr<Collect> out) {
    Request r;
    r.prompt = std::move(p);
    r.max_tokens = max_tokens;
    r.beam_width = width;
    r.beam_results = results;
    r.output = std::move(out);
    return r;
  }
  RequestResult run_beams(Engine& e, const std::vector<int32_t>& p, int width, int results,
                          float length_penalty, int64_t max_tokens, bool ignore_eos = false) {
    auto out = std::make_shared<Collect>();
    Request r = beam_request(p, max_tokens, width, results, out);
    r.length_penalty = length_penalty;
    r.ignore_eos = ignore_eos;
    e.add_request(std::move(r));
    e.run_until_idle();
    return out->result_;
  }
};

TEST_F(TinyEngineTest, MatchesABruteForceSearch) {
  auto e = engine(4);
  struct Case {
    int prompt_len, width, results;
    float length_penalty;
    int64_t max_tokens;
  };
  // Prompts end inside a block (forks copy it) and on a block boundary.
  for (const Case c : {Case{7, 4, 4, 1.0f, 6}, Case{16, 3, 2, 0.5f, 7}, Case{21, 2, 1, 2.0f, 8}}) {
    const std::vector<int32_t> p = prompt(c.prompt_len);
    const std::vector<Hyp> want =
        reference_search([&](const std::vector<int32_t>& g) { return fresh_logprobs(p, g); },
                         c.width, c.results, c.length_penalty, c.max_tokens, 2);
    const RequestResult got = run_beams(*e, p, c.width, c.results, c.length_penalty, c.max_tokens);
    std::vector<Hyp> got_hyps;
    for (const BeamResult& b : got.beams) got_hyps.push_back({b.tokens, b.cum_logprob, b.score});
    expect_same(got_hyps, want, 2e-3, "prompt " + std::to_string(c.prompt_len));
    ASSERT_FALSE(got.beams.empty());
    EXPECT_EQ(got.output_tokens, got.beams[0].tokens);
    EXPECT_EQ(got.beams[0].text, e->tokenizer().decode(got.beams[0].tokens, true));
    EXPECT_EQ(e->kv_cache().used_blocks(), 0);  // every beam's blocks returned
  }
}

TEST_F(TinyEngineTest, BeamsShareTheirBlocks) {
  // Four beams over a 100-token prompt against four sequences generating as many tokens.
  const std::vector<int32_t> p = prompt(100);
  auto beams = engine(4, false);
  const RequestResult r = run_beams(*beams, p, 4, 1, 1.0f, 40, true);
  ASSERT_EQ(r.beams.size(), 1u);
  EXPECT_EQ(r.beams[0].tokens.size(), 40u);
  auto separate = engine(4, false);
  for (int i = 0; i < 4; ++i) {
    Request q;
    q.prompt = p;
    q.max_tokens = 40;
    q.ignore_eos = true;
    q.sampling.temperature = 0;
    q.output = std::make_shared<Collect>();
    separate->add_request(std::move(q));
  }
  separate->run_until_idle();
  EXPECT_LE(double(beams->peak_kv_bytes()), 0.7 * double(separate->peak_kv_bytes()))
      << beams->peak_kv_bytes() << " vs " << separate->peak_kv_bytes();
  EXPECT_EQ(beams->kv_cache().used_blocks(), 0);
}

TEST_F(TinyEngineTest, CancelFreesEveryBeam) {
  auto e = engine(4);
  auto out = std::make_shared<Collect>(6);
  Request r = beam_request(prompt(30), 50, 4, 1, out);
  r.ignore_eos = true;
  e->add_request(std::move(r));
  e->run_until_idle();
  EXPECT_EQ(out->result_.finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(out->result_.beams.empty());
  EXPECT_EQ(e->kv_cache().used_blocks(), 0);
}

TEST_F(TinyEngineTest, StopStringsEndAHypothesisAndAreCutFromItsText) {
  auto e = engine(4);
  auto out = std::make_shared<Collect>();
  Request r = beam_request(prompt(9), 12, 3, 3, out);
  r.ignore_eos = true;
  r.stop = {"c"};
  e->add_request(std::move(r));
  e->run_until_idle();
  const RequestResult& res = out->result_;
  ASSERT_EQ(res.beams.size(), 3u);
  for (const BeamResult& b : res.beams) {
    EXPECT_EQ(b.text.find('c'), std::string::npos) << b.text;
    const std::string full = e->tokenizer().decode(b.tokens, true);
    if (b.finish_reason == FinishReason::kStop) {
      EXPECT_NE(full.find('c'), std::string::npos) << full;
    } else {
      EXPECT_EQ(b.tokens.size(), 12u);
    }
  }
}

TEST_F(TinyEngineTest, BadBeamRequestsAreErrors) {
  auto e = engine(2);
  Request r;
  r.prompt = prompt(5);
  r.max_tokens = 4;
  r.output = std::make_shared<Collect>();
  r.beam_width = 3;  // more beams than running sequences
  EXPECT_THROW(e->add_request(r), Error);
  r.beam_width = 2;
  r.beam_results = 3;
  EXPECT_THROW(e->add_request(r), Error);
  r.beam_results = 1;
  r.logprobs = 2;
  EXPECT_THROW(e->add_request(r), Error);
}

// Sampled choices of one prompt, as separate requests (each computing the prompt) or as one
// request whose choices fork from the first: the same tokens, the prompt held once.
TEST_F(TinyEngineTest, ChoicesForkFromTheFirstAndEqualSeparateRequests) {
  const std::vector<int32_t> p = prompt(70);  // 4 full blocks and a partly filled one
  const auto sampled = [&](uint64_t seed) { return seeded_request(p, 20, seed); };
  std::vector<std::vector<int32_t>> alone;
  for (uint64_t i = 0; i < 4; ++i) {
    auto e = engine(4, false);
    auto out = std::make_shared<Collect>();
    Request r = sampled(100 + i);
    r.output = out;
    e->add_request(std::move(r));
    e->run_until_idle();
    alone.push_back(out->result_.output_tokens);
  }
  EXPECT_NE(alone[0], alone[1]);  // the seeds matter
  // Forked (4 running sequences), and queued one after another (2: more choices than fit).
  for (const int max_seqs : {4, 2}) {
    auto e = engine(max_seqs, false);
    std::vector<std::shared_ptr<Collect>> outs;
    Request r = sampled(100);
    add_choice_outputs(r, 4, outs);
    e->add_request(std::move(r));
    e->run_until_idle();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(outs[size_t(i)]->result_.output_tokens, alone[size_t(i)]) << "choice " << i;
      EXPECT_EQ(outs[size_t(i)]->result_.stats.prompt_tokens, 70);
    }
    if (max_seqs == 2) {
      EXPECT_EQ(e->kv_cache().used_blocks(), 0);
      continue;
    }
    EXPECT_EQ(outs[1]->result_.stats.cached_tokens, 70);  // it computed none of the prompt
    // Blocks of 16: the prompt's 4 full blocks once, then each choice's own: the partly filled
    // block 64..79 (the first choice's, or a copy) and 80..95 (positions up to 88 are computed).
    // Four separate sequences would hold 4 x 6.
    const int64_t block_bytes = e->kv_cache().bytes() / e->kv_cache().groups()[0].pool.num_blocks();
    EXPECT_EQ(e->peak_kv_bytes(), (4 + 4 * 2) * block_bytes);
    EXPECT_EQ(e->kv_cache().used_blocks(), 0);
  }
}

TEST_F(TinyEngineTest, ChoicesOfACancelledFirstChoiceStillFinish) {
  auto e = engine(4);
  auto first = std::make_shared<Collect>(0);  // cancelled at once
  auto second = std::make_shared<Collect>();
  Request r;
  r.prompt = prompt(40);
  r.max_tokens = 5;
  r.output = first;
  r.more_outputs.push_back(second);
  e->add_request(std::move(r));
  e->run_until_idle();
  EXPECT_EQ(first->result_.finish_reason, FinishReason::kCancelled);
  EXPECT_NE(second->result_.finish_reason, FinishReason::kCancelled);
  EXPECT_FALSE(second->result_.output_tokens.empty());
  EXPECT_EQ(e->kv_cache().used_blocks(), 0);
}

}  // namespace
}  // namespace inferd::engine
