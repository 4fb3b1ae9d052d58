// The planner's memory and communication predictions (plan/memory_model.h, plan/comm_model.h)
// equal the trainer's own accounts: for layouts over data, tensor (with sequence parallelism) and
// pipeline parallelism, every runnable schedule (gpipe, 1f1b, zb-h1, zb-h2, and with two chunks
// per rank interleaved and zbv), ZeRO stages 0 to 3
// with either gradient reduction and ZeRO++ (hpZ, qwZ, qgZ, on simulated nodes of 2 ranks),
// recompute and bf16, every predicted field of rank 0's `memory_bytes` in metrics.jsonl, byte for
// byte, every pipeline stage's activations (reported to 0.001 MiB), and rank 0's bytes of a step by
// collective kind and link class
// (`comm_bytes`) and by parallel axis (`comm_bytes_by_axis`); and the same for mixtures of experts
// with and without expert parallelism, routed so that their rows do not depend on the data; and
// for context parallelism.
#include <gtest/gtest.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "plan/comm_model.h"
#include "plan/config.h"
#include "plan/memory_model.h"
#include "tests/mpi/layout_runs.h"

namespace strata::testing {
namespace {

struct Case {
  std::string name;
  int ranks;
  std::vector<std::string> overrides;
  std::vector<int> comm_steps{1, 2};  // the steps whose bytes are compared
};

// Rank 0's metrics line of training step `step`.
std::string step_line(const std::string& run_dir, int step) {
  const std::string lines = read_file(run_dir + "/metrics.jsonl");
  const std::size_t line = lines.find("{\"step\": " + std::to_string(step) + ",");
  if (line == std::string::npos) return "";
  return lines.substr(line, lines.find('\n', line) - line);
}

using BytesByKind = std::map<std::string, std::map<std::string, double>>;

// The nonzero entries of the `comm_bytes` object of rank 0's line for `step`.
BytesByKind logged_comm_bytes(const std::string& run_dir, int step) {
  const std::string line = step_line(run_dir, step);
  const std::string key = "\"comm_bytes\": {";
  const std::size_t at = line.find(key);
  EXPECT_NE(at, std::string::npos) << "no comm_bytes for step " << step;
  if (at == std::string::npos) return {};
  // {"kind": {"link": bytes, ...}, ...}: quoted names, numbers, braces, no strings inside.
  const std::size_t begin = at + key.size(), close = line.find("}}", begin);
  EXPECT_NE(close, std::string::npos) << line;
  if (close == std::string::npos) return {};
  const std::string object = line.substr(begin, close + 1 - begin);
  BytesByKind bytes;
  std::string kind;
  for (std::size_t i = 0; i < object.size();) {
    if (object[i] != '"') {
      if (object[i] == '}') kind.clear();
      ++i;
      continue;
    }
    const std::size_t end = object.find('"', i + 1);
    if (end == std::string::npos) break;
    const std::string name = object.substr(i + 1, end - i - 1);
    i = object.find_first_not_of(": ", end + 1);
    if (i == std::string::npos) break;
    if (object[i] == '{') {
      kind = name;
      continue;
    }
    const double value = std::strtod(object.c_str() + i, nullptr);
    if (value > 0) bytes[kind][name] = value;
  }
  return bytes;
}

BytesByKind predicted_comm_bytes(const CommPrediction& prediction) {
  BytesByKind bytes;
  for (const auto& [kind, links] : prediction.bytes_by_kind())
    for (const auto& [link, sent] : links)
      bytes[kind][link_class_name(link)] = static_cast<double>(sent);
  return bytes;
}

// Trains case `c` for two steps in `dir` (its config.yaml and data) and requires rank 0's
// memory account, every stage's activations, and rank 0's communication by kind and link class
// and on each of `axes` to equal the planner's prediction.
void expect_prediction_equals_run(const TempDir& dir, const Case& c,
                                  const std::vector<CommGroup>& axes) {
  const std::vector<std::string> common = {"train.steps=2", "train.log_every=1",
                                           "train.eval_every=0"};
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
  std::vector<std::string> overrides = common;
  overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
  overrides.push_back("run.name=" + c.name);
  // A disk offload's state file goes into the test's directory.
  overrides.push_back("optimizer.offload_dir=" + dir.str() + "/offload");
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

  // Communication of steps 1 and 2 (the second with ZeRO 3's prefetch running).
  const CommPrediction comm = predict_communication(config, c.ranks);
  for (int step : c.comm_steps) {
    EXPECT_EQ(logged_comm_bytes(run, step), predicted_comm_bytes(comm))
        << c.name << ": comm_bytes of step " << step;
    for (CommGroup group : axes) {
      const std::string axis = comm_group_name(group);
      const std::string line = step_line(run, step);
      const std::size_t by_axis = line.find("\"comm_bytes_by_axis\": {");
      ASSERT_NE(by_axis, std::string::npos) << c.name;
      const std::size_t at = line.find("\"" + axis + "\": ", by_axis);
      ASSERT_NE(at, std::string::npos) << c.name << " " << axis;
      EXPECT_EQ(std::stod(line.substr(at + axis.size() + 4)),
                static_cast<double>(comm.group_bytes(group)))
          << c.name << ": comm_bytes_by_axis." << axis << " of step " << step;
    }
  }
}

TEST(PlanMemory, PredictionEqualsTheTrainersAccount) {
  TempDir dir("plan_memory");
  write_synthetic_dataset(dir / "data", 64, 20000);
  write_layout_config(dir, 4);
  const std::vector<Case> cases = {
      {"dp2", 2, {"parallel.dp=2"}},
      {"tp2sp", 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}},
      {"pp2_1f1b", 2, {"parallel.pp=2"}},
      {"pp4_gpipe", 4, {"parallel.pp=4", "parallel.pipeline_schedule=gpipe"}},
      // The zero-bubble schedules: each slot also holds its weight stash (copies under full).
      {"pp4_zb_h1", 4, {"parallel.pp=4", "parallel.pipeline_schedule=zb-h1"}},
      {"tp2sp_pp2_zb_h2_full",
       4,
       {"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.pp=2",
        "parallel.pipeline_schedule=zb-h2", "recompute=full"}},
      {"pp2dp2_zb_h1_zero3_selective",
       4,
       {"parallel.pp=2", "parallel.pipeline_schedule=zb-h1", "parallel.zero.stage=3",
        "recompute=selective"}},
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
      {"tp2sp_pp2_full",
       4,
       {"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.pp=2", "recompute=full"}},
      {"dp4_zero3_qwz_qgz_2_per_node",
       4,
       {"parallel.zero.stage=3", "parallel.zero.quantized_weights=true",
        "parallel.zero.quantized_gradients=true", "parallel.gpus_per_node=2"}},
      {"tp2dp2_zero2_2_per_node_selective",
       4,
       {"parallel.tp=2", "parallel.zero.stage=2", "parallel.gpus_per_node=2",
        "recompute=selective"}},
      // Several chunks per rank: a model (slots, workspace) per chunk; messages across every
      // boundary between ranks (zbv turns in place on the last rank; its rank 0 holds both ends
      // and gathers its one wte for both chunks).
      // The optimizers' state (plan/optimizer_state.h): Adafactor's per-tensor statistics on ZeRO
      // shards and tp slices, Muon's momentum and AdamW's v of the tensors it leaves to AdamW,
      // the 8-bit codes and block scales (and the blocks' maxima agreed over shards and tp), a
      // disk offload's three chunks (Muon's: three of each of its two streams).
      {"tp2dp2_zero1_adafactor",
       4,
       {"parallel.tp=2", "parallel.zero.stage=1", "optimizer.name=adafactor",
        "optimizer.adafactor.beta1=0.9"}},
      {"pp2dp2_zero2_muon", 4, {"parallel.pp=2", "parallel.zero.stage=2", "optimizer.name=muon"}},
      {"dp2_zero1_offload_disk",
       2,
       {"parallel.zero.stage=1", "optimizer.offload=disk", "optimizer.offload_chunk=1024"}},
      {"pp2dp2_zero1_muon_offload_disk",
       4,
       {"parallel.pp=2", "parallel.zero.stage=1", "optimizer.name=muon", "optimizer.offload=disk",
        "optimizer.offload_chunk=1024"}},
      {"tp2dp2_zero2_adamw8bit",
       4,
       {"parallel.tp=2", "parallel.zero.stage=2", "optimizer.name=adamw8bit",
        "optimizer.adamw8bit.block_size=64"}},
      {"pp2_interleaved_v2",
       2,
       {"parallel.pp=2", "parallel.pipeline_schedule=interleaved", "parallel.virtual_stages=2"}},
      {"pp2_zbv",
       2,
       {"parallel.pp=2", "parallel.pipeline_schedule=zbv", "parallel.virtual_stages=2"}},
      {"pp2dp2_interleaved_v2_zero2_micro_batch_full",
       4,
       {"parallel.pp=2", "parallel.pipeline_schedule=interleaved", "parallel.virtual_stages=2",
        "parallel.zero.stage=2", "parallel.zero.gradient_reduction=micro_batch", "recompute=full"}},
      {"pp2dp2_zbv_zero3_selective",
       4,
       {"parallel.pp=2", "parallel.pipeline_schedule=zbv", "parallel.virtual_stages=2",
        "parallel.zero.stage=3", "recompute=selective"}},
      {"pp2dp2_zbv_zero2_micro_batch",
       4,
       {"parallel.pp=2", "parallel.pipeline_schedule=zbv", "parallel.virtual_stages=2",
        "parallel.zero.stage=2", "parallel.zero.gradient_reduction=micro_batch"}},
  };
  for (const Case& c : cases)
    expect_prediction_equals_run(dir, c, {CommGroup::tp, CommGroup::pp, CommGroup::dp});
}

// Context parallelism: the activations of seq_len / cp rows and the attention's working memory,
// its K/V bytes over cp (ring or all_gather, recomputation adding a forward's), and the gradients,
// shards and loss over dp_cp.
TEST(PlanMemory, ContextParallelPredictionEqualsTheTrainersAccount) {
  TempDir dir("plan_memory_cp");
  write_synthetic_dataset(dir / "data", 64, 20000);
  write_layout_config(dir, 4);
  const std::vector<Case> cases = {
      {"cp2", 2, {"parallel.cp=2"}},
      {"cp4_all_gather_selective",
       4,
       {"parallel.cp=4", "parallel.cp_comm=all_gather", "recompute=selective"}},
      {"tp2sp_cp2_full",
       4,
       {"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.cp=2", "recompute=full"}},
      {"dp2cp2_zero3", 4, {"parallel.cp=2", "parallel.zero.stage=3"}},
      {"pp2cp2_zb_h1_zero1",
       4,
       {"parallel.pp=2", "parallel.cp=2", "parallel.pipeline_schedule=zb-h1",
        "parallel.zero.stage=1", "parallel.cp_comm=all_gather"}},
  };
  for (const Case& c : cases)
    expect_prediction_equals_run(
        dir, c, {CommGroup::tp, CommGroup::pp, CommGroup::dp, CommGroup::cp, CommGroup::dp_cp});
}

// FP8's amax reductions (docs/ARCHITECTURE.md §6 "FP8"): per cast over tp and cp, one value each
// (tensorwise) or one per row of the sum (rowwise), forward again under recomputation; the delayed
// recipe's step amaxes over tp and the replicas once a step (its first step also reduces per cast,
// as tensorwise: the prediction is of the steps after it).
TEST(PlanMemory, Fp8PredictionEqualsTheTrainersAccount) {
  TempDir dir("plan_memory_fp8");
  write_synthetic_dataset(dir / "data", 64, 20000);
  write_layout_config(dir, 4);
  const auto fp8 = [](const std::string& recipe, std::vector<std::string> layout) {
    layout.insert(layout.end(), {"precision.compute=bf16", "precision.fp8_min_size=0",
                                 "precision.fp8=" + recipe});
    return layout;
  };
  const std::vector<Case> cases = {
      {"fp8_tensorwise_tp2sp_cp2_full", 4,
       fp8("tensorwise", {"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.cp=2",
                          "recompute=full"})},
      {"fp8_rowwise_tp2_cp2_selective", 4,
       fp8("rowwise", {"parallel.tp=2", "parallel.cp=2", "recompute=selective"})},
      {"fp8_tensorwise_tp2_pp2_interleaved", 4,
       fp8("tensorwise", {"parallel.tp=2", "parallel.pp=2", "parallel.virtual_stages=2",
                          "parallel.pipeline_schedule=interleaved"})},
      {"fp8_delayed_dp2tp2", 4, fp8("delayed", {"parallel.tp=2"}), {2}},
      {"fp8_delayed_cp2", 2, fp8("delayed", {"parallel.cp=2"}), {2}},
  };
  for (const Case& c : cases) {
    std::vector<CommGroup> axes = {CommGroup::tp, CommGroup::pp, CommGroup::dp};
    if (c.name.find("cp2") != std::string::npos)
      axes.insert(axes.end(), {CommGroup::cp, CommGroup::dp_cp});
    expect_prediction_equals_run(dir, c, axes);
  }
}

// A mixture of experts, with and without expert parallelism: exact where the routing cannot
// change the rows, so every token goes to all 4 experts (top_k = experts, no drops at the
// default capacity factor): the balanced routing the planner assumes is then the routing itself
// (each rank keeps N·4 assignments and sends N·4/ep rows to each ep member). Blocks 1 and 3 have
// experts, so both pipeline stages hold one.
TEST(PlanMemory, MoePredictionEqualsTheTrainersAccount) {
  TempDir dir("plan_memory_moe");
  write_synthetic_dataset(dir / "data", 64, 20000);
  write_layout_config(dir, 4);
  const std::vector<std::string> moe = {"model.moe.experts=4", "model.moe.top_k=4",
                                        "model.moe.every=2"};
  const auto with_moe = [&](std::vector<std::string> layout) {
    layout.insert(layout.begin(), moe.begin(), moe.end());
    return layout;
  };
  const std::vector<CommGroup> dense_axes = {CommGroup::tp, CommGroup::pp, CommGroup::dp};
  const std::vector<CommGroup> ep_axes = {CommGroup::tp, CommGroup::pp, CommGroup::dp,
                                          CommGroup::ep, CommGroup::expert_dp};
  const std::vector<std::pair<Case, std::vector<CommGroup>>> cases = {
      {{"moe_dp2_zero1", 2, with_moe({"parallel.zero.stage=1"})}, dense_axes},
      {{"moe_dp4_ep2", 4, with_moe({"parallel.ep=2"})}, ep_axes},
      {{"moe_dp4_ep4_full", 4, with_moe({"parallel.ep=4", "recompute=full"})}, ep_axes},
      {{"moe_dp4_ep2_zero1_2_per_node", 4,
        with_moe({"parallel.ep=2", "parallel.zero.stage=1", "parallel.gpus_per_node=2"})},
       ep_axes},
      {{"moe_dp4_ep2_zero2_micro_batch", 4,
        with_moe({"parallel.ep=2", "parallel.zero.stage=2",
                  "parallel.zero.gradient_reduction=micro_batch"})},
       ep_axes},
      {{"moe_dp4_ep2_zero3_selective", 4,
        with_moe({"parallel.ep=2", "parallel.zero.stage=3", "recompute=selective"})},
       ep_axes},
      {{"moe_tp2sp_pp2dp2_ep2_zb_h1", 8,
        with_moe({"parallel.tp=2", "parallel.sequence_parallel=true", "parallel.pp=2",
                  "parallel.ep=2", "parallel.pipeline_schedule=zb-h1"})},
       ep_axes},
  };
  for (const auto& [c, axes] : cases) expect_prediction_equals_run(dir, c, axes);
}

}  // namespace
}  // namespace strata::testing
