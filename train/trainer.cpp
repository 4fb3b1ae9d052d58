#include "train/trainer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <vector>

#include "data/token_shards.h"
#include "model/core/error.h"
#include "model/kernels/cpu/blas.h"
#include "parallel/process_groups.h"
#include "train/checkpoint.h"
#include "train/checkpoint_verify.h"
#include "train/cuda_training.h"
#include "train/diloco.h"
#include "train/diloco_fragments.h"
#include "train/diloco_run.h"
#include "train/evaluate.h"
#include "train/lr_schedule.h"
#include "train/process_memory.h"
#include "train/progress_bar.h"
#include "train/step_report.h"
#include "train/stop_signal.h"
#include "train/training_data.h"
#include "train/training_step.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

GptShape shape_of(const ModelConfig& m) {
  return GptShape{m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size};
}

// What this MPI library cannot do for the config: refuse before any work.
void check_mpi_support(const Config& c) {
  if (c.diloco.enabled && c.diloco.overlap && !mpi_thread_multiple())
    fail("diloco.overlap needs an MPI library that supports MPI_THREAD_MULTIPLE");
}

// The schedule of one step, checked by simulation, and how many micro-batches' activations this
// stage holds at once under it.
struct StepProgram {
  PipelineProgram program;
  int slots = 1;
};

StepProgram make_step_program(const Config& c, const Mesh& mesh, int accumulation) {
  StepProgram step;
  step.program = make_pipeline_schedule(parse_pipeline_schedule(c.parallel.pipeline_schedule),
                                        mesh.pp_size(), accumulation);
  const PipelineStats stats = simulate_pipeline(step.program, accumulation);
  step.slots = std::max(1, stats.max_activations_held[mesh.pp_rank()]);
  return step;
}

}  // namespace

struct Trainer::State {
  Config config;
  MpiCommunicator& world;  // the job
  WorkerGroups workers;
  MpiCommunicator& team;  // the ranks that train one model: the world, or this DiLoCo worker
  ProcessGroups groups;
  const Mesh& mesh;
  ReductionGroups reduction_groups;
  StepSettings settings;
  std::set<std::int64_t> nonfinite_test_steps;  // test hook (training_step.h)
  GptShape shape;
  StepProgram step_program;
  std::string device;
  std::unique_ptr<TrainingBackend> backend;
  CheckpointWriter checkpoint_writer;
  TrainingData data;
  LossScaler scaler;
  std::string tokenizer_model;
  TrainingProgress progress;
  std::int64_t last_checkpoint_step = -1;
  std::unique_ptr<MetricsWriter> metrics;
  bool reports_loss_scale = false;  // fp16: metrics carry the loss scale each step used
  std::unique_ptr<Diloco> diloco;
  std::string state_prefix;  // this worker's checkpoint names (diloco_state_prefix)

  State(const Config& c, MpiCommunicator& w, const MeshShape& mesh_shape)
      : config(c),
        world(w),
        workers(make_worker_groups(c, w)),
        team(workers.worker_comm ? *workers.worker_comm : w),
        groups(Mesh(mesh_shape, team.rank(), c.parallel.gpus_per_node), team),
        mesh(groups.mesh()),
        reduction_groups{&groups.tp(), &groups.dp(), &groups.pp()},
        shape(shape_of(c.model)),
        data(c),
        scaler(LossScaler::for_config(c.precision)) {
    settings.dp = mesh.dp_size();
    settings.accumulation = c.train.global_batch / (c.train.micro_batch * settings.dp);
    settings.global_batch = c.train.global_batch;
    settings.grad_clip = c.optimizer.grad_clip;
    settings.max_nonfinite_in_a_row = max_nonfinite_in_a_row(c.train);
    nonfinite_test_steps = test_nonfinite_steps();
    step_program = make_step_program(c, mesh, settings.accumulation);
    reports_loss_scale = c.precision.compute == "fp16";
    state_prefix = diloco_state_prefix(workers.worker);
  }

  bool is_logger() const { return world.rank() == 0; }

