// `bench train`: the training step of one process, timed. A step is the trainer's own step
// (train/training_step.h) on one rank with one micro-batch and no parallelism: zero the gradients,
// forward and backward (with the configured recomputation; fp16 from the loss scale), global
// gradient norm, and the AdamW update (skipped, and the scale halved, on an fp16 overflow), which
// also refreshes the bf16/fp16 weights copy. Tokens are synthetic, so no data files are needed.
//
// With --config the model shape, train.micro_batch, precision, recompute, optimizer and run.seed
// come from the config (after --set overrides, validated as `train` does); the parallel layout,
// data and schedule keys are not used. Without it the shape comes from flags, in fp32 with no
// recomputation (scripts/bench_cpu.sh; its JSON keys are a subset of the config form's).
//
// MFU = model FLOP/s (6·N + 12·L·C·T per token, docs/ARCHITECTURE.md §5) / peak. The peak is --peak
// (TFLOP/s) or, on the CPU backend, the GEMM library's sgemm (model/kernels/cpu/blas.h) on a 2048³
// product with the same threads, measured after the training steps (so its buffers do not count in
// peak_rss_mib): the most an fp32 GEMM-bound step could reach here.
//
// `device: cuda` (or `auto` where a GPU is usable) times the same step on the GPU backend
// (train/backend/cuda_training.h): forward and backward of the micro-batch, the gradient norm read
// back, the fused AdamW update, and a device synchronisation closing the step. MFU is then against
// the datasheet peak of the device (tools/gpu_peaks.h: dense bf16 tensor-core peak for bf16/fp16,
// the fp32 peak for fp32) unless --peak is given. Device memory is reported two ways, both read
// after the timed steps:
//   device_mib       what Strata reserved (TrainingBackend::device_bytes(): activation and scratch
//                    arenas, weights, gradients, moments, the cuBLASLt workspace), fixed at
//                    construction;
//   device_used_mib  the device's memory in use as the driver sees it (cudaMemGetInfo: total -
//                    free): adds the CUDA context, the libraries' own allocations (cuBLASLt, NCCL)
//                    and any other process on the GPU; `device_total_mib` is the device's total.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/kernels/cpu/precision.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/process_groups.h"
#include "plan/config.h"
#include "tools/bench.h"
#include "tools/gpu_peaks.h"
#include "train/backend/cuda_training.h"
#include "train/metrics/metrics.h"
#include "train/metrics/process_memory.h"
#include "train/optimizer/loss_scale.h"
#include "train/training_step.h"

#if STRATA_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "model/kernels/cuda/check.h"
#endif

