// Speculative sampling (Leviathan et al., 2023): verifying a draft token that was drawn from a
// draft distribution q against the target distribution p so that the token kept is
// distributed exactly as p, however good or bad q is.
#pragma once

#include <cstdint>
#include <span>

#include "sampling/rng.h"

namespace inferd::sampling {

struct SpeculativeDraw {
  int32_t token = -1;     // the draft when accepted, else a token drawn from the residual
  bool accepted = false;  // the draft was kept
};

// p and q: [n_vocab] probabilities (each summing to 1, as Sampler::distribution gives them);
// `draft` was drawn from q. Accepts it with probability min(1, p[draft] / q[draft]); on
// rejection draws from normalize(max(p - q, 0)).
SpeculativeDraw speculative_draw(std::span<const float> p, std::span<const float> q, int32_t draft,
                                 Rng& rng);

}  // namespace inferd::sampling
