// `plot` (tools/plot.py, installed as bin/plot): PNG charts of a real training run, of a DiLoCo
// run's outer steps, of two runs compared, and its one-line errors. The PNGs are checked for their
// signature and a plausible IHDR size; what was drawn is checked through the line plot prints per
// file (`plot: PATH | run: loss 6, val_loss 2`) against the metrics lines. Needs Debian's
// python3-matplotlib (scripts/setup.sh): without it plot exits with an error and these tests fail.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tests/support/test_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

struct PngSize {
  std::uint32_t width = 0, height = 0;
};

// The size in a PNG's IHDR chunk, after checking the 8-byte signature and that IHDR comes first.
PngSize png_size(const std::string& path) {
  const std::string bytes = testing::read_file(path);
  const std::string signature = "\x89PNG\r\n\x1a\n";
  EXPECT_GE(bytes.size(), 33u) << path;
  if (bytes.size() < 33) return {};
  EXPECT_EQ(bytes.substr(0, 8), signature) << path;
  EXPECT_EQ(bytes.substr(12, 4), "IHDR") << path;
  const auto be32 = [&](std::size_t at) {
    std::uint32_t value = 0;
    for (std::size_t i = 0; i < 4; ++i)
      value = value << 8 | static_cast<unsigned char>(bytes[at + i]);
    return value;
  };
  return {be32(16), be32(20)};
}

void expect_readable_png(const std::string& path) {
  ASSERT_TRUE(fs::exists(path)) << path;
  const PngSize size = png_size(path);
  EXPECT_GE(size.width, 600u) << path;
  EXPECT_LE(size.width, 4000u) << path;
  EXPECT_GE(size.height, 400u) << path;
  EXPECT_LE(size.height, 4000u) << path;
}

// plot's report: for each file written, per run, the points of each series drawn.
using Report = std::map<std::string, std::map<std::string, std::map<std::string, int>>>;

Report parse_report(const std::string& output) {
  Report report;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("plot: ")) continue;
    std::istringstream fields(line.substr(6));
    std::string file, part;
    std::getline(fields, file, '|');
    file = fs::path(file.substr(0, file.find_last_not_of(' ') + 1)).filename().string();
    while (std::getline(fields, part, '|')) {
      const auto colon = part.find(':');
      const std::string run = part.substr(1, colon - 1);
      std::istringstream series(part.substr(colon + 1));
      for (std::string item; std::getline(series, item, ',');) {
        std::istringstream words(item);
        std::string key;
        int points = -1;
        words >> key >> points;
        report[file][run][key] = points;
      }
    }
  }
  return report;
}

std::string plot(const std::string& arguments) { return testing::bin("plot") + " " + arguments; }

int count_lines_with(const std::string& path, const std::string& key) {
  return static_cast<int>(testing::metric_values(path, key).size());
}

TEST(PlotTool, DrawsEveryChartOfARealTrainingRun) {
  testing::TempDir dir("plot_train");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  const std::string config = dir / "run.yaml";
  std::ofstream(config)
      << "run: {name: small, dir: " << dir.str() << "/runs, seed: 5}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "train: {steps: 6, global_batch: 8, micro_batch: 4, eval_every: 3, eval_tokens: 1024}\n"
      << "checkpoint: {every: 100, keep: 0}\n"
      << "device: cpu\n";
  const auto trained = testing::run_command(testing::bin("train") + " " + config);
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string run = dir / "runs/small";
  const std::string metrics = run + "/metrics.jsonl";
  const int train_lines = count_lines_with(metrics, "loss");
  const int eval_lines = count_lines_with(metrics, "val_loss");
  ASSERT_EQ(train_lines, 6);
  ASSERT_EQ(eval_lines, 2);

  const auto plotted = testing::run_command(plot(run));
  ASSERT_EQ(plotted.status, 0) << plotted.output;
  const Report report = parse_report(plotted.output);
  for (const char* file : {"loss.png", "lr.png", "throughput.png", "grad_norm.png", "overview.png"})
    expect_readable_png(run + "/plots/" + file);
  EXPECT_FALSE(fs::exists(run + "/plots/outer.png")) << "not a DiLoCo run";
  EXPECT_EQ(report.size(), 5u) << plotted.output;
  EXPECT_EQ(report.at("loss.png").at("small").at("loss"), train_lines) << plotted.output;
  EXPECT_EQ(report.at("loss.png").at("small").at("val_loss"), eval_lines) << plotted.output;
  EXPECT_EQ(report.at("lr.png").at("small").at("lr"), train_lines);
  EXPECT_EQ(report.at("throughput.png").at("small").at("tokens_per_s"), train_lines);
  EXPECT_EQ(report.at("grad_norm.png").at("small").at("grad_norm"), train_lines);
  EXPECT_EQ(report.at("overview.png").at("small").size(), 5u) << plotted.output;

  // --out puts them elsewhere.
  const auto elsewhere = testing::run_command(plot(run + " --out " + dir / "charts"));
  ASSERT_EQ(elsewhere.status, 0) << elsewhere.output;
  expect_readable_png(dir / "charts/loss.png");
}