namespace strata::bench {
namespace {

// The shape flags of the flag form and the config keys that replace them under --config.
constexpr std::pair<const char*, const char*> kShapeFlags[] = {
    {"--n-layer", "model.n_layer"},  {"--n-head", "model.n_head"},
    {"--d-model", "model.d_model"},  {"--seq-len", "model.seq_len"},
    {"--vocab", "model.vocab_size"}, {"--micro-batch", "train.micro_batch"}};

// What one benchmark runs.
struct TrainSetup {
  std::string config_path;  // empty in the flag form
  Config config;            // the flag form's: its shape in fp32, no recomputation
  GptShape shape;
  GptOptions options;
  Device device = Device::cpu;  // where it runs: cpu or cuda
};

TrainSetup setup_from_flags(const ToolArgs& args) {
  TrainSetup setup;
  ModelConfig& m = setup.config.model;
  m.n_layer = positive(args, "--n-layer");
  m.n_head = positive(args, "--n-head");
  m.d_model = positive(args, "--d-model");
  m.seq_len = positive(args, "--seq-len");
  m.vocab_size = positive(args, "--vocab");
  if (m.d_model % m.n_head != 0) fail("--d-model must be a multiple of --n-head");
  setup.config.train.micro_batch = positive(args, "--micro-batch");
  setup.config.optimizer.lr = 1e-4;  // the flag form's learning rate since its first version
  setup.config.run.seed = 1234;
  setup.config.precision.compute = cpu::ComputeDtype::fp32;
  setup.config.recompute = Recompute::none;
  return setup;
}

TrainSetup setup_from_config(const ToolArgs& args) {
  for (const auto& [flag, key] : kShapeFlags) {
    if (args.has(flag)) fail(flag, " cannot be combined with --config (use --set ", key, "=...)");
  }
  TrainSetup setup;
  setup.config_path = args.get("--config");
  setup.config = load_config(setup.config_path, args.all("--set"));
  return setup;
}

// What both forms derive from the config: the shape, the options, the device.
void complete_setup(TrainSetup& setup) {
  const ModelConfig& m = setup.config.model;
  setup.shape = gpt_shape_of(m);
  setup.options = gpt_options_of(setup.config);
  // One process: the layout keys are not used, and one step is one micro-batch.
  setup.config.train.global_batch = setup.config.train.micro_batch;
  if (!setup.config_path.empty()) setup.device = resolve_device(setup.config, setup.shape);
}

// Synthetic tokens (B, T) and their next-token targets, the same for every step.
struct SyntheticBatch {
  std::vector<std::int32_t> inputs, targets;
};

SyntheticBatch synthetic_batch(const GptShape& shape, int B) {
  const int T = shape.seq_len;
  std::mt19937 rng(7);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * (T + 1));
  for (auto& token : tokens) token = static_cast<std::int32_t>(rng() % shape.vocab_size);
  SyntheticBatch batch;
  for (int b = 0; b < B; ++b) {
    const auto row = tokens.begin() + static_cast<std::ptrdiff_t>(b) * (T + 1);
    batch.inputs.insert(batch.inputs.end(), row, row + T);
    batch.targets.insert(batch.targets.end(), row + 1, row + T + 1);
  }
  return batch;
}

struct TrainTiming {
  double step_seconds = 0;  // median over the timed steps
  double final_loss = 0;
  std::size_t params = 0;
  double activation_mib = 0;
  double activation_mib_per_layer = 0;
  double loss_scale = 1;  // after the last step
  int skipped_steps = 0;  // fp16 overflows (or non-finite losses) among all steps
  double peak_rss_mib = 0;
  double device_mib = 0;        // CUDA: device memory Strata reserved (see the header)
  double device_used_mib = 0;   // CUDA: device memory in use, total - free, after the steps
  double device_total_mib = 0;  // CUDA: the device's memory
  std::string device_name;      // CUDA: the GPU
};

// The trainer's step on one process, `warmup` untimed then `steps` timed.
TrainTiming time_training_steps(const TrainSetup& setup, int steps, int warmup) {
  const Config& config = setup.config;
  const GptShape& shape = setup.shape;
  MpiCommunicator world(MPI_COMM_WORLD, 1);
  const ProcessGroups groups(Mesh(1, 0, 1, 1, 1, 1), world);
  const PipelineProgram program = make_pipeline_schedule(PipelineSchedule::one_f_one_b, 1, 1);
  BackendPlacement placement;
  placement.partition = ModelPartition::whole(shape);
  placement.groups = &groups;
  placement.program = &program;
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  placement.plan = make_reduction_plan(layout, {placement.partition});
  const std::unique_ptr<TrainingBackend> backend =
      make_training_backend(setup.device, config, shape, placement);
  {
    // Fresh weights only, freed before the timed steps: a copy of the whole state (weights and
    // both AdamW moments) kept here would count 3 × 4 bytes per parameter in peak_rss_mib.
    std::vector<float> weights(layout.total());
    initialize_gpt_parameters(layout, shape, config.run.seed, weights.data());
    backend->write_master_weights({0, layout.total()}, weights.data());
  }

  LossScaler scaler = LossScaler::for_config(config.precision);
  const SyntheticBatch batch = synthetic_batch(shape, config.train.micro_batch);
  const MicroBatchSource source = [&](int, std::int32_t* inputs, std::int32_t* targets) {
    std::copy(batch.inputs.begin(), batch.inputs.end(), inputs);
    std::copy(batch.targets.begin(), batch.targets.end(), targets);
  };
  StepSettings settings;
  settings.global_batch = config.train.micro_batch;
  settings.lr = config.optimizer.lr;
  settings.grad_clip = config.optimizer.grad_clip;
  const ReductionGroups reduction_groups = groups.reductions();
  TrainingProgress progress;

  TrainTiming timing;
  std::vector<double> step_seconds;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto start = Clock::now();
    const StepResult result =
        training_step(*backend, reduction_groups, settings, source, scaler, progress);
    backend->synchronize();
    if (step >= warmup) step_seconds.push_back(seconds_since(start));
    if (!result.applied) ++timing.skipped_steps;
    timing.final_loss = result.loss;
  }
  timing.step_seconds = median(step_seconds);
  timing.params = layout.total();
  timing.activation_mib = backend->activation_bytes() / 1048576.0;
  timing.activation_mib_per_layer = backend->activation_bytes_per_layer() / 1048576.0;
  timing.loss_scale = scaler.scale();
  timing.peak_rss_mib = peak_rss_mib();
  if (setup.device == Device::cuda) {
    timing.device_mib = backend->device_bytes() / 1048576.0;
    timing.device_name = cuda_device_name(0);
#if STRATA_HAVE_CUDA
    // The backend made device 0 current; the steps have synchronised.
    std::size_t free_bytes = 0, total_bytes = 0;
    STRATA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    timing.device_used_mib = static_cast<double>(total_bytes - free_bytes) / 1048576.0;
    timing.device_total_mib = static_cast<double>(total_bytes) / 1048576.0;
#endif
  }
  return timing;
}

