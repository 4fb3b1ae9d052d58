// Shared by the tests that train one config under several (dp, tp, pp, cp) layouts and compare the
// runs' metrics: a layout as `train` overrides, a run under mpirun, and the comparison of a
// metric's values step by step.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace strata::testing {

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  std::string schedule = "1f1b";
  bool sequence_parallel = false;
  std::string recompute = "none";
  std::string compute = "fp32";
  std::string device = "";  // empty: the config's (auto unless it says otherwise)
  int virtual_stages = 1;   // chunks of layers per pipeline rank (interleaved, zbv)
  int ep = 1;               // expert parallelism (divides dp)
  int cp = 1;               // context parallelism, its K/V travelling by cp_comm
  std::string cp_comm = "ring";

  int ranks() const { return dp * tp * pp * cp; }
  std::string name() const {
    return (device.empty() ? "" : device + "_") + "dp" + std::to_string(dp) + "tp" +
           std::to_string(tp) + "pp" + std::to_string(pp) + schedule +
           (sequence_parallel ? "sp" : "") +
           (recompute == "none" ? "" : "_recompute_" + recompute) +
           (compute == "fp32" ? "" : "_" + compute) +
           (virtual_stages == 1 ? "" : "_v" + std::to_string(virtual_stages)) +
           (ep == 1 ? "" : "_ep" + std::to_string(ep)) +
           (cp == 1 ? "" : "_cp" + std::to_string(cp) + cp_comm);
  }
  std::string overrides() const {
    return (device.empty() ? "" : " --set device=" + device) +
           " --set parallel.tp=" + std::to_string(tp) + " --set parallel.pp=" + std::to_string(pp) +
           " --set parallel.pipeline_schedule=" + schedule +
           " --set parallel.sequence_parallel=" + (sequence_parallel ? "true" : "false") +
           " --set recompute=" + recompute + " --set precision.compute=" + compute +
           " --set parallel.virtual_stages=" + std::to_string(virtual_stages) +
           (ep == 1 ? "" : " --set parallel.ep=" + std::to_string(ep)) +
           (cp == 1 ? ""
                    : " --set parallel.cp=" + std::to_string(cp) +
                          " --set parallel.cp_comm=" + cp_comm);
  }
};

// Runs `train` on `ranks` ranks on dir/config.yaml under the layout; returns the run directory.
inline std::string train_ranks(const TempDir& dir, int ranks, const Layout& layout,
                               const std::string& run_name, const std::string& extra) {
  const std::string command = mpirun(ranks) + bin("train") + " " + dir.str() + "/config.yaml" +
                              layout.overrides() + " --set run.name=" + run_name + extra;
  const auto result = run_command(command);
  EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
  return dir.str() + "/runs/" + run_name;
}

// Runs `train` on dir/config.yaml under the layout; returns the run directory.
inline std::string train(const TempDir& dir, const Layout& layout, const std::string& run_name,
                         const std::string& extra = "") {
  return train_ranks(dir, layout.ranks(), layout, run_name, extra);
}

// Runs `train` as `workers` DiLoCo workers of the layout each (5 inner steps per outer sync);
// returns the run directory.
inline std::string train_diloco_workers(const TempDir& dir, const Layout& layout,
                                        const std::string& run_name, int workers = 2,
                                        const std::string& extra = "") {
  return train_ranks(dir, workers * layout.ranks(), layout, run_name,
                     " --set diloco.enabled=true --set diloco.workers=" + std::to_string(workers) +
                         " --set diloco.inner_steps=5" + extra);
}

// The config every layout suite trains, at dir/config.yaml: 4 layers (pipelines of up to 4
// stages), d_model 32 in `n_head` heads, 20 steps of 16 sequences in micro-batches of 2 (dp up to
// 8), evaluated at steps 10 and 20, on the synthetic dataset under dir/data.
inline void write_layout_config(const TempDir& dir, int n_head) {
  std::ofstream(dir / "config.yaml")
      << "run: {name: base, dir: " << dir.str() << "/runs, seed: 3}\n"
      << "model: {n_layer: 4, n_head: " << n_head << ", d_model: 32, seq_len: 16, vocab_size: 64}\n"
      << "data: {train: " << dir.str() << "/data/train, val: " << dir.str() << "/data/val}\n"
      << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 4}\n"
      << "train: {steps: 20, global_batch: 16, micro_batch: 2, eval_every: 10, "
         "eval_tokens: 1024, log_every: 10}\n"
      << "checkpoint: {every: 0, keep: 0}\n";
}

