// parallel.auto end to end under mpirun: the trainer asks the planner for its layout, says what it
// chose, and trains with it; with the cluster measured at start-up (4 ranks) and with a cluster
// file whose small memory rules most layouts out (the chosen one's account then fits the limit);
// a cluster where nothing fits stops with one "nothing fits" error before anything is written;
// parallel.cluster without parallel.auto is refused. The `plan` tool prints its table, an
// explanation and the best plan's overrides, which `train` accepts and trains with, and writes
// them as a fragment; a bad cluster file is one error line. Its `--explain 1 --json true` line
// holds a layout's parameter count, memory account and bytes under metrics.jsonl's names, equal to
// what the run logs (the benchmarks in scripts/bench compare their runs with these figures).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/mpi/layout_runs.h"

namespace strata::testing {
namespace {

struct AutoRun {
  int status = 0;
  std::string output, run_dir;
};

AutoRun train_auto(const TempDir& dir, const std::string& name, const std::string& extra) {
  const std::string command = mpirun(4) + bin("train") + " " + dir.str() +
                              "/config.yaml --set parallel.auto=true --set run.name=" + name +
                              " --set train.steps=4 --set train.log_every=1" + extra;
  const auto result = run_command(command);
  return AutoRun{result.status, result.output, dir.str() + "/runs/" + name};
}

// The layout's (tp, pp, dp, cp) from the report ("tpT ppP [cpC [all_gather]] dpD ...") and from
// the trainer's own mesh line ("mesh tp T [x cp C (comm)] x dp D ... x pp P").
std::vector<int> chosen_layout(const std::string& report) {
  std::istringstream words(report);
  std::vector<int> axes(4, 1);  // tp, pp, dp, cp
  for (std::string word; words >> word;)
    for (const auto& [prefix, axis] :
         {std::pair{"tp", 0}, std::pair{"pp", 1}, std::pair{"dp", 2}, std::pair{"cp", 3}})
      if (word.starts_with(prefix) && word.size() > 2 && std::isdigit(word[2]))
        axes[static_cast<std::size_t>(axis)] = std::stoi(word.substr(2));
  return axes;
}
std::vector<int> mesh_layout(const std::string& line) {
  std::istringstream words(line);
  std::vector<int> axes(4, 1);
  for (std::string word, value; words >> word;)
    for (const auto& [name, axis] :
         {std::pair{"tp", 0}, std::pair{"pp", 1}, std::pair{"dp", 2}, std::pair{"cp", 3}})
      if (word == name && words >> value) axes[static_cast<std::size_t>(axis)] = std::stoi(value);
  return axes;
}

void expect_chosen_layout_runs(const AutoRun& run) {
  ASSERT_EQ(run.status, 0) << run.output;
  const std::size_t report = run.output.find("parallel.auto: tp");
  const std::size_t line = run.output.find("mesh tp ");
  ASSERT_NE(report, std::string::npos) << run.output;
  ASSERT_NE(line, std::string::npos) << run.output;
  const std::string report_line =
      run.output.substr(report + 15, run.output.find('\n', report) - report - 15);
  const std::string mesh_line = run.output.substr(line, run.output.find('|', line + 1) - line);
  EXPECT_EQ(chosen_layout(report_line), mesh_layout(mesh_line)) << report_line << "\n" << mesh_line;
  const auto losses = metric(run.run_dir, "loss");
  ASSERT_EQ(losses.size(), 4u);
  for (double loss : losses) EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(losses.back(), losses.front());
}

void write_cluster(const std::string& path, double memory_gib) {
  std::ofstream(path) << "name: tiny\nbackend: cpu\nnodes: 1\ndevices_per_node: 4\n"
                         "cores_per_node: 2\ndevice:\n  name: cpu\n  memory_gib: "
                      << memory_gib
                      << "\n  peak_tflops: {fp32: 0.1, bf16: 0.1, fp16: 0.1}\n"
                         "  memory_bandwidth_gbs: 10\n  sustained:\n"
                         "    matmul_tflops: {fp32: 0.1, bf16: 0.1, fp16: 0.1}\n"
                         "    attention_tflops: {fp32: 0.05, bf16: 0.05, fp16: 0.05}\n"
                         "    elementwise_gbs: 10\n    op_overhead_us: 0\n"
                         "links:\n  intra_node: {bandwidth_gbs: 5, latency_us: 5}\n"
                         "  inter_node: {bandwidth_gbs: 5, latency_us: 5}\n";
}

class PlanAuto : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("plan_auto");
    write_synthetic_dataset(*dir_ / "data", 64, 20000);
    write_layout_config(*dir_, 4);
  }
  static void TearDownTestSuite() { delete dir_; }
  static inline TempDir* dir_ = nullptr;
};