struct Peak {
  double tflops = 0;
  std::string source;
};

// --peak; on a GPU its datasheet peak for the compute dtype; on the CPU the measured sgemm rate
// (run after the steps, see the header comment).
Peak peak_for(const ToolArgs& args, const TrainSetup& setup, const TrainTiming& timing) {
  if (args.has("--peak")) {
    const double tflops = args.number("--peak");
    if (!(tflops > 0) || !std::isfinite(tflops))
      fail("--peak must be a positive number of TFLOP/s, got '", args.get("--peak"), "'");
    return {tflops, "--peak"};
  }
  if (setup.device == Device::cuda) {
    const auto peak = gpu_peak_for_device(timing.device_name);
    if (!peak) fail("no peak FLOP/s known for '", timing.device_name, "': give --peak TFLOPS");
    const bool tensor_cores = setup.options.compute != cpu::ComputeDtype::fp32;
    return {tensor_cores ? peak->bf16_dense_tflops : peak->fp32_tflops,
            std::string(peak->name) + (tensor_cores ? " dense bf16 datasheet" : " fp32 datasheet")};
  }
  return {sgemm_gflops(2048, 2048, 2048, 5) * 1e-3, "measured sgemm 2048^3"};
}

}  // namespace

CommandSpec train_command() {
  return {
      "usage: bench train --config CONFIG.yaml [--set key.path=value]... [--steps N] [--warmup N] "
      "[--peak TFLOPS] | bench train [--n-layer N --n-head N --d-model N --seq-len N --vocab N "
      "--micro-batch N --steps N --warmup N --peak TFLOPS]",
      "Times training steps on one rank, of a run's config (--config, on its device, "
      "precision and recomputation) or of a GPT given by the shape flags (fp32 on the CPU): one "
      "JSON line with step time, tokens/s, TFLOP/s and MFU against --peak (default: the GPU's "
      "datasheet peak, or the CPU's measured sgemm rate).",
      {{"--config", "CONFIG.yaml", "", "a run config: its model, batch and device are timed"},
       {"--set", "key.path=value", "", "override a key of --config", "", false, true},
       {"--steps", "N", "20", "timed steps"},
       {"--warmup", "N", "3", "untimed steps first"},
       {"--peak", "TFLOPS", "", "the peak MFU is measured against", "the device's"},
       {"--n-layer", "N", "4", "transformer blocks (flag form)"},
       {"--n-head", "N", "4", "attention heads (flag form)"},
       {"--d-model", "N", "256", "model width (flag form)"},
       {"--seq-len", "N", "256", "context length (flag form)"},
       {"--vocab", "N", "2048", "vocabulary size (flag form)"},
       {"--micro-batch", "N", "8", "sequences a step (flag form)"}}};
}

