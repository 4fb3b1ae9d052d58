// Pipeline schedules as data: for every (schedule, stages, micro-batches) the instruction lists run
// each micro-batch forward then backward exactly once per stage, every transfer meets its mirror
// in order, the lock-step simulation finishes in 2(m + p - 1) slots (bubble (p - 1)/(m + p - 1)),
// 1F1B holds min(p - s, m) micro-batches of activations against GPipe's m; bad arguments and
// broken programs are rejected with messages that say what is wrong. The generated-only schedules
// (interleaved, ZB-H1, ZB-H2, ZBV) run every chunk of every micro-batch's F, B and W exactly once,
// simulate without deadlock, stay within their memory bounds and cut the bubble by the measured
// amounts stated at each test.
#include "parallel/pipeline/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
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
  EXPECT_EQ(parse_pipeline_schedule("zb-h1"), PipelineSchedule::zb_h1);
  EXPECT_EQ(parse_pipeline_schedule("zb-h2"), PipelineSchedule::zb_h2);
  EXPECT_EQ(parse_pipeline_schedule("interleaved"), PipelineSchedule::interleaved);
  EXPECT_EQ(parse_pipeline_schedule("zbv"), PipelineSchedule::zbv);
  for (PipelineSchedule kind :
       {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1,
        PipelineSchedule::zb_h2, PipelineSchedule::interleaved, PipelineSchedule::zbv})
    EXPECT_EQ(parse_pipeline_schedule(pipeline_schedule_name(kind)), kind);
  const std::string message = error_of([] { parse_pipeline_schedule("zb"); });
  EXPECT_CONTAINS(message, "unknown pipeline schedule 'zb'");
  EXPECT_CONTAINS(message, "1f1b, gpipe, zb-h1, zb-h2, interleaved or zbv");
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

