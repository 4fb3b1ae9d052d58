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

}  // namespace

Trainer::State::State(const Config& c, MpiCommunicator& w, const MeshShape& mesh_shape)
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
      data(c),
      scaler(LossScaler::for_config(c.precision)) {
  settings.dp = mesh.dp_size();
  settings.accumulation = c.train.global_batch / (c.train.micro_batch * settings.dp);
  settings.global_batch = c.train.global_batch;
  settings.grad_clip = c.optimizer.grad_clip;
  settings.max_nonfinite_in_a_row = max_nonfinite_in_a_row(c.train);
  settings.test_hooks = &test_hooks;
  step_program = make_step_program(c, mesh, settings.accumulation);
  reports_loss_scale = c.precision.compute == cpu::ComputeDtype::fp16;
  state_prefix = diloco_state_prefix(groups.worker_index());
  if (c.diloco.elastic()) elastic = std::make_unique<ElasticWorker>(c, mesh_shape, w);
}

int Trainer::State::data_stride() const {
  return elastic ? config.diloco.workers : groups.workers();
}

int Trainer::State::data_offset() const {
  return elastic ? elastic->slot() : groups.worker_index();
}

void Trainer::State::make_backend() {
  BackendPlacement placement;
  const ReductionPlacement reduction = reduction_placement(
      config, shape, mesh.shape(), mesh.tp_rank(), mesh.pp_rank(), mesh.dp_rank());
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
  checkpoint_writer =
      CheckpointWriter{&backend->layout(),
                       shape,
                       checkpoint_write_ranges(backend->layout(), placement.partition, share),
                       &world,
                       {}};
  if (config.diloco.enabled) make_diloco(placement);
}

void Trainer::State::make_diloco(const BackendPlacement& placement) {
  const DilocoPlacement local = diloco_placement(groups, placement, backend->layout(), share);
  if (config.diloco.layouts == WorkerLayouts::any) {
    // The replica's weights: under ZeRO < 3 the whole layout, otherwise the share.
    const ElementRange held = local.gather_over_dp
                                  ? ElementRange{0, std::max(backend->layout().total(), share.end)}
                                  : share;
    logical = std::make_unique<LogicalReplica>(backend->layout(), shape, checkpoint_writer.writes,
                                               held, world);
    diloco = std::make_unique<Diloco>(
        config.diloco, config.run.seed, logical->logical_layout(), shape,
        logical_diloco_placement(groups, logical->leads(), logical->size()), config.optimizer,
        config.train.steps, test_hooks);
  } else {
    diloco = std::make_unique<Diloco>(config.diloco, config.run.seed, backend->layout(), shape,
                                      local, config.optimizer, config.train.steps, test_hooks);
  }
  // Every worker's buffers are datasets of the checkpoint (those of per-tensor buffers are created
  // by their writers).
  std::vector<StateDatasets> datasets;
  for (const StateBuffer& b : named_state())
    if (!b.per_tensor) datasets.push_back({b.name.substr(state_prefix.size()), b.stored});
  checkpoint_writer.datasets = every_workers_datasets(datasets, groups.workers());
}

void Trainer::State::sample_micro_batch(int a, std::int32_t* inputs, std::int32_t* targets) {
  const int T = config.model.seq_len, micro = config.train.micro_batch;
  const std::int64_t first = progress.data_position +
                             (static_cast<std::int64_t>(a) * settings.dp + mesh.dp_rank()) * micro;
  for (int b = 0; b < micro; ++b)
    data.sample(static_cast<std::uint64_t>((first + b) * data_stride() + data_offset()),
                inputs + b * T, targets + b * T);
}

double Trainer::State::validation_loss(const TokenSource& split, const std::string& key) {
  const int T = config.model.seq_len;
  const LossSum local = evaluate_loss(backend->evaluator(), split, config.train.eval_tokens, T,
                                      config.train.micro_batch, mesh.dp_rank(), mesh.dp_size());
  // The sums arrive on the last stage of every replica.
  double totals[2] = {local.sum, static_cast<double>(local.count)};
  groups.pp().all_reduce_sum(totals, 2);
  groups.dp().all_reduce_sum(totals, 2);
  if (totals[1] == 0) fail(key, " has too few tokens for one evaluation window of ", T + 1);
  return totals[0] / totals[1];
}

