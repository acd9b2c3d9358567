// The per-step gradient marks: a missing gradient lasts one step, an external
// buffer until it is cleared, and the structure hash tells mark sets apart
// (a replayed step graph is re-captured exactly when it changes).
#include <gtest/gtest.h>

#include "core/grad_marks.hpp"

using dmuon::GradMarks;

namespace {

TEST(GradMarks, NoMarksByDefaultAndHashZero) {
  GradMarks m;
  EXPECT_FALSE(m.any());
  EXPECT_TRUE(m.has_grad(0));
  EXPECT_TRUE(m.has_grad(12345));
  EXPECT_EQ(m.external(7), nullptr);
  EXPECT_EQ(m.hash(), 0u);
  m.set_external(3, nullptr);  // clearing what was never set marks nothing
  EXPECT_FALSE(m.any());
}

TEST(GradMarks, NoGradLastsOneStep) {
  GradMarks m;
  m.mark_no_grad(4);
  m.mark_no_grad(4);  // twice is once
  EXPECT_TRUE(m.any());
  EXPECT_FALSE(m.has_grad(4));
  EXPECT_TRUE(m.has_grad(3));
  const uint64_t h = m.hash();
  EXPECT_NE(h, 0u);
  m.step_done();
  EXPECT_FALSE(m.any());
  EXPECT_TRUE(m.has_grad(4));
  EXPECT_EQ(m.hash(), 0u);
  m.mark_no_grad(4);
  EXPECT_EQ(m.hash(), h) << "the same marks in another step: the same structure";
}

TEST(GradMarks, ExternalStaysUntilCleared) {
  GradMarks m;
  float a = 0, b = 0;
  m.set_external(2, &a);
  m.step_done();
  EXPECT_TRUE(m.any());
  EXPECT_EQ(m.external(2), &a);
  EXPECT_TRUE(m.has_grad(2));
  const uint64_t ha = m.hash();
  m.set_external(2, &b);
  EXPECT_NE(m.hash(), ha) << "another buffer is another copy in the step";
  m.set_external(2, nullptr);
  EXPECT_FALSE(m.any());
  EXPECT_EQ(m.hash(), 0u);
}

TEST(GradMarks, HashTellsWhichParameter) {
  GradMarks x, y;
  x.mark_no_grad(1);
  y.mark_no_grad(2);
  EXPECT_NE(x.hash(), y.hash());
  float g = 0;
  x.step_done();
  x.set_external(1, &g);
  y.step_done();
  y.mark_no_grad(1);
  EXPECT_NE(x.hash(), y.hash()) << "no gradient and an external one for the same parameter";
}

}  // namespace
