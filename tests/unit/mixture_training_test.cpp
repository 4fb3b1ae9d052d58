// Training on a mixture (data.train as a weighted list, data/mixture.h) through the `train`
// executable: tokens drawn per source and val_loss per source in the metrics, exact resume, a
// one-source list training exactly as the plain string, and the sources' checks against the
// model.
#include <gtest/gtest.h>

#include "model/gpt.h"
#include "tests/support/test_support.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

constexpr int kGlobalBatch = 8, kSeqLen = 16;

class MixtureTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two "languages": the Markov chains of vocabularies 64 and 48 differ.
    testing::write_synthetic_dataset(dir_ / "data/a", 64, 30000);
    testing::write_synthetic_dataset(dir_ / "data/b", 48, 20000);
  }
  std::string source(const std::string& name, double weight) const {
    const std::string corpus = dir_ / ("data/" + name);
    return "{path: " + corpus + "/train, weight: " + std::to_string(weight) + ", val: " + corpus +
           "/val, name: " + name + "}";
  }
  std::string mixture() const { return "[" + source("a", 0.7) + ", " + source("b", 0.3) + "]"; }
  // A config of `name` training on `train` (a data.train value).
  std::string write_config(const std::string& name, const std::string& train) const {
    const std::string path = dir_ / (name + ".yaml");
    std::ofstream(path) << "run: {name: " << name << ", dir: " << dir_.str() << "/runs, seed: 5}\n"
                        << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: " << kSeqLen
                        << ", vocab_size: 64}\n"
                        << "data: {train: " << train << "}\n"
                        << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 4}\n"
                        << "train: {steps: 10, global_batch: " << kGlobalBatch
                        << ", micro_batch: 2, eval_every: 5, eval_tokens: 512, log_every: 5}\n"
                        << "checkpoint: {every: 5, keep: 0}\n"
                        << "device: cpu\n";
    return path;
  }
  testing::CommandResult train(const std::string& config, const std::string& args = "") const {
    return testing::run_command(testing::bin("train") + " " + config + " " + args);
  }
  std::string metrics(const std::string& name) const {
    return dir_.str() + "/runs/" + name + "/metrics.jsonl";
  }
  TempDir dir_{"mixture_training"};
};

// The number after `"key": ` inside the object that follows `"object": ` on `line`.
double member(const std::string& line, const std::string& object, const std::string& key) {
  const std::size_t at = line.find("\"" + object + "\": {");
  EXPECT_NE(at, std::string::npos) << object << " in " << line;
  if (at == std::string::npos) return -1;
  const std::string needle = "\"" + key + "\": ";
  const std::size_t k = line.find(needle, at);
  EXPECT_NE(k, std::string::npos) << object << "/" << key << " in " << line;
  return k == std::string::npos ? -1 : std::strtod(line.c_str() + k + needle.size(), nullptr);
}

std::vector<std::string> lines_with(const std::string& path, const std::string& part) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.find(part) != std::string::npos) lines.push_back(line);
  return lines;
}

TEST_F(MixtureTrainingTest, MetricsReportTokensAndValLossPerSource) {
  const auto run = train(write_config("mixed", mixture()));
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("data: a mixture of 2 sources"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("  a: weight 0.7 = 70.00%"), std::string::npos) << run.output;

  // Every training line: the tokens drawn so far, per source, summing to the run's tokens.
  const auto training = lines_with(metrics("mixed"), "\"loss\": ");
  ASSERT_EQ(training.size(), 10u);
  for (std::size_t i = 0; i < training.size(); ++i) {
    const double a = member(training[i], "tokens_by_source", "a");
    const double b = member(training[i], "tokens_by_source", "b");
    EXPECT_EQ(a + b, static_cast<double>((i + 1) * kGlobalBatch * kSeqLen)) << training[i];
  }
  // 80 samples from the first block of 1024, where 717 are a's.
  EXPECT_GT(member(training.back(), "tokens_by_source", "a"),
            member(training.back(), "tokens_by_source", "b"));
  EXPECT_GT(member(training.back(), "tokens_by_source", "b"), 0);
  // Evaluation lines: each source's val_loss, and val_loss their mean weighted by share.
  const auto evaluations = lines_with(metrics("mixed"), "\"val_loss\": ");
  const auto val_losses = testing::metric_values(metrics("mixed"), "val_loss");
  ASSERT_EQ(evaluations.size(), 2u);
  ASSERT_EQ(val_losses.size(), 2u);
  for (std::size_t i = 0; i < evaluations.size(); ++i) {
    const double a = member(evaluations[i], "val_loss_by_source", "a");
    const double b = member(evaluations[i], "val_loss_by_source", "b");
    EXPECT_GT(a, 0);
    EXPECT_GT(b, 0);
    EXPECT_NEAR(val_losses[i], 0.7 * a + 0.3 * b, 1e-6 * val_losses[i]);
  }
  EXPECT_NE(run.output.find("| by source: a "), std::string::npos) << run.output;
}

