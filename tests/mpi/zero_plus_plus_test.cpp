// ZeRO++ on ZeRO stage 3 (parallel/zero/sharded_parameters.h, parallel/zero/segment_collectives.h),
// with nodes simulated as blocks of 2 ranks (parallel.gpus_per_node): hpZ trains exactly the run of
// stage 3 (its node copies hold the very values the forward gathered); qwZ, qgZ and all three stay
// within 1e-2 of it per step, on pure data parallelism and composed with tp, pp, sequence
// parallelism, recompute and bf16; rank 0's bytes per step by kind and link class are the
// analytic count for each switch; and 200 steps on the fortunes corpus with all three reach a
// val_loss within 1% of stage 3's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "model/kernels/quantize_block.h"
#include "model/parameter_layout.h"
#include "parallel/zero/segment_collectives.h"
#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;
using testing::train;

const std::string kStage3 = " --set parallel.zero.stage=3 --set parallel.gpus_per_node=2";
const std::string kQwz = " --set parallel.zero.quantized_weights=true";
const std::string kHpz = " --set parallel.zero.hierarchical_partition=true";
const std::string kQgz = " --set parallel.zero.quantized_gradients=true";

class ZeroPlusPlus : public testing::LayoutSuite<ZeroPlusPlus> {
 public:
  static constexpr const char* kTag = "zero_plus_plus";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }
};

TEST_F(ZeroPlusPlus, HpzIsExactAndQuantisedSwitchesStayClose) {
  // dp 4 as 2 nodes × 2; (dp 2, tp 2) and (dp 2, pp 2) with nodes of 2 ranks: one dp rank per
  // node, so hpZ's node copy is the whole segment and qgZ's first hop is local.
  Layout bf16_pipeline{2, 1, 2, "gpipe"};
  bf16_pipeline.compute = "bf16";
  for (const Layout& layout :
       {Layout{4, 1, 1}, Layout{2, 2, 1, "1f1b", true, "full"}, bf16_pipeline}) {
    SCOPED_TRACE(layout.name());
    const std::string tag = layout.name();
    const std::string base = train(*dir_, layout, "pp3_" + tag, kStage3);
    const auto loss = metric(base, "loss");
    ASSERT_EQ(loss.size(), 20u);
    EXPECT_EQ(metric(train(*dir_, layout, "hpz_" + tag, kStage3 + kHpz), "loss"), loss);
    for (const auto& [name, switches] : {std::pair<std::string, std::string>{"qwz", kQwz},
                                         {"qgz", kQgz},
                                         {"all", kQwz + kHpz + kQgz}}) {
      SCOPED_TRACE(name);
      const std::string run = train(*dir_, layout, name + "_" + tag, kStage3 + switches);
      expect_close(metric(run, "loss"), loss, 0, "loss", 1e-2);
      if (name != "qwz") {
        // The quantised gradients do change the run (else the switch was not taken).
        EXPECT_NE(metric(run, "loss"), loss);
      }
    }
  }
}

// The start-up line once named neither the switches nor what hpZ's node copy costs.
TEST_F(ZeroPlusPlus, TheStartUpLineNamesTheSwitchesAndHpzsCopy) {
  const std::string command = testing::mpirun(4) + testing::bin("train") + " " + dir_->str() +
                              "/config.yaml --set run.name=startup --set train.steps=1" + kStage3 +
                              kQwz + kHpz + kQgz;
  const auto result = testing::run_command(command);
  ASSERT_EQ(result.status, 0) << result.output;
  EXPECT_NE(result.output.find("; ZeRO++: qwZ (int8 weight gathers) hpZ (a secondary weight copy "
                               "per node) qgZ (int4 gradient reduce-scatters), hpZ's copy "),
            std::string::npos)
      << result.output;
}

