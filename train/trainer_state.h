// Internal to train/trainer*.cpp: a run's state in components, each with one job, which the loop
// (Trainer::run, trainer.cpp) calls in turn:
//   RunCore         what the steps train: the config, the job's groups and mesh, the backend, the
//                   data, the loss scaler and where the run stands (trainer.cpp: its set-up)
//   RunOuter        DiLoCo's wiring around the inner steps: the outer state, its start or resume,
//                   the outer loop, an elastic worker's membership (trainer_outer.cpp)
//   RunCheckpoints  the run's state fresh (seed or --init) or from a checkpoint, and the
//                   checkpoints it writes (trainer_run_state.cpp)
//   RunEvaluator    validation losses and multiple-choice accuracy (trainer_evaluation.cpp)
//   RunReporter     metrics.jsonl and the printed lines: start-up, each step, the end
//                   (trainer_report.cpp)
// Each holds references to those it reads; Trainer owns them all, in this order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/token_shards.h"
#include "parallel/mesh/process_groups.h"
#include "train/backend/training_backend.h"
#include "train/checkpoint/checkpoint.h"
#include "train/core/test_hooks.h"
#include "train/core/training_progress.h"
#include "train/diloco/diloco.h"
#include "train/diloco/diloco_run.h"
#include "train/diloco/elastic_worker.h"
#include "train/diloco/logical_replica.h"
#include "train/diloco/outer_loop.h"
#include "train/multiple_choice.h"
#include "train/step_report.h"
#include "train/trainer.h"
#include "train/training_data.h"
#include "train/training_step.h"

namespace strata {

// The schedule of one step, checked by simulation, and how many micro-batches' activations this
// stage holds at once under it.
struct StepProgram {
  PipelineProgram program;
  PipelineLayout layout;           // where the chunks live
  std::vector<int> slots{1};       // per chunk of this rank: micro-batches held at once
  bool nonblocking_sends = false;  // the executor's transfers (pipeline_executor.h)
};

struct RunCore {
  Config config;
  MpiCommunicator& world;  // the job
  // The job's grid: groups.world() is the ranks that train one model (the job, or this DiLoCo
  // worker), groups.outer() a rank's counterparts in the other workers.
  ProcessGroups groups;
  const Mesh& mesh;
  ReductionGroups reduction_groups;
  GptShape shape;
  Device device;         // resolved: cpu or cuda
  TestHooks test_hooks;  // empty on a user's run (train/core/test_hooks.h)
  StepSettings settings;
  StepProgram step_program;
  std::unique_ptr<TrainingBackend> backend;
  ElementRange share;  // this rank's replica share (checkpoint writes, DiLoCo's outer state)
  // The element ranges this rank writes in a checkpoint (checkpoint_write_ranges), which a
  // logical replica gathers too.
  std::vector<ElementRange> checkpoint_writes;
  TrainingData data;
  LossScaler scaler;
  std::string tokenizer_model;  // data.tokenizer's bytes, checked against the shards
  TrainingProgress progress;

  RunCore(const Config& c, MpiCommunicator& w, const MeshShape& mesh_shape, Device device,
          const TestHooks& hooks);
  bool is_logger() const { return world.rank() == 0; }
  // The backend on this rank's part of the model (and `share`, `checkpoint_writes`); returns where
  // it was placed.
  BackendPlacement make_backend();
};

class RunOuter {
 public:
  // An elastic worker (diloco.join) joins its group here, before any other set-up.
  RunOuter(RunCore& core, const MeshShape& mesh_shape);
  // DiLoCo on the backend `placement` made (no-op without diloco.enabled).
  void make_diloco(const BackendPlacement& placement);
  bool enabled() const { return diloco_ != nullptr; }
  ElasticWorker* elastic() const { return elastic_.get(); }
  // This worker's checkpoint names (diloco_state_prefix).
  const std::string& state_prefix() const { return state_prefix_; }
  // DiLoCo's outer state under the checkpoint's names, and back (with a logical replica: over
  // the logical model on rank 0, so these are collective).
  std::vector<StateBuffer> outer_state();
  void set_outer_state(std::vector<StateBuffer> buffers);
  // DiLoCo's anchors from the parameters (fresh), or its pending sync prepared (resume).
  void start();
  void resume(std::int64_t step);
  // The loop around the inner steps: DiLoCo's, or the plain one that does nothing (outer_loop.h);
  // `metrics`: rank 0's writer, for the syncs' lines.
  std::unique_ptr<OuterLoop> loop(MetricsWriter* metrics);
  // The worker streams the corpus is dealt into, and this worker's: in-job, the workers and this
  // one's index; elastic, diloco.workers and this job's slot (slot w reads worker w's samples).
  int data_stride() const;
  int data_offset() const;
  // An elastic worker leaves its group saying why; nothing otherwise.
  void leave(const std::string& why);

