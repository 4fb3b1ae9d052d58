// Pipeline schedules as data: for every (schedule, stages, micro-batches) the instruction lists run
// each micro-batch forward then backward exactly once per stage, every transfer meets its mirror
// in order, the lock-step simulation finishes in 2(m + p - 1) slots (bubble (p - 1)/(m + p - 1)),
// 1F1B holds min(p - s, m) micro-batches of activations against GPipe's m; bad arguments and
// broken programs are rejected with messages that say what is wrong.
#include "parallel/pipeline/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "model/core/error.h"

namespace strata {
namespace {

using Kind = PipelineOpKind;

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

// The message of the Error that `action` throws; fails the test when nothing is thrown.
template <class Action>
std::string error_of(Action action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

std::string simulation_error(const PipelineProgram& program, int micro_batches) {
  return error_of([&] { simulate_pipeline(program, micro_batches); });
}

// ---------------------------------------------------------------------------------------------
// Properties over the whole grid of layouts

using Layout = std::tuple<PipelineSchedule, int, int>;  // kind, stages, micro-batches

class EveryLayout : public ::testing::TestWithParam<Layout> {
 protected:
  PipelineSchedule kind() const { return std::get<0>(GetParam()); }
  int stages() const { return std::get<1>(GetParam()); }
  int micro_batches() const { return std::get<2>(GetParam()); }
  PipelineProgram program() const {
    return make_pipeline_schedule(kind(), stages(), micro_batches());
  }
};

TEST_P(EveryLayout, EachMicroBatchIsForwardedThenBackwardedOncePerStage) {
  const PipelineProgram lists = program();
  ASSERT_EQ(static_cast<int>(lists.size()), stages());
  for (int stage = 0; stage < stages(); ++stage) {
    std::map<int, std::vector<std::size_t>> forwards, backwards;  // mb -> positions in the list
    const auto& ops = lists[static_cast<std::size_t>(stage)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind == Kind::forward) forwards[ops[i].micro_batch].push_back(i);
      if (ops[i].kind == Kind::backward) backwards[ops[i].micro_batch].push_back(i);
    }
    for (int mb = 0; mb < micro_batches(); ++mb) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " mb " + std::to_string(mb));
      ASSERT_EQ(forwards[mb].size(), 1u);
      ASSERT_EQ(backwards[mb].size(), 1u);
      EXPECT_LT(forwards[mb][0], backwards[mb][0]);
    }
    EXPECT_EQ(forwards.size(), static_cast<std::size_t>(micro_batches()));
    EXPECT_EQ(backwards.size(), static_cast<std::size_t>(micro_batches()));
  }
}

TEST_P(EveryLayout, EndStagesTalkOnlyInward) {
  const PipelineProgram lists = program();
  for (const PipelineOp& op : lists.front()) EXPECT_NE(pipeline_op_peer_offset(op.kind), -1);
  for (const PipelineOp& op : lists.back()) EXPECT_NE(pipeline_op_peer_offset(op.kind), +1);
}

// Independent of the simulator: across each stage boundary the micro-batches sent equal the
// micro-batches received, in order, and the k-th transfer on each side mirrors the other's.
TEST_P(EveryLayout, EverySendMeetsItsReceiveInOrder) {
  const PipelineProgram lists = program();
  for (int lower = 0; lower + 1 < stages(); ++lower) {
    SCOPED_TRACE("boundary " + std::to_string(lower) + "|" + std::to_string(lower + 1));
    std::vector<int> activations_sent, activations_received, grads_sent, grads_received;
    std::vector<PipelineOp> up, down;  // transfers of the lower / upper stage over the boundary
    for (const PipelineOp& op : lists[static_cast<std::size_t>(lower)]) {
      if (pipeline_op_peer_offset(op.kind) != +1) continue;
      up.push_back(op);
      if (op.kind == Kind::send_activation) activations_sent.push_back(op.micro_batch);
      if (op.kind == Kind::recv_grad) grads_received.push_back(op.micro_batch);
      if (op.kind == Kind::send_activation_recv_grad) {
        activations_sent.push_back(op.micro_batch);
        grads_received.push_back(op.recv_micro_batch);
      }
    }
    for (const PipelineOp& op : lists[static_cast<std::size_t>(lower + 1)]) {
      if (pipeline_op_peer_offset(op.kind) != -1) continue;
      down.push_back(op);
      if (op.kind == Kind::recv_activation) activations_received.push_back(op.micro_batch);
      if (op.kind == Kind::send_grad) grads_sent.push_back(op.micro_batch);
      if (op.kind == Kind::send_grad_recv_activation) {
        grads_sent.push_back(op.micro_batch);
        activations_received.push_back(op.recv_micro_batch);
      }
    }
    EXPECT_EQ(activations_sent, activations_received);
    EXPECT_EQ(grads_sent, grads_received);
    EXPECT_EQ(activations_sent.size(), static_cast<std::size_t>(micro_batches()));
    EXPECT_EQ(grads_sent.size(), static_cast<std::size_t>(micro_batches()));
    ASSERT_EQ(up.size(), down.size());
    for (std::size_t k = 0; k < up.size(); ++k) {
      SCOPED_TRACE(to_string(up[k]) + " vs " + to_string(down[k]));
      switch (up[k].kind) {
        case Kind::send_activation:
          EXPECT_EQ(down[k].kind, Kind::recv_activation);
          break;
        case Kind::recv_grad:
          EXPECT_EQ(down[k].kind, Kind::send_grad);
          break;
        case Kind::send_activation_recv_grad:
          EXPECT_EQ(down[k].kind, Kind::send_grad_recv_activation);
          EXPECT_EQ(down[k].recv_micro_batch, up[k].micro_batch);
          break;
        default:
          ADD_FAILURE() << "not a transfer to the next stage";
      }
      EXPECT_EQ(up[k].recv_micro_batch == -1 ? up[k].micro_batch : up[k].recv_micro_batch,
                down[k].micro_batch);
    }
  }
}

