// Random walks through a grammar: from each state, any token the mask allows, at random, until
// the grammar ends. What a walk writes must be text the constraint accepts, whatever the model.
#pragma once

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "structured/grammar.h"
#include "tokenizer/tokenizer.h"

namespace inferd::structured {

// The text of a walk, or nullopt when it did not end within `max_steps`. Past half of them it
// ends as soon as the grammar allows, so walks through open-ended grammars finish.
inline std::optional<std::string> random_walk(const GrammarCompiler& compiler,
                                              const tokenizer::Tokenizer& tok,
                                              const GrammarSpec& spec, uint32_t seed,
                                              int max_steps = 400) {
  const int32_t eos = tok.vocab().special().eos;
  GrammarMatcher m(compiler.compile(spec));
  std::mt19937 rng(seed);
  std::vector<float> logits(static_cast<size_t>(compiler.n_vocab()));
  std::vector<int32_t> out;
  for (int step = 0; step < max_steps; ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    m.mask(logits);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < compiler.n_vocab(); ++t)
      if (logits[static_cast<size_t>(t)] == 0.0f) allowed.push_back(t);
    if (allowed.empty()) return std::nullopt;
    int32_t pick = allowed[rng() % allowed.size()];
    if (step > max_steps / 2 && std::find(allowed.begin(), allowed.end(), eos) != allowed.end())
      pick = eos;
    EXPECT_TRUE(m.accept(pick));
    if (m.terminated()) return tok.decode(out, true);
    out.push_back(pick);
  }
  return std::nullopt;
}

}  // namespace inferd::structured
