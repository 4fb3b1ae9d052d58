// The layout search (plan/search.h) and the DiLoCo verdict (plan/diloco_verdict.h): every plan
// returned is a layout the trainer accepts, fitting plans come first, fastest first; a plan's
// overrides select it again; the schedules with several chunks per rank are candidates and win
// where the bubble dominates; a heavy head moves layers off the last stage; a model that fits
// nowhere is a "nothing fits" error naming the closest plan and what exceeds the limit; over a
// slow wide-area link DiLoCo wins past some H; long sequences that fit no rank are split over
// context-parallel ranks on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "plan/cluster.h"
#include "plan/config.h"
#include "plan/diloco_verdict.h"
#include "plan/search.h"
#include "tests/support/plan_support.h"

namespace strata {
namespace {

using testing::test_cluster;

// The test config in micro-batches of 2 sequences, 16 per step: a search small enough to stay
// quick in the sanitizer build.
Config model(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets = {"train.global_batch=16", "train.micro_batch=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return testing::planner_config(sets);
}

TEST(PlanSearch, PlansAreValidFittingFirstFastestFirst) {
  const ClusterSpec cluster = test_cluster(80);
  const std::vector<PlanCost> plans = search_layouts(model(), cluster, 4);
  ASSERT_GT(plans.size(), 50u);
  ASSERT_TRUE(plans.front().fits());
  for (std::size_t i = 1; i < plans.size(); ++i) {
    if (plans[i].fits()) {
      EXPECT_TRUE(plans[i - 1].fits());
      EXPECT_LE(plans[i - 1].time.seconds, plans[i].time.seconds);
    }
  }
  // Every plan's overrides select that same layout again, and it is priced the same.
  for (std::size_t i = 0; i < plans.size(); i += 17) {
    const Config again =
        parse_config(config_to_yaml(model()), "again", plans[i].layout.overrides());
    const PlanCost cost = cost_of(again, cluster, 4);
    EXPECT_EQ(cost.layout.name(), plans[i].layout.name());
    EXPECT_DOUBLE_EQ(cost.time.seconds, plans[i].time.seconds);
    EXPECT_EQ(cost.memory_bytes, plans[i].memory_bytes);
  }
  EXPECT_EQ(best_layout(model(), cluster, 4).layout.name(), plans.front().layout.name());
}

// On a cuda cluster an offloaded optimizer's state lives in host memory: the plan's device
// memory is the in-place plan's less that state (AdamW's 8 bytes per owned element).
TEST(PlanSearch, AnOffloadedStateLeavesTheDevicesMemory) {
  const ClusterSpec cluster = test_cluster(80);
  const PlanCost in_place = cost_of(model(), cluster, 1);
  const PlanCost host = cost_of(model({"optimizer.offload=host"}), cluster, 1);
  const std::size_t owned = ParameterLayout::padded_size(
      ParameterLayout::for_gpt(gpt_shape_of(model().model)).total(), 1);
  EXPECT_EQ(host.memory_bytes + 8 * owned, in_place.memory_bytes);
}

TEST(PlanSearch, ChunkedSchedulesAreCandidatesAndWinWhereTheBubbleDominates) {
  const ClusterSpec cluster = test_cluster(80);
  const std::vector<PlanCost> plans = search_layouts(model(), cluster, 4);
  std::set<std::pair<PipelineSchedule, int>> seen;
  for (const PlanCost& plan : plans) {
    const PlanLayout& l = plan.layout;
    if (l.pp > 1) seen.insert({l.schedule, l.virtual_stages});
    if (l.virtual_stages == 1) continue;
    // Within the trainer's rules: a layer per virtual stage, whole groups of pp micro-batches.
    EXPECT_LE(l.pp * l.virtual_stages, 8) << l.name();
    if (l.schedule == PipelineSchedule::interleaved) {
      EXPECT_EQ(16 / (l.micro_batch * l.dp) % l.pp, 0) << l.name();
    }
    EXPECT_NE(l.name().find(" v" + std::to_string(l.virtual_stages)), std::string::npos);
  }
  for (int v : {2, 3, 4}) EXPECT_TRUE(seen.contains({PipelineSchedule::interleaved, v})) << v;
  EXPECT_TRUE(seen.contains({PipelineSchedule::zbv, 2}));

  // Four stages, four micro-batches of 4 sequences: 1F1B idles 3/7 of the pipeline, so cutting
  // each stage into chunks is the fastest way to run that layout.
  const PlanCost* fastest = nullptr;
  for (const PlanCost& plan : plans) {
    const PlanLayout& l = plan.layout;
    if (l.pp == 4 && l.micro_batch == 4 && plan.fits() && !fastest) fastest = &plan;
  }
  ASSERT_NE(fastest, nullptr);
  EXPECT_GT(fastest->layout.virtual_stages, 1) << fastest->layout.name();

  // A chunked plan's overrides select it again.
  for (const PlanCost& plan : plans) {
    if (plan.layout.virtual_stages == 1) continue;
    const PlanCost again = cost_of(
        parse_config(config_to_yaml(model()), "again", plan.layout.overrides()), cluster, 4);
    EXPECT_EQ(again.layout.name(), plan.layout.name());
    EXPECT_DOUBLE_EQ(again.time.seconds, plan.time.seconds);
    EXPECT_EQ(again.memory_bytes, plan.memory_bytes);
    break;
  }
  // parallel.auto on a cuda cluster leaves them out (the CUDA backend runs one chunk per rank).
  SearchOptions one_chunk;
  one_chunk.virtual_stages = false;
  for (const PlanCost& plan : search_layouts(model(), cluster, 4, one_chunk))
    EXPECT_EQ(plan.layout.virtual_stages, 1) << plan.layout.name();
}

// Context parallelism is a candidate on the CPU backend (the only one it runs on) and nowhere
// else; it holds a rank's rows of each sequence, so where the long sequences of one rank do not
// fit and a cp layout's do, the best plan splits them.
TEST(PlanSearch, LongSequencesThatFitNoRankAreSplitOverContextRanks) {
  // One head and one layer: neither tp nor pp can split them, so only cp shares a sequence.
  const Config config = model({"model.seq_len=8192", "train.global_batch=4", "train.micro_batch=1",
                               "model.n_layer=1", "model.n_head=1"});
  for (const PlanCost& plan : search_layouts(config, test_cluster(80), 4))
    ASSERT_EQ(plan.layout.cp, 1) << plan.layout.name();
  ClusterSpec cpu = test_cluster(80);
  cpu.backend = ClusterBackend::cpu;
  std::size_t whole = SIZE_MAX, split = SIZE_MAX;
  for (const PlanCost& plan : search_layouts(config, cpu, 4))
    (plan.layout.cp == 1 ? whole : split) =
        std::min(plan.layout.cp == 1 ? whole : split, plan.memory_bytes);
  ASSERT_LT(split, whole);
  cpu.device.memory_gib = (split + whole) / 2.0 / (1024.0 * 1048576.0);
  const PlanCost best = best_layout(config, cpu, 4);
  EXPECT_TRUE(best.fits());
  EXPECT_GT(best.layout.cp, 1) << best.layout.name();
}

TEST(PlanSearch, AHeavyHeadTakesLayersOffTheLastStage) {
  // A vocabulary of 64k makes the head cost several layers: the split moves layers forward.
  const Config heavy = model({"model.vocab_size=65536"});
  bool seen = false;
  for (const PlanCost& plan : search_layouts(heavy, test_cluster(80), 4)) {
    if (plan.layout.pp != 2 || plan.layout.pp_layers.empty()) continue;
    EXPECT_GT(plan.layout.pp_layers[0], plan.layout.pp_layers[1]) << plan.layout.name();
    seen = true;
  }
  EXPECT_TRUE(seen) << "no two-stage plan was re-split";
}

TEST(PlanSearch, NothingFitsNamesTheClosestPlan) {
  const Config huge = model({"model.n_layer=8", "model.d_model=4096", "model.n_head=32"});
  try {
    best_layout(huge, test_cluster(1), 4);
    FAIL() << "a 1.6B-parameter model fitted 1 GiB devices";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("nothing fits"), std::string::npos) << message;
    EXPECT_NE(message.find("the closest is tp"), std::string::npos) << message;
    EXPECT_NE(message.find("optimizer state"), std::string::npos) << message;
    EXPECT_NE(message.find("over"), std::string::npos) << message;
  }
  // The closest plan needs the least memory of all; it splits or shards the model.
  const std::vector<PlanCost> plans = search_layouts(huge, test_cluster(1), 4);
  EXPECT_FALSE(plans.front().fits());
  for (const PlanCost& plan : plans) EXPECT_LE(plans.front().memory_bytes, plan.memory_bytes);
  EXPECT_TRUE(plans.front().layout.zero_stage == 3 || plans.front().layout.tp > 1 ||
              plans.front().layout.pp > 1)
      << plans.front().layout.name();
}

TEST(DilocoVerdict, ASlowLinkFavoursDiloco) {
  // Two sites of two devices joined by 1 Gb/s and 50 ms (as configs/clusters/h100_diloco_wan.yaml).
  ClusterSpec wan = test_cluster(80);
  wan.inter_worker = LinkSpec{0.125, 50000};
  const Config gpt =
      model({"model.n_layer=4", "model.d_model=768", "model.n_head=12", "model.vocab_size=50257",
             "model.seq_len=1024", "train.global_batch=16", "precision.compute=bf16"});
  const auto verdict = diloco_verdict(gpt, wan, 4);
  ASSERT_TRUE(verdict.has_value());
  EXPECT_EQ(verdict->workers, 2);
  EXPECT_GT(verdict->outer_sync_seconds, 1.0);  // ~300 MB of fp32 over 1 Gb/s
  EXPECT_GT(verdict->break_even_inner_steps, 1);
  EXPECT_GT(verdict->options.back().tokens_per_s, verdict->sync_tokens_per_s);
  EXPECT_LT(verdict->options.front().tokens_per_s, verdict->options.back().tokens_per_s);
  // One node: nothing to decide.
  EXPECT_FALSE(diloco_verdict(gpt, wan, 2).has_value());
}

}  // namespace
}  // namespace strata