  void make_backend() {
    BackendPlacement placement;
    const ReductionPlacement reduction = reduction_placement(
        config, shape, MeshShape{mesh.tp_size(), mesh.pp_size(), mesh.dp_size()}, mesh.tp_rank(),
        mesh.pp_rank(), mesh.dp_rank());
    placement.partition = reduction.partition;
    placement.groups = &groups;
    placement.program = &step_program.program;
    placement.slots = step_program.slots;
    const ParameterLayout layout = ParameterLayout::for_partition(shape, placement.partition);
    placement.plan = make_reduction_plan(layout, reduction);
    int gpu = 0;
    if (device == "cuda") {
      // One GPU per rank: the ranks of a node take its devices in turn.
      gpu = world.rank() % config.parallel.gpus_per_node % cuda_device_count();
      // Collective: every rank learns which GPU each rank computes on.
      placement.nccl =
          choose_nccl(config.parallel.device_comm, gather_gpu_ids(team, cuda_device_identity(gpu)));
      // ZeRO++ on CUDA runs through the host (train/cuda_staged_sharding.h).
      const auto& zero = config.parallel.zero;
      if (placement.plan.gradients_by_segment &&
          (zero.quantized_weights || zero.hierarchical_partition || zero.quantized_gradients)) {
        if (config.parallel.device_comm == "nccl")
          fail(
              "parallel.device_comm: nccl does not carry the ZeRO++ switches yet (they run "
              "through the host); use auto or host");
        placement.nccl = false;
      }
      // A lone stage trains one micro-batch at a time (the fused pass), whatever the schedule.
      if (mesh.pp_size() == 1) placement.slots = 1;
    }
    backend = make_training_backend(device, config, shape, placement, gpu);
    // The data-parallel ranks share the writing: each its ZeRO shard, or its share of the layout.
    const ElementRange share = replica_share(layout, reduction);
    checkpoint_writer =
        CheckpointWriter{&backend->layout(),
                         shape,
                         checkpoint_write_ranges(backend->layout(), placement.partition, share),
                         &world,
                         {}};
    if (config.diloco.enabled) make_diloco(placement, share);
  }

  void make_diloco(const BackendPlacement& placement, ElementRange share) {
    diloco = std::make_unique<Diloco>(
        config.diloco, config.run.seed, backend->layout(), shape,
        diloco_placement(workers, groups, placement, backend->layout(), share));
    // Every worker's buffers are datasets of the checkpoint.
    std::vector<std::string> names;
    for (const StateBuffer& b : named_state()) names.push_back(b.name.substr(state_prefix.size()));
    checkpoint_writer.dataset_names = every_workers_names(names, workers.workers);
  }

  // The training state this rank holds under the names it takes in checkpoints: the backend's,
  // and DiLoCo's outer state, with this worker's prefix.
  std::vector<StateBuffer> named_state() {
    std::vector<StateBuffer> buffers = backend->state();
    for (StateBuffer& b : buffers) b.name = state_prefix + b.name;
    if (diloco)
      for (StateBuffer& b : diloco->state(state_prefix)) buffers.push_back(std::move(b));
    return buffers;
  }

  // Hands buffers read under named_state()'s names back to the backend and to DiLoCo.
  void set_named_state(std::vector<StateBuffer> buffers) {
    if (diloco) diloco->set_state(buffers, state_prefix);
    std::vector<StateBuffer> backend_buffers;
    for (StateBuffer& b : buffers)
      if (!b.name.starts_with(state_prefix + "outer/")) {
        b.name = b.name.substr(state_prefix.size());
        backend_buffers.push_back(std::move(b));
      }
    backend->set_state(backend_buffers);
  }