// `program` with every paired exchange split into "send, then receive".
PipelineProgram with_unpaired_exchanges(PipelineProgram program) {
  for (auto& ops : program) {
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
  return program;
}

// Splitting 1F1B's paired exchanges into "send, then receive" on both sides is the classic
// deadlock: each stage blocks in its send while the other also sends.
TEST(PipelineSimulator, DetectsTheDeadlockOfUnpairedExchanges) {
  const PipelineProgram lists =
      with_unpaired_exchanges(make_pipeline_schedule(PipelineSchedule::one_f_one_b, 2, 4));
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

// ---------------------------------------------------------------------------------------------
// Chunks, the split backward and the generated-only schedules (interleaved, ZB-H1, ZB-H2, ZBV)

TEST(PipelineSchedule, TheThreeArgumentFormIsTheSingleChunkCase) {
  for (PipelineSchedule kind : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b})
    for (int stages : {1, 2, 4, 8})
      for (int micro_batches : {1, 3, 8}) {
        const PipelineProgram program = make_pipeline_schedule(kind, stages, micro_batches, 1);
        EXPECT_EQ(program, make_pipeline_schedule(kind, stages, micro_batches));
        for (const auto& ops : program)
          for (const PipelineOp& o : ops) EXPECT_EQ(o.chunk, 0);
      }
}

TEST(PipelineSchedule, PrintsTheChunkOnlyWhenItIsNotTheFirst) {
  EXPECT_EQ(to_string(op(Kind::forward, 3)), "forward(mb 3)");
  EXPECT_EQ(to_string(PipelineOp{Kind::forward, 3, -1, 1}), "forward(mb 3, chunk 1)");
  EXPECT_EQ(to_string(PipelineOp{Kind::backward_input, 2, -1, 0}), "backward_input(mb 2)");
  EXPECT_EQ(to_string(PipelineOp{Kind::backward_weight, 2, -1, 3}),
            "backward_weight(mb 2, chunk 3)");
  EXPECT_EQ(to_string(PipelineOp{Kind::send_activation_recv_grad, 3, 1, 1}),
            "send_activation_recv_grad(send mb 3, recv mb 1, chunk 1)");
}

TEST(PipelineSchedule, ChunkPlacementsNumberTheVirtualStages) {
  const PipelineLayout looped{3, ChunkPlacement::looped}, v_shape{2, ChunkPlacement::v_shape};
  // Looped, p = 4: chunk c of rank s is virtual stage 4c + s; the last rank feeds rank 0.
  EXPECT_EQ(pipeline_virtual_stage(looped, 4, 3, 0), 3);
  EXPECT_EQ(pipeline_virtual_stage(looped, 4, 0, 1), 4);
  // V, p = 4: rank 0 holds the first (0) and the last (7) virtual stage; the V turns on rank 3.
  EXPECT_EQ(pipeline_virtual_stage(v_shape, 4, 0, 1), 7);
  EXPECT_EQ(pipeline_virtual_stage(v_shape, 4, 3, 0), 3);
  EXPECT_EQ(pipeline_virtual_stage(v_shape, 4, 3, 1), 4);
  for (const PipelineLayout& layout : {looped, v_shape})
    for (int stage = 0; stage < 4; ++stage)
      for (int chunk = 0; chunk < layout.chunks; ++chunk) {
        const StageChunk back =
            pipeline_stage_chunk(layout, 4, pipeline_virtual_stage(layout, 4, stage, chunk));
        EXPECT_EQ(back.stage, stage);
        EXPECT_EQ(back.chunk, chunk);
      }
}

using ChunkedLayout = std::tuple<PipelineSchedule, int, int, int>;  // kind, p, m, v

PipelineSimulation simulation_for(PipelineSchedule kind, int virtual_stages, PipelineCosts costs) {
  PipelineSimulation simulation;
  simulation.layout = pipeline_schedule_layout(kind, virtual_stages);
  simulation.costs = costs;
  simulation.nonblocking_sends = pipeline_schedule_needs_nonblocking_sends(kind);
  return simulation;
}

class EveryChunkedLayout : public ::testing::TestWithParam<ChunkedLayout> {
 protected:
  PipelineSchedule kind() const { return std::get<0>(GetParam()); }
  int stages() const { return std::get<1>(GetParam()); }
  int micro_batches() const { return std::get<2>(GetParam()); }
  int chunks() const { return std::get<3>(GetParam()); }
  PipelineProgram program() const {
    return make_pipeline_schedule(kind(), stages(), micro_batches(), chunks());
  }
};

// Counted from the lists themselves, independent of the simulator: per rank, chunk and
// micro-batch one forward, and either one fused backward or one B followed later by one W.
TEST_P(EveryChunkedLayout, EachChunkOfEachMicroBatchRunsForwardBAndWOnce) {
  const PipelineProgram lists = program();
  ASSERT_EQ(static_cast<int>(lists.size()), stages());
  for (int stage = 0; stage < stages(); ++stage) {
    std::map<std::pair<int, int>, std::vector<Kind>> seen;  // (chunk, mb) -> compute kinds
    for (const PipelineOp& o : lists[static_cast<std::size_t>(stage)])
      if (pipeline_op_peer_offset(o.kind) == 0) seen[{o.chunk, o.micro_batch}].push_back(o.kind);
    ASSERT_EQ(seen.size(), static_cast<std::size_t>(chunks() * micro_batches()));
    for (const auto& entry : seen) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " chunk " +
                   std::to_string(entry.first.first) + " mb " + std::to_string(entry.first.second));
      const std::vector<Kind> split{Kind::forward, Kind::backward_input, Kind::backward_weight};
      const std::vector<Kind> fused{Kind::forward, Kind::backward};
      EXPECT_EQ(entry.second, kind() == PipelineSchedule::interleaved ? fused : split);
    }
  }
}

TEST_P(EveryChunkedLayout, SimulatesWithoutDeadlockAndEveryStageDoesAllItsWork) {
  const PipelineCosts unit{1, 1, 1};
  const PipelineStats stats =
      simulate_pipeline(program(), micro_batches(), simulation_for(kind(), chunks(), unit));
  for (int busy : stats.busy_slots) EXPECT_EQ(busy, 3 * chunks() * micro_batches());
  EXPECT_GT(stats.makespan, 0);
}

