// Internal to train/trainer*.cpp: the state of one run (Trainer::State) and the steps of its
// life, kept in three files: trainer.cpp (set-up, the data and evaluation helpers and the loop),
// trainer_run_state.cpp (fresh or resumed state, checkpoints) and trainer_report.cpp (the
// start-up report and the closing lines).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data/token_shards.h"
#include "parallel/mesh/process_groups.h"
#include "train/backend/training_backend.h"
#include "train/checkpoint/checkpoint.h"
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

struct Trainer::State {
  Config config;
  MpiCommunicator& world;  // the job
  // The job's grid: groups.world() is the ranks that train one model (the job, or this DiLoCo
  // worker), groups.outer() a rank's counterparts in the other workers.
  ProcessGroups groups;
  const Mesh& mesh;
  ReductionGroups reduction_groups;
  StepSettings settings;
  TestHooks test_hooks;  // empty on a user's run (train/core/test_hooks.h)
  GptShape shape;
  StepProgram step_program;
  Device device = Device::cpu;  // resolved: cpu or cuda
  std::unique_ptr<TrainingBackend> backend;
  CheckpointWriter checkpoint_writer;
  TrainingData data;
  LossScaler scaler;
  std::string tokenizer_model;
  std::vector<MultipleChoiceExample> multiple_choice;  // train.eval_multiple_choice
  TrainingProgress progress;
  std::int64_t last_checkpoint_step = -1;
  // --init: the step of the run whose checkpoint gave the weights (nullopt without --init).
  std::optional<std::int64_t> init_step;
  std::unique_ptr<MetricsWriter> metrics;
  bool reports_loss_scale = false;  // fp16: metrics carry the loss scale each step used
  std::unique_ptr<Diloco> diloco;
  std::unique_ptr<ElasticWorker> elastic;  // elastic DiLoCo (diloco.join): this job's membership
  // diloco.layouts any: the job's logical copy, on which rank 0 alone runs `diloco`.
  std::unique_ptr<LogicalReplica> logical;
  ElementRange share;        // this rank's replica share (checkpoint buffers of the outer state)
  std::string state_prefix;  // this worker's checkpoint names (diloco_state_prefix)

  State(const Config& c, MpiCommunicator& w, const MeshShape& mesh_shape);
  bool is_logger() const { return world.rank() == 0; }
  // The backend on this rank's part of the model, its checkpoint writer, and DiLoCo if enabled.
  void make_backend();
  void make_diloco(const BackendPlacement& placement);
  // DiLoCo's outer state under named_state()'s names, and back (with a logical replica: over the
  // logical model on rank 0, so these are collective).
  std::vector<StateBuffer> outer_state();
  void set_outer_state(std::vector<StateBuffer> buffers);
  // DiLoCo's anchors from the parameters (fresh), or its pending sync prepared (resume).
  void start_diloco();
  void resume_diloco(std::int64_t step);
  // The training state this rank holds under the names it takes in checkpoints: the backend's,
  // and DiLoCo's outer state, with this worker's prefix.
  std::vector<StateBuffer> named_state();
  // Hands buffers read under named_state()'s names back to the backend and to DiLoCo.
  void set_named_state(std::vector<StateBuffer> buffers);
  // Fresh parameters (the seed's, or an --init checkpoint's weights), or the state of a
  // checkpoint (--resume).
  void load_state(const TrainerOptions& options);
  // --init: the weights of checkpoint `path` into `params` (this rank's range of the master
  // weights): its first worker's, stored under the plain /model names, read from the logical
  // tensors into this layout, bitwise. Returns the step of the run that wrote them.
  std::int64_t read_init_weights(const std::string& path, StateBuffer& params);
  // A resumed run may change keys (a longer run, another learning rate), but says which: the
  // model's shape was checked (check_resumable).
  void warn_changed_keys(const std::string& saved_yaml, const std::string& path) const;
  // Micro-batch a of this step on this replica: samples data_position + (a·dp + dp_rank)·micro +
  // b of this worker's stream. The global batch is split the same way under any layout, so every
  // layout trains on exactly the same sequences. DiLoCo worker w of k reads every k-th sample of
  // the corpus order from w (position p is sample p·k + w): k workers together read what one run
  // with a k times larger batch would, and one worker reads what plain training reads.
  void sample_micro_batch(int a, std::int32_t* inputs, std::int32_t* targets);
  // The worker streams the corpus is dealt into, and this worker's: in-job, the workers and this
  // one's index; elastic, diloco.workers and this job's slot (slot w reads worker w's samples).
  int data_stride() const;
  int data_offset() const;
  // The loss over the first eval_tokens of `split` (docs/ARCHITECTURE.md §5 "Evaluation").
  // Collective: every rank evaluates the same splits in the same order.
  double validation_loss(const TokenSource& split, const std::string& key);
  // train.eval_multiple_choice's examples (data/multiple_choice.h) tokenized with data.tokenizer,
  // read at set-up so that a bad file stops the run before any work; none without the key.
  void read_multiple_choice();
  // Their tally over the mesh (train/multiple_choice.h), the same on every rank. Collective.
  MultipleChoiceTally multiple_choice_tally();
  // val_loss (training_data.h: data.val's, else the sources' weighted by share) and, for each
  // source with a val, its own; mc_acc and mc_acc_norm with train.eval_multiple_choice.
  void evaluate();
  // A mixture's training line: the tokens each source has given the job so far, summing to
  // step · global_batch · seq_len · workers. DiLoCo's k workers together have read the first
  // data_position · k samples (sample_micro_batch).
  JsonLine tokens_by_source() const;
  // An MoE model's training line: per MoE block "h.<i>", its aux_loss and z_loss (means over the
  // step's micro-batches), dropped_fraction (of the step's choices) and tokens_per_expert
  // ([min, mean, max] over the experts of the assignments they took in the step). Collective
  // over the worker's tp, pp and dp groups (every rank calls it after each step); `has_moe`
  // false without experts, and nothing is exchanged.
  JsonLine moe_metrics(bool* has_moe);
  // A checkpoint of this step (once per step), collective; rank 0 prunes to checkpoint.keep.
  void save_checkpoint();
  CheckpointState checkpoint_state() const;
  // Why the run stops after this step (a signal on any rank, or train.stop_after), or "" to go
  // on: every rank decides alike.
  std::string stop_reason();
  // The loop around the inner steps: DiLoCo's, or the plain one that does nothing (outer_loop.h).
  std::unique_ptr<OuterLoop> outer_loop();
  // Rank 0's start-up lines: model, backend, mesh, batch, mixture, DiLoCo, memory.
  void print_startup() const;
  // Activation memory differs by pipeline stage (1F1B holds more micro-batches on early
  // stages): every rank's pipeline group spans the stages, so rank 0 learns them all.
  void report_done();
};

}  // namespace strata
