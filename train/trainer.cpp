#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>
#include <vector>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "train/backend/cuda_training.h"
#include "train/evaluate.h"
#include "train/metrics/progress_bar.h"
#include "train/multiple_choice.h"
#include "train/optimizer/lr_schedule.h"
#include "train/run_directory.h"
#include "train/run_lock.h"
#include "train/stop_signal.h"
#include "train/trainer_state.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

// What this MPI library cannot do for the config: refuse before any work.
void check_mpi_support(const Config& c) {
  if (c.diloco.enabled && c.diloco.overlap && !mpi_thread_multiple())
    fail("diloco.overlap needs an MPI library that supports MPI_THREAD_MULTIPLE");
}

StepProgram make_step_program(const Config& c, const Mesh& mesh, int accumulation) {
  StepProgram step;
  const PipelineSchedule kind = c.parallel.pipeline_schedule;
  const int chunks = c.parallel.virtual_stages;
  step.program = make_pipeline_schedule(kind, mesh.pp_size(), accumulation, chunks);
  const PipelineSimulation simulation = pipeline_schedule_simulation(kind, chunks);
  step.layout = simulation.layout;
  step.nonblocking_sends = simulation.nonblocking_sends;
  const PipelineStats stats = simulate_pipeline(step.program, accumulation, simulation);
  step.slots.clear();
  for (int held : stats.max_held_by_chunk[static_cast<std::size_t>(mesh.pp_rank())])
    step.slots.push_back(std::max(1, held));
  return step;
}

// Micro-batch a of this step on this replica: samples data_position + (a·dp + dp_rank)·micro + b
// of this worker's stream. The global batch is split the same way under any layout, so every
// layout trains on exactly the same sequences. DiLoCo worker w of k reads every k-th sample of the
// corpus order from w (position p is sample p·k + w, `stride` k, `offset` w: RunOuter's): k
// workers together read what one run with a k times larger batch would, and one worker reads what
// plain training reads.
// Under context parallelism the replica's cp ranks read the same samples and each keeps its
// chunks of them (model/core/context_chunks.h).
void sample_micro_batch(RunCore& core, int stride, int offset, int a, std::int32_t* inputs,
                        std::int32_t* targets) {
  const int T = core.config.model.seq_len, micro = core.config.train.micro_batch;
  const std::int64_t first =
      core.progress.data_position +
      (static_cast<std::int64_t>(a) * core.settings.dp + core.mesh.dp_rank()) * micro;
  const ContextChunks context{core.mesh.cp_size(), core.mesh.cp_rank()};
  std::vector<std::int32_t> whole(context.split() ? 2 * static_cast<std::size_t>(micro) * T : 0);
  std::int32_t* sequences = context.split() ? whole.data() : inputs;
  std::int32_t* next =
      context.split() ? whole.data() + static_cast<std::size_t>(micro) * T : targets;
  for (int b = 0; b < micro; ++b)
    core.data.sample(static_cast<std::uint64_t>((first + b) * stride + offset), sequences + b * T,
                     next + b * T);
  if (!context.split()) return;
  context.take(sequences, inputs, micro, T);
  context.take(next, targets, micro, T);
}

// Why the run stops after this step (a signal on any rank, or train.stop_after), or "" to go on:
// every rank decides alike.
std::string stop_reason(RunCore& core) {
  std::int64_t signalled = stop_requested() ? 1 : 0;
  core.world.all_reduce_max(&signalled, 1);
  const std::string step = std::to_string(core.progress.step);
  if (signalled) return "stopped by signal at step " + step;
  const int stop_after = core.config.train.stop_after;
  if (stop_after > 0 && core.progress.step >= stop_after &&
      core.progress.step < core.config.train.steps)
    return "stopped after step " + step + " (train.stop_after)";
  return "";
}

}  // namespace

RunCore::RunCore(const Config& c, MpiCommunicator& w, const MeshShape& mesh_shape, Device d,
                 const TestHooks& hooks)
    : config(c),
      world(w),
      // An elastic worker is DiLoCo's one worker of this job; its group is over Gloo.
      groups(w,
             !c.diloco.enabled    ? 0
             : c.diloco.elastic() ? 1
                                  : c.diloco.workers,
             mesh_shape, c.parallel.gpus_per_node),
      mesh(groups.mesh()),
      reduction_groups(groups.reductions()),
      shape(gpt_shape_of(c.model)),
      device(d),
      test_hooks(hooks),
      data(c),
      scaler(LossScaler::for_config(c.precision)) {
  settings.dp = mesh.dp_size();
  settings.cp = mesh.cp_size();
  settings.accumulation = c.train.global_batch / (c.train.micro_batch * settings.dp);
  settings.global_batch = c.train.global_batch;
  settings.grad_clip = c.optimizer.grad_clip;
  settings.max_nonfinite_in_a_row = max_nonfinite_in_a_row(c.train);
  settings.test_hooks = &test_hooks;
  step_program = make_step_program(c, mesh, settings.accumulation);
}

BackendPlacement RunCore::make_backend() {
  BackendPlacement placement;
  const ReductionPlacement reduction = reduction_placement(
      config, shape, mesh.shape(), mesh.tp_rank(), mesh.pp_rank(), mesh.dp_rank(), mesh.cp_rank());
  placement.partition = reduction.partition;
  placement.groups = &groups;
  placement.program = &step_program.program;
  placement.layout = step_program.layout;
  placement.slots = step_program.slots;
  placement.nonblocking_sends = step_program.nonblocking_sends;
  const ParameterLayout layout = ParameterLayout::for_partition(shape, placement.partition);
  placement.plan = make_reduction_plan(layout, reduction);
  backend = make_training_backend(device, config, shape, placement);
  // The data-parallel ranks share the writing: each its ZeRO shard, or its share of the layout.
  share = replica_share(layout, reduction);
  checkpoint_writes = checkpoint_write_ranges(backend->layout(), placement.partition, share);
  return placement;
}