// The paper's bound is on the peak over ranks: every rank of ZB-H1 may hold as many micro-batches
// as 1F1B's first rank, min(p, m), never more. (Per rank it is not 1F1B's: a later rank holds back
// W's to fill its bubbles, so it keeps up to p micro-batches where 1F1B's last rank keeps one.)
TEST_P(EveryChunkedLayout, ActivationsHeldStayWithinTheSchedulesBound) {
  const int p = stages(), m = micro_batches(), v = chunks();
  const PipelineStats stats =
      simulate_pipeline(program(), m, simulation_for(kind(), v, PipelineCosts{1, 1, 1}));
  const PipelineStats one_f_one_b =
      simulate_pipeline(make_pipeline_schedule(PipelineSchedule::one_f_one_b, p, m), m);
  const int one_f_one_b_peak = *std::max_element(one_f_one_b.max_activations_held.begin(),
                                                 one_f_one_b.max_activations_held.end());
  const int peak =
      *std::max_element(stats.max_activations_held.begin(), stats.max_activations_held.end());
  switch (kind()) {
    case PipelineSchedule::zb_h1:
      EXPECT_EQ(peak, one_f_one_b_peak);
      for (int held : stats.max_activations_held) EXPECT_LE(held, one_f_one_b_peak);
      break;
    case PipelineSchedule::zb_h2:  // up to 2p - 1 micro-batches in flight
      EXPECT_LE(peak, std::min(2 * p - 1, m));
      break;
    case PipelineSchedule::zbv:  // 2p half-size chunks: 1F1B's p micro-batches
      EXPECT_LE(peak, std::min(2 * p, 2 * m));
      break;
    default:  // interleaved: Megatron's warm-up, 2(p - s - 1) + (v - 1)p + 1 chunks on rank s
              // (all m·v when m == p, which is all warm-up)
      for (int stage = 0; stage < p; ++stage)
        EXPECT_LE(stats.max_activations_held[static_cast<std::size_t>(stage)],
                  m == p ? m * v : std::min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v));
  }
}

// Each chunk's model gets max_held_by_chunk slots: per rank, they are at least the chunks' share
// of the rank's peak and at most m each, and a program that needs a slot finds one.
TEST_P(EveryChunkedLayout, EachChunkHoldsAtMostItsSlots) {
  const int p = stages(), m = micro_batches(), v = chunks();
  const PipelineProgram lists = program();
  const PipelineStats stats =
      simulate_pipeline(lists, m, simulation_for(kind(), v, PipelineCosts{1, 1, 1}));
  ASSERT_EQ(static_cast<int>(stats.max_held_by_chunk.size()), p);
  for (int stage = 0; stage < p; ++stage) {
    const std::vector<int>& by_chunk = stats.max_held_by_chunk[static_cast<std::size_t>(stage)];
    ASSERT_EQ(static_cast<int>(by_chunk.size()), v);
    int sum = 0;
    for (int held : by_chunk) {
      EXPECT_GE(held, 1);
      EXPECT_LE(held, m);
      sum += held;
    }
    EXPECT_GE(sum, stats.max_activations_held[static_cast<std::size_t>(stage)]);
    // Replayed from the list: (chunk, mb) pairs forwarded and not yet through W never exceed it.
    std::vector<int> held(static_cast<std::size_t>(v), 0);
    for (const PipelineOp& op : lists[static_cast<std::size_t>(stage)]) {
      int& h = held[static_cast<std::size_t>(op.chunk)];
      if (op.kind == Kind::forward) {
        EXPECT_LE(++h, by_chunk[static_cast<std::size_t>(op.chunk)]);
      }
      if (op.kind == Kind::backward || op.kind == Kind::backward_weight) --h;
    }
  }
}

std::string chunked_layout_name(const ::testing::TestParamInfo<ChunkedLayout>& info) {
  std::string name = pipeline_schedule_name(std::get<0>(info.param));
  std::replace(name.begin(), name.end(), '-', '_');  // test names are identifiers
  return name + "_p" + std::to_string(std::get<1>(info.param)) + "_m" +
         std::to_string(std::get<2>(info.param)) + "_v" + std::to_string(std::get<3>(info.param));
}

std::vector<ChunkedLayout> chunked_layouts() {
  std::vector<ChunkedLayout> layouts;
  for (int p : {2, 4, 8}) {
    for (int m : {1, 2, 3, 8, 16, 24}) {
      layouts.emplace_back(PipelineSchedule::zb_h1, p, m, 1);
      layouts.emplace_back(PipelineSchedule::zb_h2, p, m, 1);
      layouts.emplace_back(PipelineSchedule::zbv, p, m, 2);
    }
    for (int groups : {1, 2, 4})
      for (int v : {2, 3, 4}) layouts.emplace_back(PipelineSchedule::interleaved, p, groups * p, v);
  }
  return layouts;
}

INSTANTIATE_TEST_SUITE_P(PipelineSchedule, EveryChunkedLayout,
                         ::testing::ValuesIn(chunked_layouts()), chunked_layout_name);