TEST_F(PlanAuto, MeasuredClusterChoosesALayoutThatTrains) {
  const AutoRun run = train_auto(*dir_, "measured", "");
  expect_chosen_layout_runs(run);
  EXPECT_NE(run.output.find("(measured at start-up)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("runner-up"), std::string::npos) << run.output;
}

TEST_F(PlanAuto, ClusterFileMemoryLimitIsRespected) {
  // The unsharded state of this model (4 layers, d 32, vocab 64: ~55k parameters) is about 0.9
  // MiB per rank; 0.3 MiB leaves only the sharded, split or recomputed layouts.
  const std::string cluster = dir_->str() + "/tiny.yaml";
  const double limit_gib = 0.3 / 1024;
  write_cluster(cluster, limit_gib);
  const AutoRun run = train_auto(*dir_, "limited", " --set parallel.cluster=" + cluster);
  expect_chosen_layout_runs(run);
  const std::string account = "\"memory_bytes\": {";
  double total = 0;
  for (const char* key :
       {"master_weights", "compute_weights", "gradients", "optimizer_state", "secondary_weights",
        "gathered_weights", "gradient_buckets", "activations", "communication"})
    total += logged(run.run_dir, 2, std::string("\"") + key + "\": ");
  EXPECT_GT(total, 0);
  EXPECT_LE(total, limit_gib * 1024 * 1048576) << run.output;
}

TEST_F(PlanAuto, NothingFitsStopsWithOneError) {
  const std::string cluster = dir_->str() + "/nothing.yaml";
  write_cluster(cluster, 1e-6);
  const AutoRun run = train_auto(*dir_, "nothing", " --set parallel.cluster=" + cluster);
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("error: nothing fits: no layout of this model fits 4 devices"),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("the closest is"), std::string::npos) << run.output;
  EXPECT_FALSE(std::filesystem::exists(run.run_dir)) << "a refused run wrote " << run.run_dir;
}

TEST_F(PlanAuto, ClusterWithoutAutoIsRefused) {
  const auto result = run_command(mpirun(1) + bin("train") + " " + dir_->str() +
                                  "/config.yaml --set parallel.cluster=x.yaml");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output.find("error: "), std::string::npos);
  EXPECT_NE(result.output.find("parallel.cluster"), std::string::npos) << result.output;
}

TEST_F(PlanAuto, PlanToolsBestPlanTrains) {
  const std::string cluster = dir_->str() + "/tool.yaml";
  write_cluster(cluster, 1);
  const std::string fragment = dir_->str() + "/best.yaml";
  const auto planned = run_command(bin("plan") + " " + dir_->str() + "/config.yaml --cluster " +
                                   cluster + " --world 4 --top 3 --explain 1 --out " + fragment);
  ASSERT_EQ(planned.status, 0) << planned.output;
  for (const char* part : {"layouts priced", "memory/device MiB", "best: tp", "time per stage",
                           "memory per stage", "communication of rank 0", "wrote "})
    EXPECT_NE(planned.output.find(part), std::string::npos) << part << "\n" << planned.output;
  const std::string text = read_file(fragment);
  EXPECT_NE(text.find("parallel:"), std::string::npos) << text;
  EXPECT_NE(text.find("micro_batch:"), std::string::npos) << text;
  // The printed command's overrides train.
  const std::size_t at = planned.output.find(" --set ");
  ASSERT_NE(at, std::string::npos);
  const std::string overrides = planned.output.substr(at, planned.output.find('\n', at) - at);
  const auto run = run_command(mpirun(4) + bin("train") + " " + dir_->str() + "/config.yaml" +
                               overrides + " --set run.name=planned --set train.steps=2");
  EXPECT_EQ(run.status, 0) << overrides << "\n" << run.output;
  // The fragment itself, merged after the config (it once failed: duplicate key `parallel`), trains
  // the same layout.
  const auto merged = run_command(mpirun(4) + bin("train") + " " + dir_->str() + "/config.yaml " +
                                  fragment + " --set run.name=fragment --set train.steps=2");
  EXPECT_EQ(merged.status, 0) << merged.output;
  EXPECT_EQ(read_file(dir_->str() + "/runs/fragment/metrics.jsonl").substr(0, 40),
            read_file(dir_->str() + "/runs/planned/metrics.jsonl").substr(0, 40));

  const auto bad = run_command(bin("plan") + " " + dir_->str() + "/config.yaml --cluster " +
                               dir_->str() + "/missing.yaml");
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(bad.output.rfind("error: ", 0), 0u) << bad.output;
}