Trainer::Trainer(const Config& config, MpiCommunicator& world, const TrainerOptions& options) {
  // Before any work: a layout that does not fit the world, a device it cannot use.
  const MeshShape mesh_shape = resolve_mesh(config, world.size());
  const Device device = resolve_device(config, gpt_shape_of(config.model));
  check_mpi_support(config);
  core_ = std::make_unique<RunCore>(config, world, mesh_shape, device, options.test_hooks);
  RunCore& core = *core_;
  outer_ = std::make_unique<RunOuter>(core, mesh_shape);
  core.tokenizer_model = core.data.check(config);
  evaluator_ = std::make_unique<RunEvaluator>(core);
  const BackendPlacement placement = core.make_backend();
  outer_->make_diloco(placement);
  checkpoints_ = std::make_unique<RunCheckpoints>(core, *outer_);
  claim_run(config, world, options);
  checkpoints_->load(options);
  reporter_ = std::make_unique<RunReporter>(core, *outer_);
  reporter_->open(options, checkpoints_->init_step());
}

Trainer::~Trainer() = default;

// Rank 0 takes the run directory's lock and, for a fresh run, claims the directories from an
// earlier run (train/run_directory.h); when either fails, every rank stops alike. Rank 0 alone
// decides: it writes the run's config and metrics right after, which a slower rank's own look
// would take for an earlier run's.
void Trainer::claim_run(const Config& config, MpiCommunicator& world,
                        const TrainerOptions& options) {
  std::string error;
  if (world.rank() == 0) {
    try {
      run_lock_ = std::make_unique<RunLock>(config.run_directory());
      if (!options.resume_from) claim_run_directory(config, options.overwrite);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  // Rank 0's verdict to every rank, through MPI itself: set-up bookkeeping, not the training's
  // traffic that the communicator counts (a broadcast kind would appear in every step's
  // comm_bytes).
  long long size = static_cast<long long>(error.size());
  MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, world.comm());
  error.resize(static_cast<std::size_t>(size));
  MPI_Bcast(error.data(), static_cast<int>(size), MPI_CHAR, 0, world.comm());
  if (!error.empty()) fail_together(error);
  if (run_lock_ && !run_lock_->takeover().empty())
    std::cout << "note: " << run_lock_->takeover() << std::endl;
}

int Trainer::run() {
  RunCore& core = *core_;
  const Config& c = core.config;
  const double tokens_per_step = static_cast<double>(c.train.global_batch) * c.model.seq_len;
  // An elastic worker's slot, and so its offset, may change at a sync.
  const MicroBatchSource train_batch = [&](int a, std::int32_t* inputs, std::int32_t* targets) {
    sample_micro_batch(core, outer_->data_stride(), outer_->data_offset(), a, inputs, targets);
  };
  install_stop_signal_handlers();
  if (core.is_logger()) reporter_->print_startup();
  const std::unique_ptr<OuterLoop> outer = outer_->loop(reporter_->metrics());
  if (!outer->start(*core.backend)) {
    outer_->leave("found its group finished");
    return 0;
  }
  double last_loss = 0;  // the last step's, for a sync that finish() applies
  ProgressBar bar(core.is_logger(), core.progress.step, c.train.steps);  // on a terminal only

  const double least_step_seconds = core.test_hooks.step_seconds;
  while (core.progress.step < c.train.steps) {
    bar.draw(core.progress.step);
    const StepWatch watch(core.groups);
    const auto step_start = std::chrono::steady_clock::now();
    outer->begin_inner_step();
    core.settings.lr =
        learning_rate(c.optimizer, static_cast<int>(core.progress.step), c.train.steps);
    const StepResult result = training_step(*core.backend, core.reduction_groups, core.settings,
                                            train_batch, core.scaler, core.progress);
    bar.erase();  // the step's log lines take its row
    const std::int64_t step = core.progress.step;
    if (least_step_seconds > 0)
      std::this_thread::sleep_until(step_start + std::chrono::duration<double>(least_step_seconds));
    // A step that stops the run is logged, but starts no outer sync.
    if (!result.stop) outer->end_inner_step(*core.backend, step);
    // The wait for other workers at a sync is the sync's (its line's outer_wait_s), not the step's.
    const double step_ms = watch.elapsed_ms() - 1e3 * outer->member_wait_seconds();
    const JsonLine job_bytes = watch.job_link_bytes();
    reporter_->step(StepReport{result, step, core.settings.lr, step_ms, tokens_per_step}, watch,
                    job_bytes);
    if (result.stop)
      fail_together(
          nonfinite_stop_message(core.settings, core.progress, checkpoints_->last_step()));
    outer->report(result.loss);
    last_loss = result.loss;
    if (c.train.eval_every > 0 && step % c.train.eval_every == 0 && step != c.train.steps)
      evaluator_->evaluate(reporter_->metrics());
    if (c.checkpoint.every > 0 && step % c.checkpoint.every == 0) checkpoints_->save();
    if (const std::string why = stop_reason(core); !why.empty()) {
      checkpoints_->save();
      if (core.is_logger()) std::cout << why << "\n";
      outer_->leave(why);
      return 0;
    }
  }
  outer->finish(*core.backend, last_loss);  // before the final evaluation
  evaluator_->evaluate(reporter_->metrics());
  checkpoints_->save();
  reporter_->done();
  outer_->leave("finished its " + std::to_string(c.train.steps) + " steps");
  return 0;
}

}  // namespace strata