// A DiLoCo-shaped run, written by hand: 2 workers, a sync every 2 steps and one of a second
// fragment at step 5, one step written twice (its last line counts), a null loss (left out), and
// an unterminated last line still being written (skipped).
void write_diloco_run(const std::string& run) {
  fs::create_directories(run);
  std::ofstream(run + "/config.yaml")
      << "run:\n  name: d\nmodel:\n  seq_len: 16\ntrain:\n  global_batch: 4\n"
      << "diloco:\n  enabled: true\n  workers: 2\n  inner_steps: 2\n";
  std::ofstream metrics(run + "/metrics.jsonl");
  for (int step = 1; step <= 6; ++step) {
    const double loss = 5.0 - 0.3 * step;
    metrics << "{\"step\": " << step
            << ", \"loss\": " << (step == 3 ? "null" : std::to_string(loss))
            << ", \"lr\": 0.001, \"grad_norm\": 0.5, \"tokens_per_s\": 1000, \"step_ms\": 64}\n";
    if (step % 2 == 0 || step == 5)
      metrics << "{\"step\": " << step << ", \"outer_step\": " << step / 2
              << ", \"fragment\": " << step % 2 << ", \"outer_grad_norm\": 0.2, \"worker_loss\": ["
              << loss << ", " << loss + 0.1 << "], \"dropped_workers\": [], \"outer_sync_s\": 0.01"
              << ", \"outer_hidden_s\": 0, \"outer_comm_bytes_job\": {\"inter_worker\": 100}}\n";
  }
  metrics << "{\"step\": 6, \"val_loss\": 3.5}\n";
  metrics << "{\"step\": 6, \"loss\": 3.2, \"lr\": 0.001, \"grad_norm\": 0.5, "
          << "\"tokens_per_s\": 1000, \"step_ms\": 64}\n";
  metrics << "{\"step\": 6, \"peak_rss_mib\": 100, \"activation_mib_by_stage\": [1.0]}\n";
  metrics << "{\"step\": 7, \"loss\": 3.";
}

void write_plain_run(const std::string& run, int steps) {
  fs::create_directories(run);
  std::ofstream(run + "/config.yaml") << "model: {seq_len: 16}\ntrain: {global_batch: 8}\n";
  std::ofstream metrics(run + "/metrics.jsonl");
  for (int step = 1; step <= steps; ++step)
    metrics << "{\"step\": " << step << ", \"loss\": " << 5.0 - 0.2 * step
            << ", \"lr\": 0.001, \"grad_norm\": 0.7, \"tokens_per_s\": 2000, \"step_ms\": 64}\n";
  metrics << "{\"step\": " << steps << ", \"val_loss\": 4.0}\n";
}