// With forward = backward = 1 slot and free communication, both schedules are optimal for their
// class: the first stage idles p-1 slots before its first backward can return and the last stage
// idles p-1 slots before its first forward arrives, so every stage is busy 2m of 2(m + p - 1)
// slots and the bubble is (p - 1)/(m + p - 1).
TEST_P(EveryLayout, SimulationFinishesInTwiceMPlusPMinusOneSlots) {
  const int p = stages(), m = micro_batches();
  const PipelineStats stats = simulate_pipeline(program(), m);
  EXPECT_EQ(stats.makespan, 2 * (m + p - 1));
  ASSERT_EQ(static_cast<int>(stats.busy_slots.size()), p);
  for (int busy : stats.busy_slots) EXPECT_EQ(busy, 2 * m);
  EXPECT_DOUBLE_EQ(stats.bubble_fraction,
                   static_cast<double>(p - 1) / static_cast<double>(m + p - 1));
}

TEST_P(EveryLayout, ActivationMemoryIsBoundedByTheSchedule) {
  const int p = stages(), m = micro_batches();
  const PipelineStats stats = simulate_pipeline(program(), m);
  ASSERT_EQ(static_cast<int>(stats.max_activations_held.size()), p);
  for (int stage = 0; stage < p; ++stage) {
    const int expected = kind() == PipelineSchedule::gpipe ? m : std::min(p - stage, m);
    EXPECT_EQ(stats.max_activations_held[static_cast<std::size_t>(stage)], expected)
        << "stage " << stage;
  }
}

// Test names allow only [A-Za-z0-9_], so "1f1b" is spelled out.
std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  const auto [kind, stages, micro_batches] = info.param;
  return std::string(kind == PipelineSchedule::gpipe ? "gpipe" : "one_f_one_b") + "_p" +
         std::to_string(stages) + "_m" + std::to_string(micro_batches);
}

INSTANTIATE_TEST_SUITE_P(
    PipelineSchedule, EveryLayout,
    ::testing::Combine(::testing::Values(PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b),
                       ::testing::Values(1, 2, 3, 4, 8), ::testing::Values(1, 2, 3, 4, 8, 16)),
    layout_name);

// ---------------------------------------------------------------------------------------------
// The exact lists of a small case, as a reader would draw them

PipelineOp op(Kind kind, int micro_batch, int recv_micro_batch = -1) {
  return PipelineOp{kind, micro_batch, recv_micro_batch};
}

TEST(PipelineSchedule, OneFOneBOnTwoStagesPairsTheSteadyStateTransfers) {
  const PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::one_f_one_b, 2, 3);
  const std::vector<PipelineOp> first{op(Kind::forward, 0),
                                      op(Kind::send_activation, 0),  // warm-up
                                      op(Kind::forward, 1),
                                      op(Kind::send_activation_recv_grad, 1, 0),
                                      op(Kind::backward, 0),
                                      op(Kind::forward, 2),
                                      op(Kind::send_activation_recv_grad, 2, 1),
                                      op(Kind::backward, 1),
                                      op(Kind::recv_grad, 2),  // cool-down
                                      op(Kind::backward, 2)};
  const std::vector<PipelineOp> last{op(Kind::recv_activation, 0),
                                     op(Kind::forward, 0),
                                     op(Kind::backward, 0),
                                     op(Kind::send_grad_recv_activation, 0, 1),
                                     op(Kind::forward, 1),
                                     op(Kind::backward, 1),
                                     op(Kind::send_grad_recv_activation, 1, 2),
                                     op(Kind::forward, 2),
                                     op(Kind::backward, 2),
                                     op(Kind::send_grad, 2)};
  EXPECT_EQ(lists, (PipelineProgram{first, last}));
}

