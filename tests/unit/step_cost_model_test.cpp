// StepCostModel: the line through the decode step times by row count; nothing until two widths
// are timed often enough; widths no longer in use leave the fit and start over.
#include "engine/step_cost_model.h"

#include <gtest/gtest.h>

namespace inferd::engine {
namespace {

// `times` steps of each width in [first, last], taking base + slope x rows seconds.
void time_steps(StepCostModel& m, int first, int last, double base, double slope, int times) {
  for (int i = 0; i < times; ++i)
    for (int r = first; r <= last; ++r) m.record(r, base + slope * r);
}

TEST(StepCostModel, FitsALineOnceTwoWidthsAreTimedEnough) {
  StepCostModel m;
  EXPECT_FALSE(m.cost());
  time_steps(m, 1, 1, 0.003, 0.0005, StepCostModel::kEnoughSamples);
  EXPECT_FALSE(m.cost()) << "one width is not a line";
  EXPECT_TRUE(m.timed_enough(1));
  EXPECT_FALSE(m.timed_enough(2));
  time_steps(m, 2, 4, 0.003, 0.0005, StepCostModel::kEnoughSamples - 1);
  EXPECT_FALSE(m.cost()) << "the other widths are not timed often enough yet";
  time_steps(m, 2, 4, 0.003, 0.0005, 1);
  const auto cost = m.cost();
  ASSERT_TRUE(cost);
  EXPECT_NEAR(cost->one_row, 0.0035, 1e-9);
  EXPECT_NEAR(cost->per_row, 0.0005, 1e-9);
  // Widths past kMaxRows, or none, are not kept.
  m.record(StepCostModel::kMaxRows + 1, 1.0);
  m.record(0, 1.0);
  EXPECT_NEAR(m.cost()->per_row, 0.0005, 1e-9);
}

TEST(StepCostModel, WidthsNoLongerInUseLeaveTheFit) {
  // A loaded period: 14-16 rows, compute-bound (a millisecond a row). Then one user decodes
  // with drafts at 1-3 rows, memory-bound (a tenth of that).
  StepCostModel m;
  time_steps(m, 14, 16, 0.001, 0.001, StepCostModel::kEnoughSamples);
  time_steps(m, 1, 3, 0.003, 0.0001, StepCostModel::kEnoughSamples);
  // Right after the load both regimes are recent: the line is steep.
  EXPECT_GT(m.cost()->per_row, 0.0005);
  // Once the full batch's widths have not run for kStaleSteps steps, the few-row line alone.
  time_steps(m, 1, 3, 0.003, 0.0001, StepCostModel::kStaleSteps / 3 + 1);
  const auto cost = m.cost();
  ASSERT_TRUE(cost);
  EXPECT_NEAR(cost->per_row, 0.0001, 1e-9);
  EXPECT_NEAR(cost->one_row, 0.0031, 1e-9);
}

TEST(StepCostModel, AStaleWidthStartsOver) {
  StepCostModel m;
  time_steps(m, 1, 3, 0.003, 0.001, StepCostModel::kEnoughSamples);
  // Width 3 stops; 1 and 2 go on, now faster (the machine got quieter).
  time_steps(m, 1, 2, 0.002, 0.001, StepCostModel::kStaleSteps);
  // Width 3 comes back at the new speed: its old mean is not blended in. Until it is timed
  // often enough again the fit is 1 and 2 alone.
  time_steps(m, 3, 3, 0.002, 0.001, StepCostModel::kEnoughSamples - 1);
  EXPECT_FALSE(m.timed_enough(3));
  time_steps(m, 1, 3, 0.002, 0.001, 1);
  const auto cost = m.cost();
  ASSERT_TRUE(cost);
  // (Widths 1 and 2 still carry a millionth of a second of their old means; width 3 blended
  // with its old mean would be 0.4 ms off.)
  EXPECT_NEAR(cost->one_row, 0.003, 1e-5);
  EXPECT_NEAR(cost->per_row, 0.001, 1e-5);
}

}  // namespace
}  // namespace inferd::engine
