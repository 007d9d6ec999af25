#include "engine/step_cost_model.h"

#include <algorithm>

namespace inferd::engine {

void StepCostModel::record(int64_t rows, double seconds) {
  if (rows < 1 || rows > kMaxRows) return;
  constexpr double kWeight = 0.1;  // recent steps count more: the machine's load changes
  if (stale(rows)) samples_[rows] = 0;
  double& mean = mean_seconds_[rows];
  mean = samples_[rows] == 0 ? seconds : mean + kWeight * (seconds - mean);
  samples_[rows] += 1;
  last_timed_[rows] = ++timed_steps_;
}

std::optional<StepCostModel::Cost> StepCostModel::cost() const {
  // Least squares over the row counts in recent use. With a draft model every step carries
  // drafts, so one-row steps are rare: the line's value at one row stands in for them.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (int r = 1; r <= kMaxRows; ++r) {
    if (samples_[r] < kEnoughSamples || stale(r)) continue;
    n += 1;
    sx += r;
    sy += mean_seconds_[r];
    sxx += static_cast<double>(r) * r;
    sxy += r * mean_seconds_[r];
  }
  const double spread = n * sxx - sx * sx;
  if (n < 2 || spread <= 0) return std::nullopt;
  const double slope = (n * sxy - sx * sy) / spread;
  const double one_row = (sy - slope * sx) / n + slope;
  if (one_row <= 0) return std::nullopt;
  return Cost{one_row, std::max(slope, 0.0)};
}

bool StepCostModel::timed_enough(int64_t rows) const {
  return rows >= 1 && rows <= kMaxRows && samples_[rows] >= kEnoughSamples;
}

}  // namespace inferd::engine