// A suite's shared start: the synthetic dataset (vocabulary 64) under dir/data, the layout config
// with `n_head` heads, and the run every layout is compared with (with `extra` overrides); returns
// that run's directory.
inline std::string train_reference(const TempDir& dir, int n_head, const Layout& reference,
                                   const std::string& extra = "") {
  write_synthetic_dataset(dir / "data", 64, 40000);
  write_layout_config(dir, n_head);
  return train(dir, reference, "reference", extra);
}

// A GoogleTest suite of layout runs that share one directory and one reference run, made once
// for the suite (train_reference). `Suite` (CRTP) names them: Suite::kTag (the directory's tag),
// Suite::kHeads (the config's n_head) and Suite::reference() (the layout of the reference run);
// optionally Suite::model_keys(), `--set` overrides of the model every run of the suite adds (the
// reference's too, and run()'s: experts, the Llama block).
template <class Suite>
class LayoutSuite : public ::testing::Test {
 protected:
  static std::string model_keys() { return ""; }
  // A run of the suite's config and model keys under `layout`, with `extra` overrides.
  static std::string run(const Layout& layout, const std::string& name,
                         const std::string& extra = "") {
    return testing::train(*dir_, layout, name, Suite::model_keys() + extra);
  }
  static void SetUpTestSuite() {
    dir_ = new TempDir(Suite::kTag);
    reference_dir_ = train_reference(*dir_, Suite::kHeads, Suite::reference(), Suite::model_keys());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline TempDir* dir_ = nullptr;
  static inline std::string reference_dir_;
};

inline std::vector<double> metric(const std::string& run_dir, const std::string& key) {
  return metric_values(run_dir + "/metrics.jsonl", key);
}

// The number after `key` (e.g. "\"all_gather\": {\"intra_node\": ") in the training line of
// `step` of the run's metrics.jsonl; -1 (and a failure) when there is none.
inline double logged(const std::string& run_dir, int step, const std::string& key) {
  const std::string lines = read_file(run_dir + "/metrics.jsonl");
  const std::size_t at = lines.find("{\"step\": " + std::to_string(step) + ",");
  EXPECT_NE(at, std::string::npos) << "step " << step;
  if (at == std::string::npos) return -1;
  const std::string line = lines.substr(at, lines.find('\n', at) - at);
  const std::size_t k = line.find(key);
  EXPECT_NE(k, std::string::npos) << key << " in " << line;
  return k == std::string::npos ? -1.0 : std::strtod(line.c_str() + k + key.size(), nullptr);
}

// actual[i] against expected[first + i], within `relative` of the expected value.
inline void expect_close(const std::vector<double>& actual, const std::vector<double>& expected,
                         std::size_t first, const std::string& what, double relative = 1e-4) {
  ASSERT_EQ(actual.size(), expected.size() - first) << what;
  for (std::size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[first + i], relative * std::abs(expected[first + i]))
        << what << ", entry " << first + i;
}

// A secret file (diloco.secret_file, swarm.secret_file) at `path`: `text` and a newline, mode
// 600, as the secret's reader requires; returns the path.
inline std::string write_secret_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text << "\n";
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}

// `command` fails with one `error: ...` line, which contains `needle`.
inline void expect_one_error_line(const std::string& command, const std::string& needle) {
  const auto result = run_command(command);
  EXPECT_NE(result.status, 0) << command << "\n" << result.output;
  std::size_t error_lines = 0;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("error: ")) ++error_lines;
  EXPECT_EQ(error_lines, 1u) << result.output;
  EXPECT_NE(result.output.find(needle), std::string::npos) << result.output;
}

}  // namespace strata::testing