  // Fresh parameters, or the state of a checkpoint.
  void load_state(const std::optional<std::string>& resume_from) {
    const std::string ckpt_dir = config.checkpoint_directory();
    if (!resume_from) {
      if (latest_checkpoint(ckpt_dir))
        fail("run '", config.run.name, "' already has checkpoints in '", ckpt_dir,
             "'; use --resume to continue it, or choose another run.name");
      // Every DiLoCo worker starts from the same parameters (those of the run's seed).
      std::vector<StateBuffer> buffers = backend->state();
      StateBuffer& params = buffers.at(0);
      initialize_gpt_parameters(backend->layout(), shape, config.run.seed, params.values.data(),
                                params.range);
      backend->set_state(buffers);
      if (diloco) diloco->start(*backend);
      return;
    }
    std::vector<StateBuffer> buffers = named_state();
    const std::string path = choose_resume_checkpoint(*resume_from, ckpt_dir, world);
    check_resumable(path, config.model, workers.workers);
    const CheckpointMeta meta = read_checkpoint(path, backend->layout(), buffers);
    set_named_state(std::move(buffers));
    if (diloco) diloco->resume(*backend, meta.state.step);
    const CheckpointState& mine =
        workers.worker == 0 ? meta.state
                            : meta.worker_states.at(static_cast<std::size_t>(workers.worker - 1));
    progress.step = meta.state.step;
    progress.data_position = meta.state.data_position;
    progress.optimizer_steps = mine.adam_steps;
    scaler.restore(mine.loss_scale, mine.loss_scale_clean_steps);
    last_checkpoint_step = progress.step;
    if (progress.step > config.train.steps)
      fail("--resume: checkpoint '", path, "' is at step ", progress.step, ", past train.steps (",
           config.train.steps, ")");
    if (meta.state.seed != config.run.seed && is_logger())
      std::cerr << "warning: run.seed " << config.run.seed << " differs from the checkpoint's "
                << meta.state.seed << "; the data order changes from here\n";
    // Another tokenizer would give the same ids other meanings: never a silent change.
    if (!meta.tokenizer_model.empty() && !tokenizer_model.empty() &&
        meta.tokenizer_model != tokenizer_model)
      fail("--resume: data.tokenizer '", config.data.tokenizer,
           "' is not the tokenizer of checkpoint '", path, "' (its model bytes differ)");
    if (is_logger()) warn_changed_keys(meta.config_yaml, path);
    if (is_logger()) std::cout << "resumed from " << path << " at step " << progress.step << "\n";
  }

  // A resumed run may change keys (a longer run, another learning rate), but says which: the
  // model's shape was checked (check_resumable).
  void warn_changed_keys(const std::string& saved_yaml, const std::string& path) const {
    Config saved;
    try {
      saved = parse_config(saved_yaml, path + " (config attribute)");
    } catch (const Error&) {
      return;  // a config this version cannot read: nothing to compare
    }
    for (const ConfigChange& change : config_changes(saved, config)) {
      // run.seed has a warning of its own; train.stop_after says when this invocation stops.
      if (change.key == "run.seed" || change.key == "train.stop_after") continue;
      std::cerr << "warning: --resume: " << change.key << " is " << change.after << ", "
                << change.before << " in the checkpoint's run";
      if (change.key == "train.steps" || change.key == "optimizer.lr" ||
          change.key == "optimizer.min_lr" || change.key == "optimizer.warmup_steps" ||
          change.key == "optimizer.schedule")
        std::cerr << "; the learning-rate schedule changes from step " << progress.step;
      if (change.key == "data.train")  // the samples are a function of data.train (mixture.h)
        std::cerr << "; the data order changes from step " << progress.step;
      std::cerr << "\n";
    }
  }

  // Micro-batch a of this step on this replica: samples data_position + (a·dp + dp_rank)·micro +
  // b of this worker's stream. The global batch is split the same way under any layout, so every
  // layout trains on exactly the same sequences. DiLoCo worker w of k reads every k-th sample of
  // the corpus order from w (position p is sample p·k + w): k workers together read what one run
  // with a k times larger batch would, and one worker reads what plain training reads.
  void sample_micro_batch(int a, std::int32_t* inputs, std::int32_t* targets) {
    const int T = config.model.seq_len, micro = config.train.micro_batch;
    const std::int64_t first =
        progress.data_position +
        (static_cast<std::int64_t>(a) * settings.dp + mesh.dp_rank()) * micro;
    for (int b = 0; b < micro; ++b)
      data.sample(static_cast<std::uint64_t>((first + b) * workers.workers + workers.worker),
                  inputs + b * T, targets + b * T);
  }