// Unit costs F = B = W = 1 (a fused backward 2). 1F1B idles 3(p - 1) slots per stage; ZB-H1 a
// third of that, p - 1, at 1F1B's peak memory: it ends at 3m + p - 1 once m >= p (p = 8, m = 16:
// bubble 0.113 against 0.304), as ZB-H2 does with more memory.
TEST(PipelineSchedule, ZbH1CutsTwoThirdsOfOneFOneBsBubbleAtUnitCosts) {
  const PipelineCosts unit{1, 1, 1};
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 4 * p}) {
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const PipelineStats one_f_one_b =
          simulate_pipeline(make_pipeline_schedule(PipelineSchedule::one_f_one_b, p, m), m,
                            simulation_for(PipelineSchedule::one_f_one_b, 1, unit));
      const PipelineStats zb_h1 =
          simulate_pipeline(make_pipeline_schedule(PipelineSchedule::zb_h1, p, m, 1), m,
                            simulation_for(PipelineSchedule::zb_h1, 1, unit));
      EXPECT_EQ(one_f_one_b.makespan, 3 * m + 3 * (p - 1));
      EXPECT_EQ(zb_h1.makespan, 3 * m + p - 1);
      for (int stage = 0; stage < p; ++stage)
        EXPECT_EQ(zb_h1.makespan - zb_h1.busy_slots[static_cast<std::size_t>(stage)], p - 1);
      EXPECT_LT(zb_h1.bubble_fraction, one_f_one_b.bubble_fraction);
    }
}

// ZB-H2 with unit costs reaches the lower bound 3m + p - 1 (the last stage cannot start before
// p - 1 forwards have passed) once m >= 2p - 1, and no stage idles between its first and last
// op: the bubble left is the ramp of the parallelogram (p = 8, m = 16: 0.127; 1F1B 0.304).
TEST(PipelineSchedule, ZbH2HasNoBubbleInsideTheSteadyState) {
  const PipelineCosts unit{1, 1, 1};
  for (int p : {2, 4, 8})
    for (int m : {2 * p - 1, 2 * p, 4 * p}) {
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const PipelineStats stats =
          simulate_pipeline(make_pipeline_schedule(PipelineSchedule::zb_h2, p, m, 1), m,
                            simulation_for(PipelineSchedule::zb_h2, 1, unit));
      EXPECT_EQ(stats.makespan, 3 * m + p - 1);
      EXPECT_EQ(stats.interior_idle_slots, std::vector<int>(static_cast<std::size_t>(p), 0));
    }
}

// ZBV with unit costs per chunk (a rank's two chunks make one 1F1B stage): 6m + p - 1 slots, so
// the p - 1 slots of ramp are half a stage-slot each, half ZB-H2's bubble at 1F1B's memory.
TEST(PipelineSchedule, ZbvHalvesTheRampAtOneFOneBsMemory) {
  const PipelineCosts unit{1, 1, 1};
  for (int p : {2, 4, 8})
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const PipelineStats stats =
          simulate_pipeline(make_pipeline_schedule(PipelineSchedule::zbv, p, m, 2), m,
                            simulation_for(PipelineSchedule::zbv, 2, unit));
      EXPECT_EQ(stats.makespan, 6 * m + p - 1);
      for (int held : stats.max_activations_held) EXPECT_LE(held, 2 * p);
    }
}

// Interleaving v chunks divides 1F1B's bubble by v (Narayanan et al.): with a forward and a
// backward of a whole stage v slots each, 1F1B idles 2v(p - 1) per stage; with v chunks of one
// slot each, interleaved idles 2(p - 1), measured on every stage (p = 8, m = 16, v = 4: bubble
// 0.099 against 0.304).
TEST(PipelineSchedule, InterleavedDividesOneFOneBsBubbleByTheChunks) {
  for (int p : {2, 4, 8})
    for (int v : {2, 3, 4})
      for (int m : {p, 2 * p, 4 * p}) {
        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " +
                     std::to_string(m));
        const PipelineStats one_f_one_b =
            simulate_pipeline(make_pipeline_schedule(PipelineSchedule::one_f_one_b, p, m), m,
                              simulation_for(PipelineSchedule::one_f_one_b, 1, {v, v, 0}));
        const PipelineStats interleaved =
            simulate_pipeline(make_pipeline_schedule(PipelineSchedule::interleaved, p, m, v), m,
                              simulation_for(PipelineSchedule::interleaved, v, {1, 1, 0}));
        for (int stage = 0; stage < p; ++stage) {
          const auto s = static_cast<std::size_t>(stage);
          const int idle = one_f_one_b.makespan - one_f_one_b.busy_slots[s];
          EXPECT_EQ(idle, 2 * v * (p - 1));
          EXPECT_EQ(interleaved.makespan - interleaved.busy_slots[s], idle / v)
              << "stage " << stage;
        }
      }
}