TEST(PlotTool, DrawsDiLoCoOuterStepsAndComparesTwoRuns) {
  testing::TempDir dir("plot_diloco");
  const std::string diloco = dir / "runs/diloco", plain = dir / "runs/plain";
  write_diloco_run(diloco);
  write_plain_run(plain, 4);

  const auto alone = testing::run_command(plot(diloco));
  ASSERT_EQ(alone.status, 0) << alone.output;
  expect_readable_png(diloco + "/plots/outer.png");
  const Report single = parse_report(alone.output);
  EXPECT_EQ(single.at("loss.png").at("diloco").at("loss"), 5) << alone.output;  // 6 steps, 1 null
  EXPECT_EQ(single.at("outer.png").at("diloco").at("outer_grad_norm"), 4) << alone.output;
  EXPECT_EQ(single.at("outer.png").at("diloco").at("worker_loss"), 4) << alone.output;
  EXPECT_EQ(single.at("outer.png").at("diloco").at("outer_sync_s"), 4) << alone.output;
  EXPECT_EQ(single.at("outer.png").at("diloco").count("consensus_distance"), 0u) << alone.output;

  const auto compared = testing::run_command(plot(diloco + " " + plain + " --out " + dir / "cmp"));
  ASSERT_EQ(compared.status, 0) << compared.output;
  for (const char* file :
       {"loss.png", "lr.png", "throughput.png", "grad_norm.png", "outer.png", "overview.png"})
    expect_readable_png(dir / "cmp/" + file);
  const Report both = parse_report(compared.output);
  EXPECT_EQ(both.at("loss.png").at("diloco").at("loss"), 5) << compared.output;
  EXPECT_EQ(both.at("loss.png").at("plain").at("loss"), 4) << compared.output;
  EXPECT_EQ(both.at("loss.png").at("plain").at("val_loss"), 1) << compared.output;
  EXPECT_EQ(both.at("outer.png").count("plain"), 0u) << "only DiLoCo runs on the outer chart";
  EXPECT_EQ(both.at("overview.png").at("diloco").at("outer_grad_norm"), 4) << compared.output;
}

// An elastic worker's run, written by hand: slot 1 lost before the sync after step 4 (after a
// 3.2 s wait for it) and back as a joiner at step 6.
TEST(PlotTool, DrawsAnElasticGroupsMembersJoinsLossesAndWaits) {
  testing::TempDir dir("plot_elastic");
  const std::string run = dir / "runs/elastic";
  write_diloco_run(run);
  {
    std::ofstream metrics(run + "/metrics.jsonl");
    const char* const syncs[] = {"[0, 1], \"joining\": [], \"dropped_workers\": [",
                                 "[0], \"joining\": [], \"dropped_workers\": [1",
                                 "[0, 1], \"joining\": [1], \"dropped_workers\": ["};
    const char* const waits[] = {"0.01", "3.2", "0.02"};
    for (int step = 1; step <= 6; ++step) {
      metrics << "{\"step\": " << step << ", \"loss\": 4, \"lr\": 0.001, \"grad_norm\": 0.5, "
              << "\"tokens_per_s\": 1000, \"step_ms\": 64}\n";
      if (step % 2 == 0)
        metrics << "{\"step\": " << step << ", \"outer_step\": " << step / 2
                << ", \"outer_grad_norm\": 0.2, \"worker_loss\": [4], \"members\": "
                << syncs[step / 2 - 1] << "], \"outer_sync_s\": 0.01, \"outer_wall_s\": 3.5, "
                << "\"outer_wait_s\": " << waits[step / 2 - 1] << "}\n";
    }
  }
  const auto result = testing::run_command(plot(run));
  ASSERT_EQ(result.status, 0) << result.output;
  expect_readable_png(run + "/plots/elastic.png");
  const Report report = parse_report(result.output);
  const auto& elastic = report.at("elastic.png").at("elastic");
  EXPECT_EQ(elastic.at("members"), 3) << result.output;
  EXPECT_EQ(elastic.at("joins"), 1) << result.output;
  EXPECT_EQ(elastic.at("lost"), 1) << result.output;
  EXPECT_EQ(elastic.at("outer_wait_s"), 3) << result.output;
  EXPECT_EQ(elastic.at("outer_wall_s"), 3) << result.output;
  // An in-job DiLoCo run has no group to draw.
  const std::string in_job = dir / "runs/in_job";
  write_diloco_run(in_job);
  ASSERT_EQ(testing::run_command(plot(in_job)).status, 0);
  EXPECT_FALSE(fs::exists(in_job + "/plots/elastic.png"));
}