  // The loss over the first eval_tokens of `split` (docs/ARCHITECTURE.md §5 "Evaluation").
  // Collective: every rank evaluates the same splits in the same order.
  double validation_loss(const TokenSource& split, const std::string& key) {
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

  // val_loss (training_data.h: data.val's, else the sources' weighted by share) and, for each
  // source with a val, its own.
  void evaluate() {
    if (!data.evaluates()) return;
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
    if (!is_logger()) return;
    std::printf("eval step %lld | val_loss %.4f%s%s\n", static_cast<long long>(progress.step),
                val_loss, by_source_text.empty() ? "" : " | by source: ", by_source_text.c_str());
    std::fflush(stdout);
    JsonLine line;
    line.add("step", progress.step).add("val_loss", val_loss);
    if (!by_source_text.empty()) line.add("val_loss_by_source", by_source);
    metrics->write(line);
  }

  // A mixture's training line: the tokens each source has given the job so far, summing to
  // step · global_batch · seq_len · workers. DiLoCo's k workers together have read the first
  // data_position · k samples (sample_micro_batch).
  JsonLine tokens_by_source() const {
    const auto samples = static_cast<std::uint64_t>(progress.data_position) *
                         static_cast<std::uint64_t>(workers.workers);
    const std::vector<std::uint64_t> drawn = data.drawn_before(samples);
    JsonLine line;
    for (std::size_t s = 0; s < drawn.size(); ++s)
      line.add(data.sources()[s].name, drawn[s] * static_cast<std::uint64_t>(config.model.seq_len));
    return line;
  }

  void save_checkpoint() {
    if (last_checkpoint_step == progress.step) return;
    CheckpointMeta meta{config_to_yaml(config), checkpoint_state(), tokenizer_model, {}};
    if (diloco) {  // every worker's counters reach the first (uncounted: metrics' duplicate)
      std::vector<CheckpointState> all(static_cast<std::size_t>(workers.workers));
      workers.outer_metrics->all_gather(reinterpret_cast<const std::uint8_t*>(&meta.state),
                                        reinterpret_cast<std::uint8_t*>(all.data()),
                                        sizeof(CheckpointState));
      meta.worker_states.assign(all.begin() + 1, all.end());
    }
    const std::string path =
        write_checkpoint(config.checkpoint_directory(), checkpoint_writer, meta, named_state());
    if (is_logger()) {
      prune_checkpoints(config.checkpoint_directory(), config.checkpoint.keep);
      std::cout << "checkpoint " << path << "\n";
    }
    world.barrier();
    last_checkpoint_step = progress.step;
  }

  CheckpointState checkpoint_state() const {
    return CheckpointState{
        progress.step,  progress.data_position,   config.run.seed,
        scaler.scale(), progress.optimizer_steps, scaler.dynamic() ? scaler.clean_steps() : -1};
  }

  // Why the run stops after this step (a signal on any rank, or train.stop_after), or "" to go
  // on: every rank decides alike.
  std::string stop_reason() {
    std::int64_t signalled = stop_requested() ? 1 : 0;
    world.all_reduce_max(&signalled, 1);
    const std::string step = std::to_string(progress.step);
    if (signalled) return "stopped by signal at step " + step;
    const int stop_after = config.train.stop_after;
    if (stop_after > 0 && progress.step >= stop_after && progress.step < config.train.steps)
      return "stopped after step " + step + " (train.stop_after)";
    return "";
  }

  void print_startup() const {
    const Config& c = config;
    std::cout << "model: " << ParameterLayout::for_gpt(shape).total() << " parameters ("
              << c.model.n_layer << " layers, d_model " << c.model.d_model << ", vocab "
              << c.model.vocab_size << " padded to " << shape.padded_vocab() << ") on "
              << backend->name()
              // The CPU backend's GEMMs: which library, threading and kernels (blas.h).
              << (device == "cpu" ? " (GEMMs on " + cpu::blas_library().describe() + ")" : "")
              << " | mesh tp " << mesh.tp_size() << " x dp " << mesh.dp_size() << " x pp "
              << mesh.pp_size() << " (" << c.parallel.pipeline_schedule
              << (c.parallel.sequence_parallel ? ", sequence parallel" : "") << "), rank 0 holds "
              << backend->layout().total() << " | micro_batch " << c.train.micro_batch << " x "
              << settings.accumulation << " accumulation steps | "
              << static_cast<std::int64_t>(c.train.global_batch) * c.model.seq_len
              << " tokens/step\n";
    if (data.is_mixture()) {
      const std::uint64_t samples_in_run = static_cast<std::uint64_t>(c.train.steps) *
                                           static_cast<std::uint64_t>(c.train.global_batch) *
                                           static_cast<std::uint64_t>(workers.workers);
      data.describe(std::cout, c, samples_in_run);
    }
    if (c.diloco.enabled) {
      const DilocoConfig& d = c.diloco;
      std::cout << "diloco: " << d.workers << " workers of " << team.size()
                << " ranks, outer step every " << d.inner_steps << " inner steps (lr " << d.outer_lr
                << ", momentum " << d.outer_momentum << (d.nesterov ? ", Nesterov" : "")
                << "), averaging " << d.averaging << ", compression " << d.compression
                << (d.error_feedback ? " with error feedback" : "");
      if (d.fragments > 1) {  // streaming: how even the fragments are
        std::cout << ", " << d.fragments << " fragments of";
        const char* separator = " ";
        for (std::size_t n : diloco_fragment_sizes(shape, d.fragments)) {
          std::cout << separator << human_count(static_cast<double>(n));
          separator = ", ";
        }
        std::cout << " parameters";
      }
      if (d.drop_probability > 0) std::cout << ", drop probability " << d.drop_probability;
      std::cout << " | global_batch is per worker\n";
    }
    // Rank 0's memory; what ZeRO saves is the optimizer state of the layout at stage 0.
    const MemoryAccount m = backend->memory();
    const auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / 1048576.0; };
    std::printf(
        "memory (rank 0): model state %.2f MiB (master weights %.2f, compute weights %.2f, "
        "gradients %.2f, optimizer state %.2f)",
        mib(m.model_state()), mib(m.master_weights), mib(m.compute_weights), mib(m.gradients),
        mib(m.optimizer_state));
    if (backend->plan().sharded) {
      // Stage 0 holds every element of the layout in each buffer: fp32 weights, gradients and
      // two moments, and the compute copy at the size per element this backend stores it in.
      const ReductionPlan& plan = backend->plan();
      const double elements = static_cast<double>(backend->layout().padded_total(1));
      const double compute_per_element =
          static_cast<double>(m.compute_weights) / static_cast<double>(plan.parameter_range.size());
      const double stage0 = elements * (4 * sizeof(float) + compute_per_element);
      std::printf("; ZeRO stage %d saves %.2f MiB of it against stage 0 (%.2f MiB)",
                  c.parallel.zero.stage,
                  (stage0 - static_cast<double>(m.model_state())) / 1048576.0, stage0 / 1048576.0);
      // ZeRO++: which switches are on, and what hpZ's node copy costs (counted in model state).
      const ZeroConfig& z = c.parallel.zero;
      if (z.quantized_weights || z.hierarchical_partition || z.quantized_gradients)
        std::printf("; ZeRO++:%s%s%s", z.quantized_weights ? " qwZ (int8 weight gathers)" : "",
                    z.hierarchical_partition ? " hpZ (a secondary weight copy per node)" : "",
                    z.quantized_gradients ? " qgZ (int4 gradient reduce-scatters)" : "");
      if (z.hierarchical_partition) std::printf(", hpZ's copy %.2f MiB", mib(m.secondary_weights));
    }
    std::printf("\n");
    std::fflush(stdout);
  }