TEST(PipelineSchedule, RejectsChunkCountsAndMicroBatchesTheOrderCannotUse) {
  EXPECT_CONTAINS(error_of([] { make_pipeline_schedule(PipelineSchedule::zbv, 4, 8, 3); }),
                  "zbv: needs exactly 2 virtual stages per rank");
  EXPECT_CONTAINS(error_of([] { make_pipeline_schedule(PipelineSchedule::zbv, 4, 8, 1); }),
                  "got 1");
  const std::string message =
      error_of([] { make_pipeline_schedule(PipelineSchedule::interleaved, 4, 6, 2); });
  EXPECT_CONTAINS(message, "micro-batches must be a multiple of the pipeline stages");
  EXPECT_CONTAINS(message, "got 6 for 4 stages");
  EXPECT_CONTAINS(error_of([] { make_pipeline_schedule(PipelineSchedule::interleaved, 4, 8, 1); }),
                  "needs at least 2 virtual stages per rank, got 1");
  for (PipelineSchedule kind : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b,
                                PipelineSchedule::zb_h1, PipelineSchedule::zb_h2})
    EXPECT_CONTAINS(error_of([&] { make_pipeline_schedule(kind, 4, 8, 2); }),
                    "runs one chunk per rank, got 2 virtual stages");
  EXPECT_CONTAINS(error_of([] { make_pipeline_schedule(PipelineSchedule::zb_h2, 0, 8, 1); }),
                  "stages must be at least 1, got 0");
}

// What the non-blocking executor buys: 1F1B with its exchanges split into single transfers
// deadlocks under rendezvous (DetectsTheDeadlockOfUnpairedExchanges) but runs when sends queue.
TEST(PipelineSimulator, QueuedSendsRunWhatRendezvousDeadlocksOn) {
  const PipelineProgram lists =
      with_unpaired_exchanges(make_pipeline_schedule(PipelineSchedule::one_f_one_b, 2, 4));
  PipelineSimulation queued;
  queued.costs.backward_weight = 0;
  queued.nonblocking_sends = true;
  EXPECT_EQ(
      simulate_pipeline(lists, 4, queued).makespan,
      simulate_pipeline(make_pipeline_schedule(PipelineSchedule::one_f_one_b, 2, 4), 4).makespan);
}

TEST(PipelineSimulator, DetectsSplitBackwardAndChunkErrors) {
  PipelineSimulation split;
  split.nonblocking_sends = true;
  PipelineProgram lists = make_pipeline_schedule(PipelineSchedule::zb_h2, 2, 2, 1);
  auto& first = lists[0];
  const auto w = std::find(first.begin(), first.end(), op(Kind::backward_weight, 0));
  ASSERT_TRUE(w != first.end());
  first.erase(w);
  EXPECT_CONTAINS(error_of([&] { simulate_pipeline(lists, 2, split); }),
                  "stage 0 never runs the backward_weight of micro-batch 0");

  lists = make_pipeline_schedule(PipelineSchedule::zb_h2, 1, 1, 1);  // F, B, W
  std::swap(lists[0][1], lists[0][2]);
  EXPECT_CONTAINS(error_of([&] { simulate_pipeline(lists, 1, split); }),
                  "backward_weight(mb 0)): before its input gradient");

  // A receive whose send never comes waits forever, also with queued sends.
  lists = make_pipeline_schedule(PipelineSchedule::zb_h2, 2, 1, 1);
  std::erase_if(lists[0], [](const PipelineOp& o) { return o.kind == Kind::send_activation; });
  const std::string deadlock = error_of([&] { simulate_pipeline(lists, 1, split); });
  EXPECT_CONTAINS(deadlock, "deadlocks: ");
  EXPECT_CONTAINS(deadlock, "stage 1 op 0 (recv_activation(mb 0))");

  // The V's turn is a hand-over in place: a transfer between chunks of one rank is refused.
  PipelineSimulation v_shape = simulation_for(PipelineSchedule::zbv, 2, PipelineCosts{});
  lists = make_pipeline_schedule(PipelineSchedule::zbv, 2, 2, 2);
  lists[1].insert(lists[1].begin(), PipelineOp{Kind::send_activation, 0, -1, 0});
  EXPECT_CONTAINS(error_of([&] { simulate_pipeline(lists, 2, v_shape); }), "talks to its own rank");
  lists = make_pipeline_schedule(PipelineSchedule::zbv, 2, 2, 2);
  lists[0][0].chunk = 2;
  EXPECT_CONTAINS(error_of([&] { simulate_pipeline(lists, 2, v_shape); }),
                  "chunk out of range [0, 2)");
}

}  // namespace
}  // namespace strata
