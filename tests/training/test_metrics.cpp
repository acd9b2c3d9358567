// Metrics reduced with the step: sums and means of per-rank values, read by
// the step (not at submission), carried by the updating call of an
// accumulation cycle only, and refused arguments.
#include "training/training_model.hpp"

namespace {

using training::Model;

TEST(Metrics, SumAndMeanAcrossRanks) {
  Model m(DMUON_OPTIONS_INIT);
  const int world = m.world, rank = m.rank;
  double values[3] = {1.0 + rank, 10.0 * rank, -0.5};
  ASSERT_EQ(dmuon_metrics_submit(m.opt, 3, values, DMUON_METRICS_SUM), DMUON_SUCCESS);
  values[2] = 0.25 * (rank + 1);  // the step reads the values, not the submission
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS) << dmuon_context_last_error(m.ctx);
  double out[3] = {0, 0, 0};
  ASSERT_EQ(dmuon_metrics_get(m.opt, 3, out), DMUON_SUCCESS);
  double want[3] = {0, 0, 0};
  for (int r = 0; r < world; ++r) want[0] += 1.0 + r, want[1] += 10.0 * r, want[2] += 0.25 * (r + 1);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(out[i], want[i]) << "sum " << i;

  const double loss = 2.0 * rank + 1.0;
  ASSERT_EQ(dmuon_metrics_submit(m.opt, 1, &loss, DMUON_METRICS_MEAN), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_metrics_get(m.opt, 1, out), DMUON_SUCCESS);
  EXPECT_DOUBLE_EQ(out[0], static_cast<double>(world));  // mean of 1, 3, 5, ...
  EXPECT_EQ(dmuon_metrics_get(m.opt, 2, out), DMUON_ERR_INVALID_VALUE) << "only one value was reduced";

  // A step without a submission keeps the last reduced values.
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  out[0] = 0;
  ASSERT_EQ(dmuon_metrics_get(m.opt, 1, out), DMUON_SUCCESS);
  EXPECT_DOUBLE_EQ(out[0], static_cast<double>(world));
}

TEST(Metrics, CarriedByTheUpdatingCallOfACycle) {
  Model m(DMUON_OPTIONS_INIT);
  ASSERT_EQ(dmuon_set_grad_accumulation(m.opt, 2), DMUON_SUCCESS);
  const double one = 1.0;
  double out = 0;
  ASSERT_EQ(dmuon_metrics_submit(m.opt, 1, &one, DMUON_METRICS_SUM), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);  // a micro-batch: nothing reduced yet
  EXPECT_EQ(dmuon_metrics_get(m.opt, 1, &out), DMUON_ERR_NOT_FOUND);
  ASSERT_EQ(dmuon_step(m.opt), DMUON_SUCCESS);
  ASSERT_EQ(dmuon_metrics_get(m.opt, 1, &out), DMUON_SUCCESS);
  EXPECT_DOUBLE_EQ(out, static_cast<double>(m.world));
}

TEST(Metrics, RefusedArguments) {
  Model m(DMUON_OPTIONS_INIT);
  double v[DMUON_MAX_METRICS + 1] = {};
  EXPECT_EQ(dmuon_metrics_submit(m.opt, 0, v, DMUON_METRICS_SUM), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_metrics_submit(m.opt, DMUON_MAX_METRICS + 1, v, DMUON_METRICS_SUM), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_metrics_submit(m.opt, 1, v, 7), DMUON_ERR_INVALID_VALUE);
  EXPECT_EQ(dmuon_metrics_submit(m.opt, 1, nullptr, DMUON_METRICS_SUM), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_metrics_get(m.opt, 1, v), DMUON_ERR_NOT_FOUND);
  EXPECT_EQ(dmuon_metrics_get(m.opt, 1, nullptr), DMUON_ERR_NULL_POINTER);
  EXPECT_EQ(dmuon_metrics_submit(nullptr, 1, v, DMUON_METRICS_SUM), DMUON_ERR_NULL_HANDLE);
}

}  // namespace