  void report_outer(const std::vector<OuterSyncReport>& syncs, double loss,
                    const CommStats& outer_stats) {
    report_outer_syncs(syncs, loss, outer_stats, workers, world,
                       is_logger() ? metrics.get() : nullptr);
  }

  // Activation memory differs by pipeline stage (1F1B holds more micro-batches on early
  // stages): every rank's pipeline group spans the stages, so rank 0 learns them all.
  void report_done() {
    const float activation_mib = static_cast<float>(backend->activation_bytes() / 1048576.0);
    std::vector<float> by_stage(static_cast<std::size_t>(groups.pp().size()));
    groups.pp().all_gather(&activation_mib, by_stage.data(), 1);
    if (!is_logger()) return;
    metrics->write(JsonLine()
                       .add("step", progress.step)
                       .add("peak_rss_mib", peak_rss_mib())
                       .add("activation_mib_by_stage", by_stage, "%.3f"));
    std::printf("done: %lld steps, peak memory %.0f MiB, activations %s MiB%s\n",
                static_cast<long long>(progress.step), peak_rss_mib(),
                by_stage.size() == 1 ? json_number(by_stage[0], "%.3f").c_str()
                                     : json_array(by_stage, "%.3f").c_str(),
                by_stage.size() == 1 ? "" : " by pipeline stage");
  }
};

