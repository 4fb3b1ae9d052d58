#include "train/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"
#include "model/core/error.h"
#include "model/gpt.h"
#include "model/kernels/cpu/adamw.h"
#include "model/kernels/cpu/precision.h"
#include "parallel/process_groups.h"
#include "train/checkpoint.h"
#include "train/cuda_training.h"
#include "train/evaluate.h"
#include "train/gradient_sync.h"
#include "train/loss_scale.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/pipeline_executor.h"
#include "train/pipeline_stage.h"
#include "train/stop_signal.h"

namespace strata {
namespace fs = std::filesystem;

namespace {

GptShape shape_of(const ModelConfig& m) {
  return GptShape{m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size};
}

GptOptions options_of(const Config& c) {
  return GptOptions{cpu::compute_dtype_from_name(c.precision.compute),
                    recompute_from_name(c.recompute)};
}

// Features whose contract exists but whose implementation has not landed yet: refuse clearly
// rather than silently train something else.
void reject_unimplemented(const Config& c) {
  if (c.parallel.zero.stage != 0) fail("parallel.zero.stage > 0 is not implemented yet");
  if (c.diloco.enabled) fail("diloco.enabled: DiLoCo is not implemented yet");
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

std::string comm_json(const CommStats& stats) {
  std::string out = "{";
  for (const auto& [kind, by_link] : stats.bytes) {
    if (out.size() > 1) out += ", ";
    out += "\"" + kind + "\": {";
    bool first = true;
    for (const auto& [link, bytes] : by_link) {
      out += std::string(first ? "" : ", ") + "\"" +
             (link == LinkClass::intra_node ? "intra_node" : "inter_node") +
             "\": " + std::to_string(bytes);
      first = false;
    }
    out += "}";
  }
  return out + "}";
}

// Running totals of this rank's traffic in each parallel group (tp, pp, dp).
struct AxisTotals {
  std::uint64_t bytes[3];
  double seconds[3];
};

AxisTotals axis_totals(const ProcessGroups& groups) {
  const CommStats* stats[3] = {&groups.tp().stats(), &groups.pp().stats(), &groups.dp().stats()};
  AxisTotals totals{};
  for (int axis = 0; axis < 3; ++axis) {
    totals.bytes[axis] = stats[axis]->total_bytes();
    totals.seconds[axis] = stats[axis]->total_seconds();
  }
  return totals;
}

// Bytes sent and seconds spent in calls since `before`, per group:
// {"tp": .., "pp": .., "dp": ..} each.
std::pair<std::string, std::string> axis_json(const ProcessGroups& groups,
                                              const AxisTotals& before) {
  const AxisTotals now = axis_totals(groups);
  const char* names[3] = {"tp", "pp", "dp"};
  std::string bytes = "{", seconds = "{";
  for (int axis = 0; axis < 3; ++axis) {
    const std::string sep = axis == 0 ? "\"" : ", \"";
    bytes += sep + names[axis] + "\": " + std::to_string(now.bytes[axis] - before.bytes[axis]);
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.6f", now.seconds[axis] - before.seconds[axis]);
    seconds += sep + names[axis] + "\": " + buffer;
  }
  return {bytes + "}", seconds + "}"};
}

ModelPartition partition_of(const Config& c, const Mesh& mesh) {
  const auto stages = stage_layer_ranges(c.model.n_layer, mesh.pp_size(), c.parallel.pp_layers);
  ModelPartition p;
  p.tp_rank = mesh.tp_rank();
  p.tp_size = mesh.tp_size();
  p.layer_begin = stages[mesh.pp_rank()].first;
  p.layer_end = stages[mesh.pp_rank()].second;
  p.has_embedding = mesh.pp_is_first_stage();
  p.has_head = mesh.pp_is_last_stage();
  p.sequence_parallel = c.parallel.sequence_parallel;
  return p;
}

// The schedule of one step, checked by simulation; also tells how many micro-batches' activations
// this stage holds at once.
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
  MpiCommunicator& world;
  ProcessGroups groups;
  const Mesh& mesh;
  int dp = 1;
  int dp_rank = 0;
  int accumulation = 1;
  GptShape shape;
  StepProgram step_program;
  Gpt<float> model;
  std::vector<float> params, grads;
  AdamW optimizer;
  CpuPipelineStage stage;  // the model as the executor runs it; weights bound before each use
  PipelineExecutor executor;
  TokenSource train_split;
  std::optional<TokenSource> val_split;
  WindowSampler sampler;
  LossScaler scaler;
  std::vector<float> weights;  // params rounded to precision.compute (unused in fp32)
  std::string tokenizer_model;
  std::int64_t step = 0;           // optimizer steps completed
  std::int64_t data_position = 0;  // global index of the next training sample
  std::int64_t last_checkpoint_step = -1;
  int consecutive_nonfinite = 0;
  std::unique_ptr<MetricsWriter> metrics;
  // device cuda: the step runs there (params, grads and moments above are then only the host
  // copies for checkpoints); null on the CPU.
  std::unique_ptr<CudaTraining> cuda;
  bool nccl = false;  // device arrays cross ranks over NCCL (parallel.device_comm)

  // on_cuda: the step runs on the GPU; the CPU model then only provides the layout (one sequence
  // of buffers) and there are no host gradients.
  State(const Config& c, MpiCommunicator& w, const MeshShape& mesh_shape, bool on_cuda)
      : config(c),
        world(w),
        groups(Mesh(mesh_shape, w.rank(), c.parallel.gpus_per_node), w),
        mesh(groups.mesh()),
        dp(mesh.dp_size()),
        dp_rank(mesh.dp_rank()),
        accumulation(c.train.global_batch / (c.train.micro_batch * dp)),
        shape(shape_of(c.model)),
        step_program(make_step_program(c, mesh, accumulation)),
        model(shape, partition_of(c, mesh), &groups.tp(), on_cuda ? 1 : c.train.micro_batch,
              on_cuda ? 1 : step_program.slots, options_of(c)),
        params(model.layout().total()),
        grads(on_cuda ? 0 : model.layout().total()),
        optimizer(model.layout(), c.optimizer),
        stage(model),
        executor(stage, groups.pp(), step_program.program, c.train.micro_batch, c.model.seq_len),
        train_split(TokenSource::open(c.data.train)),
        sampler(train_split, c.model.seq_len, c.run.seed),
        scaler(LossScaler::for_config(c.precision)) {}

  bool is_logger() const { return world.rank() == 0; }

  std::size_t activation_bytes() const {
    return cuda ? cuda->activation_bytes() : model.activation_bytes();
  }
  std::size_t activation_bytes_per_layer() const {
    return cuda ? cuda->activation_bytes_per_layer() : model.activation_bytes_per_layer();
  }

  // The weights the model reads: the fp32 masters themselves, or (bf16, fp16) their copy rounded
  // to the compute dtype, made afresh after every update (DESIGN §6).
  const float* compute_weights() {
    const cpu::ComputeDtype dtype = model.options().compute;
    if (dtype == cpu::ComputeDtype::fp32) return params.data();
    weights = params;
    cpu::round_to_dtype(weights.data(), static_cast<long>(weights.size()), dtype);
    return weights.data();
  }
};

Trainer::Trainer(const Config& config, MpiCommunicator& world, const TrainerOptions& options) {
  reject_unimplemented(config);
  const MeshShape mesh_shape = resolve_mesh(config, world.size());
  // Before any work: a device the layout cannot use is a config error.
  const std::string device = resolve_device(config, shape_of(config.model));
  state_ = std::make_unique<State>(config, world, mesh_shape, device == "cuda");
  State& s = *state_;

  const ShardInfo& info = s.train_split.info();
  if (info.vocab_size > config.model.vocab_size)
    fail("data.train: the shards use a vocabulary of ", info.vocab_size,
         " tokens but model.vocab_size is ", config.model.vocab_size);
  if (!config.data.val.empty()) {
    s.val_split = TokenSource::open(config.data.val);
    if (s.val_split->info().vocab_size > config.model.vocab_size)
      fail("data.val: the shards use a vocabulary of ", s.val_split->info().vocab_size,
           " tokens but model.vocab_size is ", config.model.vocab_size);
  }
  if (!config.data.tokenizer.empty()) {
    const Tokenizer tokenizer = Tokenizer::load(config.data.tokenizer);
    if (!info.tokenizer_sha256.empty() && tokenizer.sha256() != info.tokenizer_sha256)
      fail("data.tokenizer '", config.data.tokenizer,
           "' is not the tokenizer the training shards were made with (sha256 differs)");
    s.tokenizer_model = tokenizer.serialized();
  }

  const std::string run_dir = config.run_directory();
  const std::string ckpt_dir = config.checkpoint_directory();
  if (options.resume_from) {
    std::string path = *options.resume_from;
    if (path.empty()) {
      const auto latest = latest_checkpoint(ckpt_dir);
      if (!latest) fail("--resume: no checkpoint to resume in '", ckpt_dir, "'");
      path = *latest;
    }
    const Checkpoint ckpt = read_checkpoint(path, s.model.layout(), true);
    s.params = ckpt.params;
    s.optimizer.first_moment() = ckpt.adam_m;
    s.optimizer.second_moment() = ckpt.adam_v;
    s.optimizer.set_steps_taken(static_cast<int>(ckpt.state.adam_steps));
    s.scaler.restore(ckpt.state.loss_scale, ckpt.state.loss_scale_clean_steps);
    s.step = ckpt.state.step;
    s.data_position = ckpt.state.data_position;
    s.last_checkpoint_step = s.step;
    if (s.step > config.train.steps)
      fail("--resume: checkpoint '", path, "' is at step ", s.step, ", past train.steps (",
           config.train.steps, ")");
    if (ckpt.state.seed != config.run.seed && s.is_logger())
      std::cerr << "warning: run.seed " << config.run.seed << " differs from the checkpoint's "
                << ckpt.state.seed << "; the data order changes from here\n";
    if (s.is_logger()) std::cout << "resumed from " << path << " at step " << s.step << "\n";
  } else {
    if (latest_checkpoint(ckpt_dir))
      fail("run '", config.run.name, "' already has checkpoints in '", ckpt_dir,
           "'; use --resume to continue it, or choose another run.name");
    initialize_gpt_parameters(s.model.layout(), s.shape, config.run.seed, s.params.data());
  }
  if (device == "cuda") {
    // One GPU per rank: the ranks of a node take its devices in turn.
    const int local_rank = world.rank() % config.parallel.gpus_per_node;
    CudaPlacement placement;
    placement.partition = s.model.partition();
    placement.tp = &s.groups.tp();
    placement.pp = &s.groups.pp();
    placement.program = &s.step_program.program;
    // A lone stage trains one micro-batch at a time (the fused pass), whatever the schedule.
    placement.slots = s.groups.pp().size() > 1 ? s.step_program.slots : 1;
    const int gpu = local_rank % cuda_device_count();
    // Collective: every rank learns which GPU each rank computes on.
    s.nccl =
        choose_nccl(config.parallel.device_comm, gather_gpu_ids(world, cuda_device_identity(gpu)));
    if (s.nccl) placement.nccl_groups = &s.groups;
    s.cuda = make_cuda_training(config, s.shape, placement, gpu);
    s.cuda->load(s.params, s.optimizer.first_moment(), s.optimizer.second_moment());
  }

  if (s.is_logger()) {
    fs::create_directories(run_dir);
    std::ofstream(fs::path(run_dir) / "config.yaml") << config_to_yaml(config);
    s.metrics = std::make_unique<MetricsWriter>((fs::path(run_dir) / "metrics.jsonl").string(),
                                                options.resume_from ? s.step : -1);
  }
}

Trainer::~Trainer() = default;

int Trainer::run() {
  State& s = *state_;
  const Config& c = s.config;
  const int T = c.model.seq_len, micro = c.train.micro_batch;
  const std::int64_t tokens_per_step = static_cast<std::int64_t>(c.train.global_batch) * T;
  install_stop_signal_handlers();

  if (s.is_logger()) {
    const std::size_t total = ParameterLayout::for_gpt(s.shape).total();
    std::cout << "model: " << total << " parameters (" << c.model.n_layer << " layers, d_model "
              << c.model.d_model << ", vocab " << c.model.vocab_size << " padded to "
              << s.shape.padded_vocab() << ") on "
              << (s.cuda ? (s.nccl ? "cuda (nccl)" : "cuda") : "cpu") << " | mesh tp "
              << s.mesh.tp_size() << " x dp " << s.dp << " x pp " << s.mesh.pp_size() << " ("
              << c.parallel.pipeline_schedule
              << (c.parallel.sequence_parallel ? ", sequence parallel" : "") << "), rank 0 holds "
              << s.model.layout().total() << " | micro_batch " << micro << " x " << s.accumulation
              << " accumulation steps | " << tokens_per_step << " tokens/step\n";
  }

  // Sums a value that lives on the last stage of every replica: every rank gets the total.
  auto sum_over_replicas = [&](double* values, std::size_t n) {
    s.groups.pp().all_reduce_sum(values, n);
    s.groups.dp().all_reduce_sum(values, n);
  };

  auto evaluate = [&] {
    if (!s.val_split) return;
    if (!s.cuda) s.stage.bind(s.compute_weights(), nullptr);
    const LossSum local = evaluate_loss(s.cuda ? s.cuda->executor() : s.executor, *s.val_split,
                                        c.train.eval_tokens, T, micro, s.dp_rank, s.dp);
    double totals[2] = {local.sum, static_cast<double>(local.count)};
    sum_over_replicas(totals, 2);
    if (totals[1] == 0) fail("data.val has too few tokens for one evaluation window of ", T + 1);
    const double val_loss = totals[0] / totals[1];
    if (s.is_logger()) {
      std::printf("eval step %lld | val_loss %.4f\n", static_cast<long long>(s.step), val_loss);
      std::fflush(stdout);
      s.metrics->write(JsonLine().add("step", s.step).add("val_loss", val_loss));
    }
  };

  auto save = [&] {
    if (s.last_checkpoint_step == s.step) return;
    if (s.cuda) s.cuda->store(s.params, s.optimizer.first_moment(), s.optimizer.second_moment());
    Checkpoint ckpt;
    ckpt.config_yaml = config_to_yaml(c);
    ckpt.state = CheckpointState{s.step,
                                 s.data_position,
                                 c.run.seed,
                                 s.scaler.scale(),
                                 s.optimizer.steps_taken(),
                                 s.scaler.dynamic() ? s.scaler.clean_steps() : -1};
    ckpt.params = s.params;
    ckpt.adam_m = s.optimizer.first_moment();
    ckpt.adam_v = s.optimizer.second_moment();
    ckpt.tokenizer_model = s.tokenizer_model;
    CheckpointShard shard{&s.model.layout(), s.shape, {}, &s.world};
    for (const TensorView& t : s.model.layout().tensors())
      shard.writes.push_back(writes_to_checkpoint(s.model, t, s.mesh));
    const std::string path = write_checkpoint(c.checkpoint_directory(), shard, ckpt);
    if (s.is_logger()) {
      prune_checkpoints(c.checkpoint_directory(), c.checkpoint.keep);
      std::cout << "checkpoint " << path << "\n";
    }
    s.world.barrier();
    s.last_checkpoint_step = s.step;
  };

  // Micro-batch a of this step on this replica: samples data_position + (a·dp + dp_rank)·micro +
  // b. The global batch is split the same way under any layout, so every layout trains on exactly
  // the same sequences.
  const MicroBatchSource train_batch = [&](int a, std::int32_t* inputs, std::int32_t* targets) {
    const std::int64_t first =
        s.data_position + (static_cast<std::int64_t>(a) * s.dp + s.dp_rank) * micro;
    for (int b = 0; b < micro; ++b)
      s.sampler.sample(static_cast<std::uint64_t>(first + b), inputs + b * T, targets + b * T);
  };

  while (s.step < c.train.steps) {
    const auto start = std::chrono::steady_clock::now();
    const CommStats comm_before = s.groups.total_stats();
    const AxisTotals axis_before = axis_totals(s.groups);
    // The backward pass starts from scale · mean loss; the gradients are unscaled (below) before
    // clipping and the update. Without fp16 loss scaling the scale is 1.
    const double scale = s.scaler.scale();
    const float loss_scale = static_cast<float>(scale) / static_cast<float>(s.accumulation * s.dp);
    double loss_sum = 0, scaled_norm = 0;
    if (s.cuda) {
      loss_sum = s.cuda->accumulate_gradients(s.accumulation, loss_scale, train_batch);
      // By the CPU backend's plan, over NCCL or through host memory: every rank then holds what
      // it would on the CPU. (A run that asked for NCCL runs it even on one rank.)
      if (s.nccl || gradients_need_synchronizing(s.model, s.groups))
        s.cuda->synchronize_gradients(gradient_sync_plan(s.model, s.groups), s.groups);
      scaled_norm =
          global_norm_from_sum(s.cuda->sum_of_squares(gradient_norm_ranges(s.model)), s.groups);
    } else {
      std::fill(s.grads.begin(), s.grads.end(), 0.0f);
      s.stage.bind(s.compute_weights(), s.grads.data());
      loss_sum = s.executor.train_step(loss_scale, train_batch);
      synchronize_gradients(s.model, s.grads.data(), s.groups);
      // Summed over every rank, so all ranks agree on overflow and skip together.
      scaled_norm = global_gradient_norm(s.model, s.grads.data(), s.groups);
    }
    sum_over_replicas(&loss_sum, 1);
    const double loss = loss_sum / (s.accumulation * s.dp);
    const double grad_norm = scaled_norm / scale;
    const double lr = learning_rate(c.optimizer, static_cast<int>(s.step), c.train.steps);
    const bool finite = std::isfinite(loss) && std::isfinite(grad_norm);
    // An fp16 gradient overflow with a dynamic scale is routine: skip and retry at half the scale.
    const bool scale_overflow = std::isfinite(loss) && !finite && s.scaler.can_back_off();
    s.scaler.update(finite);
    if (finite) {
      const double grad_scale = clip_factor(grad_norm, c.optimizer.grad_clip) / scale;
      if (s.cuda) {
        s.optimizer.set_steps_taken(s.optimizer.steps_taken() + 1);  // the count checkpoints keep
        s.cuda->update(lr, grad_scale, s.optimizer.steps_taken());
      } else {
        s.optimizer.step(s.params.data(), s.grads.data(), lr, grad_scale);
      }
      s.consecutive_nonfinite = 0;
    } else if (!scale_overflow && ++s.consecutive_nonfinite >= 3) {
      fail("loss or gradients non-finite for 3 consecutive steps at step ", s.step + 1,
           "; stopping (the last checkpoint is intact)");
    }
    s.step += 1;
    s.data_position += c.train.global_batch;
    const double step_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    if (s.is_logger()) {
      const CommStats step_comm = s.groups.total_stats() - comm_before;
      const auto [axis_bytes, axis_seconds] = axis_json(s.groups, axis_before);
      const double tokens_per_s = tokens_per_step / (step_ms / 1000.0);
      JsonLine line =
          JsonLine()
              .add("step", s.step)
              .add("loss", loss)
              .add("lr", lr)
              .add("grad_norm", grad_norm)
              .add("tokens_per_s", tokens_per_s)
              .add("step_ms", step_ms)
              .add("skipped", !finite)
              .add("peak_rss_mib", peak_rss_mib())
              .add("activation_mib", s.activation_bytes() / 1048576.0)
              .add("activation_mib_per_layer", s.activation_bytes_per_layer() / 1048576.0)
              .add_raw("comm_bytes", comm_json(step_comm))
              .add_raw("comm_bytes_by_axis", axis_bytes)
              .add_raw("comm_seconds_by_axis", axis_seconds);
      if (c.precision.compute == "fp16") line.add("loss_scale", scale);  // the scale this step used
      if (s.cuda) line.add("device_mib", s.cuda->device_bytes() / 1048576.0);
      s.metrics->write(line);
      if (s.step % c.train.log_every == 0 || s.step == c.train.steps || s.step == 1) {
        std::printf(
            "step %6lld/%d | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | %.1f ms%s\n",
            static_cast<long long>(s.step), c.train.steps, loss, lr, grad_norm, tokens_per_s,
            step_ms,
            finite           ? ""
            : scale_overflow ? " | skipped (fp16 overflow, loss scale halved)"
                             : " | skipped (non-finite)");
        std::fflush(stdout);
      }
    }
    if (c.train.eval_every > 0 && s.step % c.train.eval_every == 0 && s.step != c.train.steps)
      evaluate();
    if (c.checkpoint.every > 0 && s.step % c.checkpoint.every == 0) save();

    std::int64_t stop = stop_requested() ? 1 : 0;
    s.world.all_reduce_max(&stop, 1);  // every rank stops at the same step
    if (stop) {
      save();
      if (s.is_logger()) std::cout << "stopped by signal at step " << s.step << "\n";
      return 0;
    }
    if (c.train.stop_after > 0 && s.step >= c.train.stop_after && s.step < c.train.steps) {
      save();
      if (s.is_logger()) std::cout << "stopped after step " << s.step << " (train.stop_after)\n";
      return 0;
    }
  }
  evaluate();
  save();
  // Activation memory differs by pipeline stage (1F1B holds more micro-batches on early stages):
  // every rank's pipeline group spans the stages, so rank 0 learns them all.
  const float activation_mib = static_cast<float>(s.activation_bytes() / 1048576.0);
  std::vector<float> activation_mib_by_stage(static_cast<std::size_t>(s.groups.pp().size()));
  s.groups.pp().all_gather(&activation_mib, activation_mib_by_stage.data(), 1);
  if (s.is_logger()) {
    std::string by_stage = "[";
    for (float mib : activation_mib_by_stage) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "%s%.3f", by_stage.size() > 1 ? ", " : "", mib);
      by_stage += cell;
    }
    by_stage += "]";
    s.metrics->write(JsonLine()
                         .add("step", s.step)
                         .add("peak_rss_mib", peak_rss_mib())
                         .add_raw("activation_mib_by_stage", by_stage));
    std::printf("done: %lld steps, peak memory %.0f MiB, activations %s MiB%s\n",
                static_cast<long long>(s.step), peak_rss_mib(),
                activation_mib_by_stage.size() == 1
                    ? by_stage.substr(1, by_stage.size() - 2).c_str()
                    : by_stage.c_str(),
                activation_mib_by_stage.size() == 1 ? "" : " by pipeline stage");
  }
  return 0;
}

}  // namespace strata