// The JSON object (balanced braces) that follows `key` in `text`; empty when `key` is absent.
std::string object_after(const std::string& text, const std::string& key) {
  const std::size_t at = text.find(key);
  if (at == std::string::npos) return "";
  const std::size_t begin = text.find('{', at + key.size());
  int depth = 0;
  for (std::size_t i = begin; i < text.size(); ++i) {
    depth += text[i] == '{' ? 1 : text[i] == '}' ? -1 : 0;
    if (depth == 0) return text.substr(begin, i + 1 - begin);
  }
  return "";
}

TEST_F(PlanAuto, ExplainJsonHoldsTheRunsFigures) {
  const std::string cluster = dir_->str() + "/explain.yaml";
  write_cluster(cluster, 1);
  // Two simulated nodes of 2 ranks, so that both link classes carry bytes; ZeRO 2's per-segment
  // reduce-scatters and sharded state.
  const std::string layout =
      " --set parallel.dp=4 --set parallel.gpus_per_node=2 --set parallel.zero.stage=2"
      " --set train.steps=2 --set train.log_every=1";
  const auto planned =
      run_command(bin("plan") + " " + dir_->str() + "/config.yaml --cluster " + cluster +
                  " --world 4 --layout given --explain 1 --json true" + layout);
  ASSERT_EQ(planned.status, 0) << planned.output;
  const auto run = run_command(mpirun(4) + bin("train") + " " + dir_->str() + "/config.yaml" +
                               layout + " --set run.name=explained");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string metrics = read_file(dir_->str() + "/runs/explained/metrics.jsonl");
  const std::size_t step = metrics.find("{\"step\": 2,");
  ASSERT_NE(step, std::string::npos) << metrics;
  const std::string line = metrics.substr(step, metrics.find('\n', step) - step);
  const std::string explained = object_after(planned.output, "\"explain\": ");
  ASSERT_FALSE(explained.empty()) << planned.output;
  // wte 128 × 32 (the vocabulary of 64 padded to 128 rows), wpe 16 × 32, 4 blocks of
  // 12·32² + 13·32, lnf 2·32.
  EXPECT_NE(explained.find("\"parameters\": 55488,"), std::string::npos) << explained;
  for (const char* key : {"\"comm_bytes\": ", "\"comm_bytes_by_axis\": ", "\"comm_bytes_job\": "}) {
    EXPECT_FALSE(object_after(line, key).empty()) << key << " in " << line;
    EXPECT_EQ(object_after(explained, key), object_after(line, key)) << key;
  }
  EXPECT_NE(object_after(line, "\"comm_bytes_job\": ").find("\"inter_node\": "), std::string::npos);
  for (const char* field : {"\"master_weights\": ", "\"gradients\": ", "\"optimizer_state\": "}) {
    const std::string ours = object_after(explained, "\"memory_bytes_by_stage\": [");
    const std::string theirs = object_after(line, "\"memory_bytes\": ");
    const std::size_t a = ours.find(field), b = theirs.find(field);
    ASSERT_NE(a, std::string::npos) << field << " in " << ours;
    ASSERT_NE(b, std::string::npos) << field << " in " << theirs;
    EXPECT_EQ(std::stoull(ours.substr(a + std::string(field).size())),
              std::stoull(theirs.substr(b + std::string(field).size())))
        << field;
  }
  // Timings, under the names of the run's closing line: present on both sides (the bench
  // compares them; equal they are not).
  for (const char* key : {"\"pipeline_ms_by_stage\": [", "\"pipeline_idle_ms_by_stage\": ["}) {
    EXPECT_NE(explained.find(key), std::string::npos) << key << " in " << explained;
    EXPECT_NE(metrics.find(key), std::string::npos) << key << " in " << metrics;
  }
}

}  // namespace
}  // namespace strata::testing
