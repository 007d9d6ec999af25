#include "sampling/speculative_sampling.h"

#include <algorithm>

#include "util/error.h"

namespace inferd::sampling {

SpeculativeDraw speculative_draw(std::span<const float> p, std::span<const float> q, int32_t draft,
                                 Rng& rng) {
  if (p.size() != q.size() || draft < 0 || static_cast<size_t>(draft) >= p.size())
    fail("speculative_draw: draft {} with {} and {} probabilities", draft, p.size(), q.size());
  const auto d = static_cast<size_t>(draft);
  // u < p/q without dividing: q[d] > 0 for a token drawn from q.
  const double u = rng.uniform();
  if (u * q[d] < p[d]) return {draft, true};
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += std::max(0.0f, p[i] - q[i]);
  if (total <= 0) return {draft, true};  // p == q up to rounding: the draft is p's draw
  double target = double(rng.uniform()) * total;
  int32_t last = draft;
  for (size_t i = 0; i < p.size(); ++i) {
    const float r = p[i] - q[i];
    if (r <= 0) continue;
    last = static_cast<int32_t>(i);
    target -= r;
    if (target < 0) return {last, false};
  }
  return {last, false};  // rounding left a sliver at the end
}

}  // namespace inferd::sampling