MultipleChoiceTally Trainer::State::multiple_choice_tally() {
  const MultipleChoiceTally local =
      evaluate_multiple_choice(backend->evaluator(), multiple_choice, config.model.seq_len,
                               config.train.micro_batch, mesh.dp_rank(), mesh.dp_size());
  // The tallies arrive on the last stage of every replica; counts are exact in a double.
  double totals[3] = {static_cast<double>(local.examples), static_cast<double>(local.correct),
                      static_cast<double>(local.correct_norm)};
  groups.pp().all_reduce_sum(totals, 3);
  groups.dp().all_reduce_sum(totals, 3);
  return {static_cast<std::int64_t>(totals[0]), static_cast<std::int64_t>(totals[1]),
          static_cast<std::int64_t>(totals[2])};
}

void Trainer::State::evaluate() {
  if (!data.evaluates() && multiple_choice.empty()) return;
  const std::vector<double> weights = data.evaluation_weights();
  JsonLine by_source;
  std::string by_source_text;
  double mixed = 0;
  for (std::size_t s = 0; s < data.sources().size(); ++s) {
    const TrainingData::Source& source = data.sources()[s];
    if (!source.val) continue;
    const double loss = validation_loss(*source.val, source.key + ".val");
    mixed += weights[s] * loss;
    by_source.add(source.name, loss);
    char number[32];
    std::snprintf(number, sizeof number, " %.4f", loss);
    by_source_text += (by_source_text.empty() ? "" : ", ") + source.name + number;
  }
  const double val_loss = data.val() ? validation_loss(*data.val(), "data.val") : mixed;
  const MultipleChoiceTally choice =
      multiple_choice.empty() ? MultipleChoiceTally{} : multiple_choice_tally();
  if (!is_logger()) return;
  JsonLine line;
  line.add("step", progress.step);
  std::string text = "eval step " + std::to_string(progress.step);
  char number[96];
  if (data.evaluates()) {
    std::snprintf(number, sizeof number, " | val_loss %.4f", val_loss);
    text += number + (by_source_text.empty() ? "" : " | by source: " + by_source_text);
    line.add("val_loss", val_loss);
    if (!by_source_text.empty()) line.add("val_loss_by_source", by_source);
  }
  if (choice.examples > 0) {
    std::snprintf(number, sizeof number, " | mc_acc %.4f mc_acc_norm %.4f over %lld examples",
                  choice.accuracy(), choice.accuracy_norm(),
                  static_cast<long long>(choice.examples));
    text += number;
    line.add("mc_acc", choice.accuracy()).add("mc_acc_norm", choice.accuracy_norm());
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  metrics->write(line);
}

JsonLine Trainer::State::tokens_by_source() const {
  const auto samples = static_cast<std::uint64_t>(progress.data_position) *
                       static_cast<std::uint64_t>(data_stride());
  const std::vector<std::uint64_t> drawn = data.drawn_before(samples);
  JsonLine line;
  for (std::size_t s = 0; s < drawn.size(); ++s)
    line.add(data.sources()[s].name, drawn[s] * static_cast<std::uint64_t>(config.model.seq_len));
  return line;
}

std::string Trainer::State::stop_reason() {
  std::int64_t signalled = stop_requested() ? 1 : 0;
  world.all_reduce_max(&signalled, 1);
  const std::string step = std::to_string(progress.step);
  if (signalled) return "stopped by signal at step " + step;
  const int stop_after = config.train.stop_after;
  if (stop_after > 0 && progress.step >= stop_after && progress.step < config.train.steps)
    return "stopped after step " + step + " (train.stop_after)";
  return "";
}

std::unique_ptr<OuterLoop> Trainer::State::outer_loop() {
  if (!diloco) return std::make_unique<OuterLoop>();
  if (elastic)
    return make_elastic_loop(*diloco, *elastic, logical.get(), progress, config.train.global_batch,
                             config.train.steps, groups, is_logger() ? metrics.get() : nullptr);
  return make_diloco_loop(*diloco, groups, is_logger() ? metrics.get() : nullptr);
}

void Trainer::State::read_multiple_choice() {
  const std::string& path = config.train.eval_multiple_choice;
  if (path.empty()) return;
  const Tokenizer tokenizer = Tokenizer::from_serialized(tokenizer_model, config.data.tokenizer);
  if (tokenizer.vocab_size() > config.model.vocab_size)
    fail("train.eval_multiple_choice: data.tokenizer has ", tokenizer.vocab_size(),
         " tokens but the model only ", config.model.vocab_size);
  multiple_choice = strata::read_multiple_choice(path, tokenizer, config.model.seq_len);
}

Trainer::Trainer(const Config& config, MpiCommunicator& world, const TrainerOptions& options) {
  // Before any work: a layout that does not fit the world, a device it cannot use.
  const MeshShape mesh_shape = resolve_mesh(config, world.size());
  const Device device = resolve_device(config, gpt_shape_of(config.model));
  check_mpi_support(config);
  state_ = std::make_unique<State>(config, world, mesh_shape);
  State& s = *state_;
  s.device = device;
  s.test_hooks = options.test_hooks;
  s.tokenizer_model = s.data.check(config);
  s.read_multiple_choice();
  s.make_backend();
  claim_run(config, world, options);
  s.load_state(options);
  if (s.is_logger()) {
    const std::string run_dir = config.run_directory();
    fs::create_directories(run_dir);
    std::ofstream(fs::path(run_dir) / "config.yaml") << config_to_yaml(config);
    s.metrics = std::make_unique<MetricsWriter>((fs::path(run_dir) / "metrics.jsonl").string(),
                                                options.resume_from ? s.progress.step : -1);
    // The run's first line says where its weights came from; a resume keeps it (step 0).
    if (options.init_from)
      s.metrics->write(JsonLine()
                           .add("step", std::int64_t{0})
                           .add("init", *options.init_from)
                           .add("init_step", *s.init_step));
  }
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
  State& s = *state_;
  const Config& c = s.config;
  const double tokens_per_step = static_cast<double>(c.train.global_batch) * c.model.seq_len;
  const MicroBatchSource train_batch = [&](int a, std::int32_t* inputs, std::int32_t* targets) {
    s.sample_micro_batch(a, inputs, targets);
  };
  install_stop_signal_handlers();
  if (s.is_logger()) s.print_startup();
  const std::unique_ptr<OuterLoop> outer = s.outer_loop();
  if (!outer->start(*s.backend)) {
    if (s.elastic) s.elastic->leave("found its group finished");
    return 0;
  }
  double last_loss = 0;  // the last step's, for a sync that finish() applies
  ProgressBar bar(s.is_logger(), s.progress.step, c.train.steps);  // on a terminal only

  const double least_step_seconds = s.test_hooks.step_seconds;
  while (s.progress.step < c.train.steps) {
    bar.draw(s.progress.step);
    const StepWatch watch(s.groups);
    const auto step_start = std::chrono::steady_clock::now();
    outer->begin_inner_step();
    s.settings.lr = learning_rate(c.optimizer, static_cast<int>(s.progress.step), c.train.steps);
    const StepResult result = training_step(*s.backend, s.reduction_groups, s.settings, train_batch,
                                            s.scaler, s.progress);
    bar.erase();  // the step's log lines take its row
    const std::int64_t step = s.progress.step;
    // A step that stops the run is logged, but starts no outer sync.
    if (least_step_seconds > 0)
      std::this_thread::sleep_until(step_start + std::chrono::duration<double>(least_step_seconds));
    if (!result.stop) outer->end_inner_step(*s.backend, step);
    // The wait for other workers at a sync is the sync's (its line's outer_wait_s), not the step's.
    const double step_ms = watch.elapsed_ms() - 1e3 * outer->member_wait_seconds();
    const JsonLine job_bytes = watch.job_link_bytes();
    const StepReport report{result, step, s.settings.lr, step_ms, tokens_per_step};
    // The step's communication is read before the MoE figures are summed over the ranks: that
    // bookkeeping is no part of the training's traffic (as comm_bytes_job leaves it out too).
    JsonLine line;
    if (s.is_logger()) line = step_metrics(report, watch, *s.backend, s.reports_loss_scale);
    bool has_moe = false;
    const JsonLine moe = s.moe_metrics(&has_moe);
    if (s.is_logger()) {
      line.add("comm_bytes_job", job_bytes);
      if (has_moe) line.add("moe", moe);
      if (s.data.is_mixture()) line.add("tokens_by_source", s.tokens_by_source());
      s.metrics->write(line);
      // A skipped step is always shown: the steps before a non-finite stop say how it came.
      if (step % c.train.log_every == 0 || step == c.train.steps || step == 1 || !result.applied)
        print_step(report, c.train.steps);
    }
    if (result.stop)
      fail_together(nonfinite_stop_message(s.settings, s.progress, s.last_checkpoint_step));
    outer->report(result.loss);
    last_loss = result.loss;
    if (c.train.eval_every > 0 && step % c.train.eval_every == 0 && step != c.train.steps)
      s.evaluate();
    if (c.checkpoint.every > 0 && step % c.checkpoint.every == 0) s.save_checkpoint();
    if (const std::string why = s.stop_reason(); !why.empty()) {
      s.save_checkpoint();
      if (s.is_logger()) std::cout << why << "\n";
      if (s.elastic) s.elastic->leave(why);
      return 0;
    }
  }
  outer->finish(*s.backend, last_loss);  // before the final evaluation
  s.evaluate();
  s.save_checkpoint();
  s.report_done();
  if (s.elastic) s.elastic->leave("finished its " + std::to_string(c.train.steps) + " steps");
  return 0;
}

}  // namespace strata