// A run with train.eval_multiple_choice: its evaluation lines carry mc_acc and mc_acc_norm, one
// of them without val_loss (a run without a validation split), and get a chart of their own.
TEST(PlotTool, DrawsMultipleChoiceAccuracy) {
  testing::TempDir dir("plot_choice");
  const std::string run = dir / "runs/choice";
  write_plain_run(run, 4);
  std::ofstream(run + "/metrics.jsonl", std::ios::app)
      << "{\"step\": 2, \"mc_acc\": 0.25, \"mc_acc_norm\": 0.3}\n"
      << "{\"step\": 4, \"val_loss\": 4.0, \"mc_acc\": 0.3, \"mc_acc_norm\": 0.35}\n";
  const auto plotted = testing::run_command(plot(run));
  ASSERT_EQ(plotted.status, 0) << plotted.output;
  expect_readable_png(run + "/plots/multiple_choice.png");
  const Report report = parse_report(plotted.output);
  EXPECT_EQ(report.at("multiple_choice.png").at("choice").at("mc_acc"), 2) << plotted.output;
  EXPECT_EQ(report.at("multiple_choice.png").at("choice").at("mc_acc_norm"), 2) << plotted.output;
  EXPECT_EQ(report.at("overview.png").at("choice").at("mc_acc"), 2) << plotted.output;
  EXPECT_EQ(report.at("loss.png").at("choice").at("val_loss"), 1) << plotted.output;
}

// One `error:` line naming the problem, non-zero exit, and no chart written.
void expect_error(const std::string& arguments, const std::string& message) {
  const auto result = testing::run_command(plot(arguments));
  EXPECT_NE(result.status, 0) << arguments;
  EXPECT_TRUE(result.output.starts_with("error: ")) << result.output;
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << "one line: " << result.output;
  EXPECT_NE(result.output.find(message), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("Traceback"), std::string::npos) << result.output;
}

TEST(PlotTool, ReportsBadInputInOneErrorLine) {
  testing::TempDir dir("plot_errors");
  expect_error(dir / "absent", "absent: no such run directory");
  expect_error("", "usage: plot RUN_DIR");
  expect_error(dir.str() + " --colour red", "unrecognized arguments: --colour");

  const std::string run = dir / "run";
  fs::create_directories(run);
  expect_error(run, "metrics.jsonl: no such file");
  write_plain_run(run, 3);
  fs::remove(run + "/config.yaml");
  expect_error(run, "config.yaml: no such file");
  std::ofstream(run + "/config.yaml") << "model: {n_layer: 2}\n";
  expect_error(run, "config.yaml: not a Strata run config");

  write_plain_run(run, 3);
  std::ofstream(run + "/metrics.jsonl", std::ios::app) << "\n{\"step\": 5, \"loss\": 1}\n";
  expect_error(run, "metrics.jsonl line 5: not a metrics line");
  std::ofstream(run + "/metrics.jsonl") << "{\"step\": 1, \"loss\": 4}\n{\"step\": 2, loss: 3}\n";
  expect_error(run, "metrics.jsonl line 2: not a metrics line");
  std::ofstream(run + "/metrics.jsonl") << "{\"step\": 1, \"loss\": \"low\"}\n";
  expect_error(run, "line 1: 'loss' is 'low', not a number");
  std::ofstream(run + "/metrics.jsonl")
      << "{\"step\": 1, \"loss\": 4}\n{\"step\": 1, \"outer_step\": 1, \"worker_loss\": 4}\n";
  expect_error(run, "line 2: 'worker_loss' is 4, not an array of numbers");
  std::ofstream(run + "/metrics.jsonl") << "{\"step\": 1, \"val_loss\": 4}\n";
  expect_error(run, "metrics.jsonl: no training lines");
  std::ofstream(run + "/metrics.jsonl");
  expect_error(run, "metrics.jsonl: no training lines");
  EXPECT_FALSE(fs::exists(run + "/plots"));

  write_plain_run(run, 3);
  expect_error(run + " " + run, "several runs need --out DIR");
}

}  // namespace
}  // namespace strata
