// Context parallelism (parallel.cp, docs/ARCHITECTURE.md §2 "cp") on the layouts the CPU backend
// runs: a 4-layer model with sequences of 16 tokens trains one process's run (loss and val_loss
// per step within 1e-4 relative, fp32) with every sequence split over cp 2 and 4 ranks, its K/V
// travelling by ring or all_gather, alone and with dp, tp (with and without sequence
// parallelism) and pp, for learned positions and the Llama block's rotary ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;

class ContextLayouts : public testing::LayoutSuite<ContextLayouts> {
 public:
  static constexpr const char* kTag = "context_layouts";
  static constexpr int kHeads = 4;
  static Layout reference() { return {}; }
};

// dp, tp, pp, cp (and its K/V's way).
Layout with_cp(Layout layout, int cp, const std::string& comm = "ring") {
  layout.cp = cp;
  layout.cp_comm = comm;
  return layout;
}

TEST_F(ContextLayouts, ContextRanksTrainTheRunOfOneProcess) {
  const auto loss = metric(reference_dir_, "loss"), val_loss = metric(reference_dir_, "val_loss");
  ASSERT_EQ(loss.size(), 20u);
  for (const Layout& layout :
       {with_cp({}, 2), with_cp({}, 2, "all_gather"), with_cp({}, 4), with_cp({2, 1, 1}, 2),
        with_cp({1, 2, 1}, 2), with_cp({1, 2, 1, "1f1b", true}, 2, "all_gather"),
        with_cp({1, 1, 2}, 2)}) {
    SCOPED_TRACE(layout.name());
    const std::string trained = run(layout, layout.name());
    expect_close(metric(trained, "loss"), loss, 0, "loss");
    expect_close(metric(trained, "val_loss"), val_loss, 0, "val_loss");
  }
}

}  // namespace
}  // namespace strata