void bench_train(int argc, char** argv, int first) {
  const CommandSpec command = train_command();
  const ToolArgs args(argc, argv, first, command);
  if (args.has("--set") && !args.has("--config"))
    fail("--set needs --config (", command.usage, ")");
  TrainSetup setup = args.has("--config") ? setup_from_config(args) : setup_from_flags(args);
  complete_setup(setup);
  const int steps = positive(args, "--steps");
  const long long warmup = args.integer("--warmup");
  if (warmup < 0) fail("--warmup must be >= 0, got ", warmup);

  const MpiRuntime mpi(&argc, &argv);  // the step reduces over groups, here of one rank
  const TrainTiming timing = time_training_steps(setup, steps, static_cast<int>(warmup));
  const Peak peak = peak_for(args, setup, timing);

  const GptShape& shape = setup.shape;
  const double tokens_per_step =
      static_cast<double>(setup.config.train.micro_batch) * shape.seq_len;
  const double tokens_per_s = tokens_per_step / timing.step_seconds;
  const double model_tflops = shape.flops_per_token() * tokens_per_s * 1e-12;
  JsonLine json;
  json.add("bench", "train");
  if (!setup.config_path.empty()) json.add("config", setup.config_path);
  json.add("device", std::string(kDeviceChoices.word(setup.device)));
  if (setup.device == Device::cuda) json.add("device_name", timing.device_name);
  json.add("threads", omp_get_max_threads());
  if (setup.device == Device::cpu) add_blas_library(json);
  json.add("n_layer", shape.n_layer)
      .add("n_head", shape.n_head)
      .add("d_model", shape.d_model)
      .add("seq_len", shape.seq_len)
      .add("vocab", shape.vocab_size)
      .add("micro_batch", setup.config.train.micro_batch)
      .add("tokens_per_step", static_cast<long long>(tokens_per_step))
      .add("params", timing.params)
      .add("compute", cpu::compute_dtype_name(setup.options.compute))
      .add("recompute", recompute_name(setup.options.recompute))
      .add("steps", steps)
      .add("warmup", warmup)
      .add("step_ms", 1e3 * timing.step_seconds, "%.2f")
      .add("tokens_per_s", tokens_per_s, "%.1f")
      .add("gflops", model_tflops * 1e3, "%.2f")
      .add("model_tflops", model_tflops, "%.4g")
      .add("peak_tflops", peak.tflops, "%.4g")
      .add("peak_source", peak.source)
      .add("mfu", model_tflops / peak.tflops, "%.4g")
      .add("peak_rss_mib", timing.peak_rss_mib, "%.1f");
  if (setup.device == Device::cuda)
    json.add("device_mib", timing.device_mib, "%.1f")
        .add("device_used_mib", timing.device_used_mib, "%.1f")
        .add("device_total_mib", timing.device_total_mib, "%.1f");
  json.add("activation_mib", timing.activation_mib, "%.2f")
      .add("activation_mib_per_layer", timing.activation_mib_per_layer, "%.3f")
      .add("loss_scale", timing.loss_scale)
      .add("skipped_steps", timing.skipped_steps)
      .add("final_loss", timing.final_loss, "%.4f");
  std::printf("%s\n", json.str().c_str());
}

}  // namespace strata::bench
