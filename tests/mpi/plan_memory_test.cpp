// The planner's memory prediction (plan/memory_model.h) equals the trainer's own account: for
// layouts over data, tensor (with sequence parallelism) and pipeline parallelism, both schedules,
// ZeRO stages 0 to 3 with either gradient reduction and ZeRO++ hpZ, recompute and bf16, every
// predicted field of rank 0's `memory_bytes` in metrics.jsonl, byte for byte, and every pipeline
// stage's activations (reported to 0.001 MiB).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "plan/memory_model.h"
#include "tests/mpi/layout_runs.h"
#include "train/config.h"

namespace strata::testing {
namespace {

struct Case {
  std::string name;
  int ranks;
  std::vector<std::string> overrides;
};

TEST(PlanMemory, PredictionEqualsTheTrainersAccount) {
  TempDir dir("plan_memory");
  write_synthetic_dataset(dir / "data", 64, 20000);
  write_layout_config(dir, 4);
  const std::vector<std::string> common = {"train.steps=2", "train.log_every=1",
                                           "train.eval_every=0"};
  const std::vector<Case> cases = {
      {"dp2", 2, {"parallel.dp=2"}},
      {"tp2sp", 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}},
      {"pp2_1f1b", 2, {"parallel.pp=2"}},
      {"pp4_gpipe", 4, {"parallel.pp=4", "parallel.pipeline_schedule=gpipe"}},
      {"dp2_zero1", 2, {"parallel.zero.stage=1"}},
      {"dp4_zero2", 4, {"parallel.zero.stage=2"}},
      {"dp2_zero3", 2, {"parallel.zero.stage=3"}},
      {"tp2pp2dp2_zero1_selective",
       8,
       {"parallel.tp=2", "parallel.pp=2", "parallel.zero.stage=1", "recompute=selective"}},
      {"pp2_full_bf16", 2, {"parallel.pp=2", "recompute=full", "precision.compute=bf16"}},
      {"dp2_zero2_micro_batch",
       2,
       {"parallel.zero.stage=2", "parallel.zero.gradient_reduction=micro_batch"}},
      {"pp2dp2_zero3_micro_batch",
       4,
       {"parallel.pp=2", "parallel.zero.stage=3", "parallel.zero.gradient_reduction=micro_batch"}},
      {"dp4_zero3_hpz_2_per_node",
       4,
       {"parallel.zero.stage=3", "parallel.zero.hierarchical_partition=true",
        "parallel.gpus_per_node=2"}},
      {"pp3_split_gpipe",
       3,
       {"parallel.pp=3", "parallel.pp_layers=[2,1,1]", "parallel.pipeline_schedule=gpipe"}},
  };
  const std::vector<std::pair<std::string, std::size_t MemoryAccount::*>> fields = {
      {"master_weights", &MemoryAccount::master_weights},
      {"compute_weights", &MemoryAccount::compute_weights},
      {"gradients", &MemoryAccount::gradients},
      {"optimizer_state", &MemoryAccount::optimizer_state},
      {"communication", &MemoryAccount::communication},
      {"activations", &MemoryAccount::activations},
      {"gradient_buckets", &MemoryAccount::gradient_buckets},
      {"secondary_weights", &MemoryAccount::secondary_weights},
      {"gathered_weights", &MemoryAccount::gathered_weights},
  };
  for (const Case& c : cases) {
    std::vector<std::string> overrides = common;
    overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
    overrides.push_back("run.name=" + c.name);
    std::ostringstream command;
    command << mpirun(c.ranks) << bin("train") << " " << dir.str() << "/config.yaml";
    for (const std::string& o : overrides) command << " --set '" << o << "'";
    const auto result = run_command(command.str());
    ASSERT_EQ(result.status, 0) << command.str() << "\n" << result.output;

    const MemoryAccount predicted =
        predict_memory(load_config(dir / "config.yaml", overrides), c.ranks);
    const std::string run = dir.str() + "/runs/" + c.name;
    for (const auto& [key, field] : fields)
      EXPECT_EQ(logged(run, 2, "\"" + key + "\": "), static_cast<double>(predicted.*field))
          << c.name << ": " << key;

    // Every stage's activations, from the run's last line (MiB to 3 decimals).
    const std::string lines = read_file(run + "/metrics.jsonl");
    const std::string key = "\"activation_mib_by_stage\": [";
    const std::size_t at = lines.rfind(key);
    ASSERT_NE(at, std::string::npos) << c.name;
    std::istringstream values(lines.substr(at + key.size(), lines.find(']', at) - at - key.size()));
    const Config config = load_config(dir / "config.yaml", overrides);
    const int stages = resolve_mesh(config, c.ranks).pp;
    int stage = 0;
    for (std::string value; std::getline(values, value, ','); ++stage)
      EXPECT_NEAR(std::stod(value), predict_memory(config, c.ranks, stage).activations / 1048576.0,
                  0.0005)
          << c.name << ": stage " << stage;
    EXPECT_EQ(stage, stages) << c.name;
  }
}

}  // namespace
}  // namespace strata::testing