 private:
  RunCore& core_;
  std::unique_ptr<Diloco> diloco_;
  std::unique_ptr<ElasticWorker> elastic_;  // elastic DiLoCo: this job's membership
  // diloco.layouts any: the job's logical copy, on which rank 0 alone runs `diloco_`.
  std::unique_ptr<LogicalReplica> logical_;
  std::string state_prefix_;
};

class RunCheckpoints {
 public:
  // Writes this rank's checkpoint_writes of the backend's layout, every worker's DiLoCo buffers
  // among its datasets (once the backend and DiLoCo exist).
  RunCheckpoints(RunCore& core, RunOuter& outer);
  // Fresh parameters (the seed's, or an --init checkpoint's weights), or the state of a
  // checkpoint (--resume).
  void load(const TrainerOptions& options);
  // A checkpoint of this step (once per step), collective; rank 0 prunes to checkpoint.keep.
  void save();
  // The step of the newest checkpoint this run wrote or resumed from; -1: none.
  std::int64_t last_step() const { return last_step_; }
  // --init: the step of the run whose checkpoint gave the weights (nullopt without --init).
  const std::optional<std::int64_t>& init_step() const { return init_step_; }

 private:
  // The training state this rank holds under the names it takes in checkpoints: the backend's,
  // and DiLoCo's outer state, with this worker's prefix; and back.
  std::vector<StateBuffer> named_state();
  void set_named_state(std::vector<StateBuffer> buffers);
  // --init: the weights of checkpoint `path` into `params` (this rank's range of the master
  // weights): its first worker's, stored under the plain /model names, read from the logical
  // tensors into this layout, bitwise. Returns the step of the run that wrote them.
  std::int64_t read_init_weights(const std::string& path, StateBuffer& params);
  // A resumed run may change keys (a longer run, another learning rate), but says which: the
  // model's shape was checked (check_resumable).
  void warn_changed_keys(const std::string& saved_yaml, const std::string& path) const;
  CheckpointState checkpoint_state() const;

  RunCore& core_;
  RunOuter& outer_;
  CheckpointWriter writer_;
  std::int64_t last_step_ = -1;
  std::optional<std::int64_t> init_step_;
};

class RunEvaluator {
 public:
  // Reads train.eval_multiple_choice's examples, so that a bad file stops the run before any
  // work.
  explicit RunEvaluator(RunCore& core);
  // val_loss (training_data.h: data.val's, else the sources' weighted by share) and, for each
  // source with a val, its own; mc_acc and mc_acc_norm with train.eval_multiple_choice; printed
  // and written to `metrics` by rank 0. Collective.
  void evaluate(MetricsWriter* metrics);

 private:
  // The loss over the first eval_tokens of `split` (docs/ARCHITECTURE.md §5 "Evaluation").
  // Collective: every rank evaluates the same splits in the same order.
  double validation_loss(const TokenSource& split, const std::string& key);
  // The multiple-choice tally over the mesh (train/multiple_choice.h), the same on every rank.
  MultipleChoiceTally multiple_choice_tally();

  RunCore& core_;
  std::vector<MultipleChoiceExample> multiple_choice_;  // train.eval_multiple_choice
};

class RunReporter {
 public:
  RunReporter(RunCore& core, RunOuter& outer);
  // Rank 0: the run's config.yaml and metrics.jsonl (rewritten after a resume's step), and, for
  // --init, the line that says where the weights came from.
  void open(const TrainerOptions& options, const std::optional<std::int64_t>& init_step);
  MetricsWriter* metrics() const { return metrics_.get(); }
  // Rank 0's start-up lines: model, backend, mesh, batch, mixture, DiLoCo, memory.
  void print_startup() const;
  // A step's metrics line and, when due, its printed line. Collective (the MoE figures).
  void step(const StepReport& report, const StepWatch& watch, const JsonLine& job_bytes);
  // The closing line and the last metrics line. Activation memory differs by pipeline stage
  // (1F1B holds more micro-batches on early stages): every rank's pipeline group spans the
  // stages, so rank 0 learns them all.
  void done();

 private:
  // A mixture's training line: the tokens each source has given the job so far, summing to
  // step · global_batch · seq_len · workers. DiLoCo's k workers together have read the first
  // data_position · k samples (RunOuter::data_stride).
  JsonLine tokens_by_source() const;
  // An MoE model's training line: per MoE block "h.<i>", its aux_loss and z_loss (means over the
  // step's micro-batches), dropped_fraction (of the step's choices) and tokens_per_expert
  // ([min, mean, max] over the experts of the assignments they took in the step). Collective
  // over the worker's tp, pp and dp groups (every rank calls it after each step); `has_moe`
  // false without experts, and nothing is exchanged.
  JsonLine moe_metrics(bool* has_moe);

  RunCore& core_;
  RunOuter& outer_;
  std::unique_ptr<MetricsWriter> metrics_;  // rank 0's
  bool reports_loss_scale_ = false;         // fp16: metrics carry the loss scale each step used
};

}  // namespace strata