TEST_F(MixtureTrainingTest, ResumeWithAMixtureIsBitExact) {
  const auto straight = train(write_config("straight", mixture()));
  ASSERT_EQ(straight.status, 0) << straight.output;
  const std::string split = write_config("split", mixture());
  const auto first = train(split, "--set train.stop_after=5");
  ASSERT_EQ(first.status, 0) << first.output;
  const auto second = train(split, "--resume");
  ASSERT_EQ(second.status, 0) << second.output;

  for (const char* key : {"loss", "val_loss"})
    EXPECT_EQ(testing::metric_values(metrics("straight"), key),
              testing::metric_values(metrics("split"), key))
        << key;
  // The tokens drawn and the per-source losses too: everything after the step's timing.
  const auto tail = [](const std::vector<std::string>& lines) {
    std::vector<std::string> tails;
    for (const std::string& line : lines) {
      const std::size_t at = line.find("\"tokens_by_source\"");
      const std::size_t val = line.find("\"val_loss_by_source\"");
      tails.push_back(line.substr(at != std::string::npos ? at : val));
    }
    return tails;
  };
  EXPECT_EQ(tail(lines_with(metrics("straight"), "_by_source")),
            tail(lines_with(metrics("split"), "_by_source")));
  const ParameterLayout layout = ParameterLayout::for_gpt(GptShape{2, 2, 32, kSeqLen, 64});
  const std::string last = "/checkpoints/step_00000010.h5";
  EXPECT_EQ(read_checkpoint(dir_.str() + "/runs/straight" + last, layout, true).params,
            read_checkpoint(dir_.str() + "/runs/split" + last, layout, true).params);

  // A resume that changes the mixture says so.
  const auto changed = train(split, "--resume --set train.steps=12 --set 'data.train=[" +
                                        source("a", 0.5) + ", " + source("b", 0.5) + "]'");
  ASSERT_EQ(changed.status, 0) << changed.output;
  EXPECT_NE(changed.output.find("warning: --resume: data.train is [{path: "), std::string::npos)
      << changed.output;
  EXPECT_NE(changed.output.find("the data order changes from step 10"), std::string::npos)
      << changed.output;
}

TEST_F(MixtureTrainingTest, AOneSourceListTrainsAsThePlainString) {
  const std::string shards = dir_ / "data/a/train";
  const auto plain = train(write_config("plain", shards), "--set train.steps=6");
  ASSERT_EQ(plain.status, 0) << plain.output;
  const auto listed =
      train(write_config("listed", "[{path: " + shards + ", weight: 3}]"), "--set train.steps=6");
  ASSERT_EQ(listed.status, 0) << listed.output;
  const auto losses = testing::metric_values(metrics("plain"), "loss");
  ASSERT_EQ(losses.size(), 6u);
  EXPECT_EQ(losses, testing::metric_values(metrics("listed"), "loss"));
  // The plain string's metrics are as before: no per-source keys.
  EXPECT_TRUE(lines_with(metrics("plain"), "_by_source").empty());
  EXPECT_EQ(lines_with(metrics("listed"), "\"tokens_by_source\": {\"a\": ").size(), 6u);
}

// One `error:` line naming the source's key, and no run started.
void expect_error(const testing::CommandResult& r, const std::string& fragment) {
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << r.output;
}

TEST_F(MixtureTrainingTest, EverySourceIsCheckedAgainstTheModelAndTheOthers) {
  testing::write_synthetic_dataset(dir_ / "data/wide", 100, 5000);
  expect_error(train(write_config("wide", "[" + source("a", 1) + ", " + source("wide", 1) + "]")),
               "error: data.train[1].path: the shards use a vocabulary of 100 tokens but "
               "model.vocab_size is 64");
  expect_error(train(write_config("nowhere", "[" + source("a", 1) + ", {path: " +
                                                 (dir_ / "nowhere") + ", weight: 1}]")),
               "error: data.train[1].path: no such file or directory: '" + (dir_ / "nowhere"));
  // Shards of two tokenizers: their ids mean different text.
  const std::vector<std::int32_t> tokens = testing::markov_tokens(64, 5000, 1);
  for (const char* name : {"x", "y"}) {
    fs::create_directories(dir_ / ("data/" + std::string(name) + "/train"));
    write_token_shard(dir_ / ("data/" + std::string(name) + "/train/shard_00000.h5"), tokens,
                      ShardInfo{64, 0, std::string(64, name[0] == 'x' ? 'a' : 'b')});
  }
  expect_error(train(write_config("tokenizers", "[{path: " + (dir_ / "data/x/train") +
                                                    ", weight: 1}, {path: " +
                                                    (dir_ / "data/y/train") + ", weight: 1}]")),
               "error: data.train[1].path: the shards ('" + (dir_ / "data/y/train/shard_00000.h5") +
                   "'...) were made with another tokenizer (sha256 bbbbbbbbbbbb..., not "
                   "aaaaaaaaaaaa...)");
}

}  // namespace
}  // namespace strata