Trainer::Trainer(const Config& config, MpiCommunicator& world, const TrainerOptions& options) {
  // Before any work: a layout that does not fit the world, a device it cannot use.
  const MeshShape mesh_shape = resolve_mesh(config, world.size());
  const std::string device = resolve_device(config, shape_of(config.model));
  check_mpi_support(config);
  state_ = std::make_unique<State>(config, world, mesh_shape);
  State& s = *state_;
  s.device = device;
  s.tokenizer_model = s.data.check(config);
  s.make_backend();
  s.load_state(options.resume_from);
  if (s.is_logger()) {
    const std::string run_dir = config.run_directory();
    fs::create_directories(run_dir);
    std::ofstream(fs::path(run_dir) / "config.yaml") << config_to_yaml(config);
    s.metrics = std::make_unique<MetricsWriter>((fs::path(run_dir) / "metrics.jsonl").string(),
                                                options.resume_from ? s.progress.step : -1);
  }
}

Trainer::~Trainer() = default;

int Trainer::run() {
  State& s = *state_;
  const Config& c = s.config;
  const double tokens_per_step = static_cast<double>(c.train.global_batch) * c.model.seq_len;
  const MicroBatchSource train_batch = [&](int a, std::int32_t* inputs, std::int32_t* targets) {
    s.sample_micro_batch(a, inputs, targets);
  };
  install_stop_signal_handlers();
  if (s.is_logger()) s.print_startup();
  double last_loss = 0;  // the last step's, for a sync that finish() applies
  ProgressBar bar(s.is_logger(), s.progress.step, c.train.steps);  // on a terminal only

  while (s.progress.step < c.train.steps) {
    bar.draw(s.progress.step);
    const StepWatch watch(s.groups, s.workers.outer.get());
    // The syncs' bytes: from here, so that an overlapped reduction (in flight during the step) is
    // counted with the sync it belongs to.
    const CommStats outer_before = s.diloco ? s.workers.outer->stats() : CommStats{};
    if (s.diloco) s.diloco->begin_inner_step();  // overlap: the reduction in flight from here
    s.settings.lr = learning_rate(c.optimizer, static_cast<int>(s.progress.step), c.train.steps);
    s.settings.inject_nonfinite_gradients = s.nonfinite_test_steps.contains(s.progress.step + 1);
    const StepResult result = training_step(*s.backend, s.reduction_groups, s.settings, train_batch,
                                            s.scaler, s.progress);
    bar.erase();  // the step's log lines take its row
    const std::int64_t step = s.progress.step;
    // A step that stops the run is logged, but starts no DiLoCo sync.
    const std::vector<OuterSyncReport> syncs = s.diloco && !result.stop
                                                   ? s.diloco->after_inner_step(*s.backend, step)
                                                   : std::vector<OuterSyncReport>{};
    const double step_ms = watch.elapsed_ms();
    const JsonLine job_bytes = watch.job_link_bytes(s.world);
    if (s.is_logger()) {
      const StepReport report{result, step, s.settings.lr, step_ms, tokens_per_step};
      JsonLine line = step_metrics(report, watch, *s.backend, s.reports_loss_scale);
      line.add("comm_bytes_job", job_bytes);
      if (s.data.is_mixture()) line.add("tokens_by_source", s.tokens_by_source());
      s.metrics->write(line);
      // A skipped step is always shown: the steps before a non-finite stop say how it came.
      if (step % c.train.log_every == 0 || step == c.train.steps || step == 1 || !result.applied)
        print_step(report, c.train.steps);
    }
    if (result.stop)
      fail_together(nonfinite_stop_message(s.settings, s.progress, s.last_checkpoint_step));
    if (!syncs.empty()) s.report_outer(syncs, result.loss, s.workers.outer->stats() - outer_before);
    last_loss = result.loss;
    if (c.train.eval_every > 0 && step % c.train.eval_every == 0 && step != c.train.steps)
      s.evaluate();
    if (c.checkpoint.every > 0 && step % c.checkpoint.every == 0) s.save_checkpoint();
    if (const std::string why = s.stop_reason(); !why.empty()) {
      s.save_checkpoint();
      if (s.is_logger()) std::cout << why << "\n";
      return 0;
    }
  }
  if (s.diloco) {  // overlap: the last sync, applied before the final evaluation
    const CommStats outer_before = s.workers.outer->stats();
    const std::vector<OuterSyncReport> syncs = s.diloco->finish(*s.backend);
    if (!syncs.empty()) s.report_outer(syncs, last_loss, s.workers.outer->stats() - outer_before);
  }
  s.evaluate();
  s.save_checkpoint();
  s.report_done();
  return 0;
}

}  // namespace strata