TEST(PipelineSchedule, GpipeRunsBackwardsInReverseOrder) {
  const PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 2, 2);
  const std::vector<PipelineOp> first{op(Kind::forward, 0),   op(Kind::send_activation, 0),
                                      op(Kind::forward, 1),   op(Kind::send_activation, 1),
                                      op(Kind::recv_grad, 1), op(Kind::backward, 1),
                                      op(Kind::recv_grad, 0), op(Kind::backward, 0)};
  const std::vector<PipelineOp> last{op(Kind::recv_activation, 0), op(Kind::forward, 0),
                                     op(Kind::recv_activation, 1), op(Kind::forward, 1),
                                     op(Kind::backward, 1),        op(Kind::send_grad, 1),
                                     op(Kind::backward, 0),        op(Kind::send_grad, 0)};
  EXPECT_EQ(lists, (PipelineProgram{first, last}));
}

TEST(PipelineSchedule, OneFOneBWithMoreMicroBatchesThanStagesBeatsGpipeOnMemoryOnly) {
  const PipelineStats gpipe =
      simulate_pipeline(make_pipeline_schedule(PipelineSchedule::gpipe, 4, 16), 16);
  const PipelineStats one_f_one_b =
      simulate_pipeline(make_pipeline_schedule(PipelineSchedule::one_f_one_b, 4, 16), 16);
  EXPECT_EQ(gpipe.makespan, one_f_one_b.makespan);
  EXPECT_EQ(gpipe.max_activations_held, std::vector<int>(4, 16));
  EXPECT_EQ(one_f_one_b.max_activations_held, (std::vector<int>{4, 3, 2, 1}));
}

// ---------------------------------------------------------------------------------------------
// Arguments and names

TEST(PipelineSchedule, ParsesTheConfigNames) {
  EXPECT_EQ(parse_pipeline_schedule("gpipe"), PipelineSchedule::gpipe);
  EXPECT_EQ(parse_pipeline_schedule("1f1b"), PipelineSchedule::one_f_one_b);
  for (PipelineSchedule kind : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    EXPECT_EQ(parse_pipeline_schedule(pipeline_schedule_name(kind)), kind);
  const std::string message = error_of([] { parse_pipeline_schedule("zb"); });
  EXPECT_CONTAINS(message, "unknown pipeline schedule 'zb'");
  EXPECT_CONTAINS(message, "1f1b or gpipe");
  EXPECT_CONTAINS(error_of([] { parse_pipeline_schedule("1F1B"); }), "'1F1B'");
}

TEST(PipelineSchedule, RejectsBadSizes) {
  for (PipelineSchedule kind : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    EXPECT_CONTAINS(error_of([&] { make_pipeline_schedule(kind, 0, 4); }),
                    "stages must be at least 1, got 0");
    EXPECT_CONTAINS(error_of([&] { make_pipeline_schedule(kind, -2, 4); }),
                    "stages must be at least 1, got -2");
    EXPECT_CONTAINS(error_of([&] { make_pipeline_schedule(kind, 2, 0); }),
                    "micro_batches must be at least 1, got 0");
  }
  EXPECT_CONTAINS(simulation_error({}, 1), "no stages");
  EXPECT_CONTAINS(simulation_error(make_pipeline_schedule(PipelineSchedule::gpipe, 2, 2), 0),
                  "micro_batches must be at least 1, got 0");
}

// ---------------------------------------------------------------------------------------------
// Broken programs the simulator must catch

// Splitting 1F1B's paired exchanges into "send, then receive" on both sides is the classic
// deadlock: each stage blocks in its send while the other also sends.
TEST(PipelineSimulator, DetectsTheDeadlockOfUnpairedExchanges) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::one_f_one_b, 2, 4);
  for (auto& ops : lists) {
    std::vector<PipelineOp> split;
    for (const PipelineOp& o : ops) {
      if (o.kind == Kind::send_activation_recv_grad) {
        split.push_back(op(Kind::send_activation, o.micro_batch));
        split.push_back(op(Kind::recv_grad, o.recv_micro_batch));
      } else if (o.kind == Kind::send_grad_recv_activation) {
        split.push_back(op(Kind::send_grad, o.micro_batch));
        split.push_back(op(Kind::recv_activation, o.recv_micro_batch));
      } else {
        split.push_back(o);
      }
    }
    ops = split;
  }
  const std::string message = simulation_error(lists, 4);
  EXPECT_CONTAINS(message, "stage 0 op 3 (send_activation(mb 1))");
  EXPECT_CONTAINS(message, "stage 1 op 3 (send_grad(mb 0))");
  EXPECT_CONTAINS(message, "do not match");
}