// Rank 0's comm_bytes in the metrics line of `step`: by kind, then link class.
using LinkBytes = std::map<std::string, double>;
std::map<std::string, LinkBytes> comm_bytes(const std::string& run, int step) {
  const std::string lines = testing::read_file(run + "/metrics.jsonl");
  const std::size_t at = lines.find("{\"step\": " + std::to_string(step) + ",");
  EXPECT_NE(at, std::string::npos);
  const std::size_t begin = lines.find("\"comm_bytes\": {", at);
  std::map<std::string, LinkBytes> result;
  std::size_t i = begin + 15;
  while (lines[i] == '"') {  // "kind": {"link": bytes, ...}
    const std::size_t kind_end = lines.find('"', i + 1);
    const std::string kind = lines.substr(i + 1, kind_end - i - 1);
    std::size_t j = lines.find('{', kind_end) + 1;
    while (lines[j] == '"') {
      const std::size_t link_end = lines.find('"', j + 1);
      const std::string link = lines.substr(j + 1, link_end - j - 1);
      char* end = nullptr;
      result[kind][link] = std::strtod(lines.c_str() + link_end + 3, &end);
      j = static_cast<std::size_t>(end - lines.c_str());
      if (lines[j] == ',') j += 2;
    }
    i = j + 1;  // past '}'
    if (lines[i] == ',') i += 2;
  }
  return result;
}

TEST_F(ZeroPlusPlus, BytesByLinkClassMatchTheAnalyticCount) {
  // dp 4, tp 1, pp 1, 2 nodes of 2 ranks: rank 0 is node 0, local 0; its dp ring successor is
  // rank 1 (same node), its node group {0, 1}, its qgZ inter-node group {0, 2}. Per step 2
  // micro-batches; rank 0's figures.
  const GptShape shape{4, 4, 32, 16, 64};
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  const std::size_t shard = ParameterLayout::padded_size(layout.total(), 4) / 4;
  auto piece = [&](const ParameterSegment& s, std::size_t r) {
    return intersect(s.range, {r * shard, (r + 1) * shard}).size();
  };
  auto packed = [](std::size_t elements, std::size_t block, QuantFormat format) {
    return static_cast<double>(quantized_shard_layout(elements, block, format).bytes);
  };
  const double micro_batches = 2;
  // Per micro-batch: forward gathers wte (embedding), wpe, h.0-3, lnf, wte (head); backward
  // gathers wte and lnf (head), h.3-0.
  struct Totals {
    double forward = 0, forward_int8 = 0, backward = 0, backward_node = 0;
    double reduce_scatter = 0, qgz_reduce_scatter = 0, qgz_intra = 0, qgz_inter = 0;
  } t;
  for (const ParameterSegment& s : layout.segments()) {
    const double size = static_cast<double>(s.range.size());
    const double uses_forward = s.name == "wte" ? 2 : 1;
    const double uses_backward = s.name == "wpe" ? 0 : 1;
    // Ring all-gather of uneven pieces: everything but the successor's piece (1).
    const double gather = 4 * (size - static_cast<double>(piece(s, 1)));
    double int8 = 0;
    for (std::size_t r : {0, 2, 3})
      int8 += packed(piece(s, r), kWeightQuantBlock, QuantFormat::int8);
    // hpZ: the node copy is the segment cut evenly in 2; rank 0 sends its half to rank 1.
    const double node_half = static_cast<double>((s.range.size() + 1) / 2);
    t.forward += uses_forward * gather;
    t.forward_int8 += uses_forward * int8;
    t.backward += uses_backward * gather;
    t.backward_node += uses_backward * 4 * node_half;
    // Reduce-scatter once a step: everything but rank 0's own piece; qgZ for segments of at
    // least one int4 block per dp rank: to rank 1 the pieces of owners 1 and 3 (hop 1), to
    // rank 2 the partial of owner 2 (hop 2).
    const double plain = 4 * (size - static_cast<double>(piece(s, 0)));
    t.reduce_scatter += plain;
    if (s.range.size() >= 4 * kGradientQuantBlock) {
      t.qgz_intra += packed(piece(s, 1), kGradientQuantBlock, QuantFormat::int4) +
                     packed(piece(s, 3), kGradientQuantBlock, QuantFormat::int4);
      t.qgz_inter += packed(piece(s, 2), kGradientQuantBlock, QuantFormat::int4);
    } else {
      t.qgz_reduce_scatter += plain;
    }
  }
  ASSERT_GT(t.qgz_intra, 0);
  ASSERT_GT(t.qgz_reduce_scatter, 0);  // both paths taken
  struct Case {
    std::string name, switches;
    double gather_intra, reduce_scatter, all_to_all_intra, all_to_all_inter;
  };
  const double m = micro_batches;
  const Case cases[] = {
      {"zero3", "", m * (t.forward + t.backward), t.reduce_scatter, 0, 0},
      {"qwz", kQwz, m * (t.forward_int8 + t.backward), t.reduce_scatter, 0, 0},
      {"hpz", kHpz, m * (t.forward + t.backward_node), t.reduce_scatter, 0, 0},
      {"qgz", kQgz, m * (t.forward + t.backward), t.qgz_reduce_scatter, t.qgz_intra, t.qgz_inter},
      {"all", kQwz + kHpz + kQgz, m * (t.forward_int8 + t.backward_node), t.qgz_reduce_scatter,
       t.qgz_intra, t.qgz_inter},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string run = train(*dir_, Layout{4, 1, 1}, "bytes_" + c.name, kStage3 + c.switches);
    for (int step : {2, 20}) {
      SCOPED_TRACE("step " + std::to_string(step));
      auto bytes = comm_bytes(run, step);
      EXPECT_EQ(bytes["all_gather"]["intra_node"], c.gather_intra);
      EXPECT_EQ(bytes["all_gather"]["inter_node"], 0.0);
      EXPECT_EQ(bytes["reduce_scatter"]["intra_node"], c.reduce_scatter);
      EXPECT_EQ(bytes["all_to_all"]["intra_node"], c.all_to_all_intra);
      EXPECT_EQ(bytes["all_to_all"]["inter_node"], c.all_to_all_inter);
    }
  }
}

