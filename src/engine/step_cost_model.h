// StepCostModel: how long a decode step takes by its number of rows (one per decoding sequence
// plus its drafts), from the engine's own timings: a line fitted through the decayed mean time
// of each row count in recent use. Speculative decoding weighs a draft's cost with it.
#pragma once

#include <cstdint>
#include <optional>

namespace inferd::engine {

class StepCostModel {
 public:
  static constexpr int kMaxRows = 32;
  static constexpr int kEnoughSamples = 8;  // a row count's steps timed before the fit uses it
  // A row count not timed in the last this many timed steps leaves the fit, and its mean starts
  // over when it comes back: the batch it came from has gone, and its steps say little about
  // the widths in use now. F16's steps are memory-bound at a few rows and compute-bound at 16;
  // a line through both drew the slope of a full batch, and a server that had been loaded
  // drafted for one user at half the rate it should.
  static constexpr int64_t kStaleSteps = 64;

  struct Cost {
    double one_row;  // seconds of a one-row step
    double per_row;  // seconds each further row adds (>= 0)
  };

  // A decode step of `rows` rows took `seconds`; steps wider than kMaxRows are not kept.
  void record(int64_t rows, double seconds);
  // The fitted line: null until two row counts in recent use have enough samples.
  std::optional<Cost> cost() const;
  // Whether steps of `rows` rows have been timed often enough (recently or not).
  bool timed_enough(int64_t rows) const;

 private:
  bool stale(int64_t rows) const { return timed_steps_ - last_timed_[rows] > kStaleSteps; }

  double mean_seconds_[kMaxRows + 1] = {};  // decayed mean duration by row count
  int samples_[kMaxRows + 1] = {};
  int64_t last_timed_[kMaxRows + 1] = {};  // timed_steps_ when the row count last ran
  int64_t timed_steps_ = 0;
};

}  // namespace inferd::engine
