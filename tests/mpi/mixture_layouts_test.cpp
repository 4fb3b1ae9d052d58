// A mixture (data.train as a weighted list, data/mixture.h) is layout independent: 2
// data-parallel ranks and 2 pipeline stages train the run of one process (loss per step within
// 1e-5 and 1e-4 relative; per-source val_loss likewise) and report exactly the same tokens per
// source; DiLoCo's workers draw from one mixed stream, and the job's tokens per source sum to
// what every worker read.
#include <gtest/gtest.h>

#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::TempDir;

constexpr int kGlobalBatch = 16, kSeqLen = 16;

// Two sources of different vocabularies (two Markov chains), each with its val, at dir/config.yaml.
void write_mixture_config(const TempDir& dir) {
  testing::write_synthetic_dataset(dir / "data/a", 64, 30000);
  testing::write_synthetic_dataset(dir / "data/b", 48, 20000);
  const auto source = [&](const char* name, double weight) {
    const std::string corpus = dir / (std::string("data/") + name);
    return "{path: " + corpus + "/train, weight: " + std::to_string(weight) + ", val: " + corpus +
           "/val}";
  };
  std::ofstream(dir / "config.yaml")
      << "run: {name: base, dir: " << dir.str() << "/runs, seed: 3}\n"
      << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: " << kSeqLen << ", vocab_size: 64}\n"
      << "data: {train: [" << source("a", 0.6) << ", " << source("b", 0.4) << "]}\n"
      << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 4}\n"
      << "train: {steps: 10, global_batch: " << kGlobalBatch
      << ", micro_batch: 2, eval_every: 5, eval_tokens: 512, log_every: 5}\n"
      << "checkpoint: {every: 0, keep: 0}\n"
      << "device: cpu\n";
}

// Every metrics line's per-source objects, as written.
std::vector<std::string> by_source(const std::string& run_dir, const std::string& key) {
  std::vector<std::string> objects;
  std::ifstream in(run_dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const std::size_t at = line.find("\"" + key + "\": {");
    if (at != std::string::npos) objects.push_back(line.substr(at, line.find('}', at) - at));
  }
  return objects;
}

// The number after "<name>": in each object.
std::vector<double> member(const std::vector<std::string>& objects, const std::string& name) {
  std::vector<double> values;
  for (const std::string& object : objects) {
    const std::size_t at = object.find("\"" + name + "\": ");
    EXPECT_NE(at, std::string::npos) << name << " in " << object;
    values.push_back(
        at == std::string::npos ? -1 : std::strtod(object.c_str() + at + name.size() + 4, nullptr));
  }
  return values;
}

TEST(MixtureLayouts, DataAndPipelineParallelTrainTheRunOfOneProcess) {
  TempDir dir("mixture_layouts");
  write_mixture_config(dir);
  const std::string reference = testing::train(dir, Layout{}, "reference");
  const auto losses = metric(reference, "loss");
  ASSERT_EQ(losses.size(), 10u);
  const auto tokens = by_source(reference, "tokens_by_source");
  ASSERT_EQ(tokens.size(), 10u);
  const auto val_by_source = by_source(reference, "val_loss_by_source");
  ASSERT_EQ(val_by_source.size(), 2u);
  for (const auto& [layout, bound] : {std::pair{Layout{2, 1, 1}, 1e-5}, {Layout{1, 1, 2}, 1e-4}}) {
    SCOPED_TRACE(layout.name());
    const std::string run = testing::train(dir, layout, layout.name());
    expect_close(metric(run, "loss"), losses, 0, "loss", bound);
    expect_close(metric(run, "val_loss"), metric(reference, "val_loss"), 0, "val_loss", bound);
    const auto val = by_source(run, "val_loss_by_source");
    for (const char* source : {"a", "b"})
      expect_close(member(val, source), member(val_by_source, source), 0, source, bound);
    EXPECT_EQ(by_source(run, "tokens_by_source"), tokens);  // the same samples, exactly
  }
}

TEST(MixtureLayouts, DilocoWorkersDrawFromOneMixedStream) {
  TempDir dir("mixture_diloco");
  write_mixture_config(dir);
  const std::string command = testing::mpirun(2) + testing::bin("train") + " " + dir.str() +
                              "/config.yaml --set run.name=workers --set diloco.enabled=true "
                              "--set diloco.workers=2 --set diloco.inner_steps=5";
  const auto result = testing::run_command(command);
  ASSERT_EQ(result.status, 0) << result.output;
  const auto tokens = by_source(dir.str() + "/runs/workers", "tokens_by_source");
  ASSERT_EQ(tokens.size(), 10u);
  const auto a = member(tokens, "a"), b = member(tokens, "b");
  for (std::size_t i = 0; i < tokens.size(); ++i)
    EXPECT_EQ(a[i] + b[i], static_cast<double>((i + 1) * kGlobalBatch * kSeqLen * 2)) << i;
  // Two workers read the samples of one run with twice the batch: the same tokens per source at
  // step 5 as that run at step 5.
  const std::string doubled = testing::train(
      dir, Layout{}, "doubled", " --set train.global_batch=" + std::to_string(2 * kGlobalBatch));
  EXPECT_EQ(by_source(doubled, "tokens_by_source")[4], tokens[4]);
}

}  // namespace
}  // namespace strata