TEST(ZeroPlusPlusFortunes, TwoHundredStepsReachTheValLossOfStage3WithinOnePercent) {
  namespace fs = std::filesystem;
  TempDir dir("zero_plus_plus_fortunes");
  // The fortunes corpus (Debian's fortunes package, which the setup installs), tokenized here.
  const std::string files =
      testing::run_command(testing::source_dir() + "/scripts/fortunes.sh").output;
  ASSERT_FALSE(files.empty());
  std::string inputs;
  for (char c : files) inputs += c == '\n' ? ' ' : c;
  const auto tokenized =
      testing::run_command(testing::bin("tokenize") + " --input " + inputs + " --out " + dir.str() +
                           "/data --vocab-size 1024" + " --val-fraction 0.05 --threads 2");
  ASSERT_EQ(tokenized.status, 0) << tokenized.output;
  std::ofstream(dir / "config.yaml")
      << "run: {name: base, dir: " << dir.str() << "/runs, seed: 7}\n"
      << "model: {n_layer: 2, n_head: 4, d_model: 128, seq_len: 64, vocab_size: 1024}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "optimizer: {lr: 2.0e-3, min_lr: 3.0e-4, warmup_steps: 20}\n"
      << "train: {steps: 200, global_batch: 16, micro_batch: 2, eval_every: 200, "
         "eval_tokens: 16384, log_every: 50}\n"
      << "checkpoint: {every: 0, keep: 0}\n";
  const std::string base = train(dir, Layout{4, 1, 1}, "zero3", kStage3);
  const std::string plus =
      train(dir, Layout{4, 1, 1}, "zero_plus_plus", kStage3 + kQwz + kHpz + kQgz);
  const auto base_val = metric(base, "val_loss"), plus_val = metric(plus, "val_loss");
  ASSERT_EQ(base_val.size(), 1u);
  ASSERT_EQ(plus_val.size(), 1u);
  const double gap = std::abs(plus_val[0] - base_val[0]) / base_val[0];
  std::printf("val_loss after 200 steps: stage 3 %.4f, with qwZ + hpZ + qgZ %.4f (gap %.3f%%)\n",
              base_val[0], plus_val[0], 100 * gap);
  EXPECT_LT(gap, 0.01);
}

}  // namespace
}  // namespace strata