TEST(PipelineSimulator, DetectsSwappedReceiveAndSend) {
  // Stage 1 of 3 receives its gradient before sending its activation: it waits on stage 2, which
  // waits for that activation.
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 3, 2);
  auto& middle = lists[1];
  const auto send = std::find(middle.begin(), middle.end(), op(Kind::send_activation, 1));
  const auto recv = std::find(middle.begin(), middle.end(), op(Kind::recv_grad, 1));
  ASSERT_TRUE(send != middle.end() && recv != middle.end());
  std::iter_swap(send, recv);
  EXPECT_CONTAINS(simulation_error(lists, 2), "do not match");
}

TEST(PipelineSimulator, DetectsAMissingReceive) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 2, 3);
  auto& last = lists[1];
  last.erase(std::find(last.begin(), last.end(), op(Kind::recv_activation, 2)));
  EXPECT_CONTAINS(simulation_error(lists, 3),
                  "stage 1 op 4 (forward(mb 2)): its input activation was not received");
}

TEST(PipelineSimulator, DetectsASendNobodyReceives) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::one_f_one_b, 3, 3);
  lists[2].pop_back();  // stage 2's final send_grad
  EXPECT_CONTAINS(simulation_error(lists, 3),
                  "stage 1 op 12 (recv_grad(mb 2)) is unmatched: stage 2 has no ops left");
}

TEST(PipelineSimulator, DetectsAWrongMicroBatch) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 2, 3);
  auto& last = lists[1];
  std::find(last.begin(), last.end(), op(Kind::recv_activation, 1))->micro_batch = 2;
  const std::string message = simulation_error(lists, 3);
  EXPECT_CONTAINS(message, "send_activation(mb 1)");
  EXPECT_CONTAINS(message, "recv_activation(mb 2)");
  EXPECT_CONTAINS(message, "carry different micro-batches");
}

TEST(PipelineSimulator, DetectsTransfersOffTheEndsOfThePipeline) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 2, 1);
  lists[0].insert(lists[0].begin(), op(Kind::recv_activation, 0));
  EXPECT_CONTAINS(simulation_error(lists, 1),
                  "stage 0 op 0 (recv_activation(mb 0)): talks to stage -1, which does not exist");
  lists = make_pipeline_schedule(PipelineSchedule::gpipe, 2, 1);
  lists[1].push_back(op(Kind::send_activation, 0));
  EXPECT_CONTAINS(simulation_error(lists, 1), "talks to stage 2, which does not exist");
}

TEST(PipelineSimulator, DetectsDataFlowErrors) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 1, 2);
  lists[0].push_back(op(Kind::forward, 1));
  EXPECT_CONTAINS(simulation_error(lists, 2), "forwarded twice");

  lists = make_pipeline_schedule(PipelineSchedule::one_f_one_b, 1, 2);
  std::swap(lists[0][0], lists[0][1]);  // backward(0) before forward(0)
  EXPECT_CONTAINS(simulation_error(lists, 2), "stage 0 op 0 (backward(mb 0)): before its forward");

  lists = make_pipeline_schedule(PipelineSchedule::gpipe, 1, 2);
  lists[0][0].micro_batch = 5;
  EXPECT_CONTAINS(simulation_error(lists, 2), "micro-batch out of range [0, 2)");
}

// A micro-batch dropped consistently from every stage leaves a well-matched program; only the
// micro-batch count given to the simulator reveals it.
TEST(PipelineSimulator, DetectsAMicroBatchMissingEverywhere) {
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::gpipe, 3, 4);
  for (auto& ops : lists)
    std::erase_if(ops, [](const PipelineOp& o) { return o.micro_batch == 3; });
  EXPECT_NO_THROW(simulate_pipeline(lists, 3));
  EXPECT_CONTAINS(simulation_error(lists, 4), "stage 0 never runs the forward of micro-batch 3");
}

}  // namespace
}  // namespace strata
