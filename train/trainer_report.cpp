// RunReporter (trainer_state.h): what a run prints and logs: its config and metrics files, the
// start-up lines, each step's metrics line and printed line, and the closing lines.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/fp8/fp8_state.h"
#include "model/kernels/cpu/blas.h"
#include "model/parameter_layout.h"
#include "train/diloco/diloco_fragments.h"
#include "train/metrics/process_memory.h"
#include "train/trainer_state.h"

namespace strata {
namespace fs = std::filesystem;

RunReporter::RunReporter(RunCore& core, RunOuter& outer)
    : core_(core),
      outer_(outer),
      reports_loss_scale_(core.config.precision.compute == cpu::ComputeDtype::fp16) {}

void RunReporter::open(const TrainerOptions& options,
                       const std::optional<std::int64_t>& init_step) {
  if (!core_.is_logger()) return;
  const std::string run_dir = core_.config.run_directory();
  fs::create_directories(run_dir);
  std::ofstream(fs::path(run_dir) / "config.yaml") << config_to_yaml(core_.config);
  metrics_ = std::make_unique<MetricsWriter>((fs::path(run_dir) / "metrics.jsonl").string(),
                                             options.resume_from ? core_.progress.step : -1);
  // The run's first line says where its weights came from; a resume keeps it (step 0).
  if (options.init_from)
    metrics_->write(JsonLine()
                        .add("step", std::int64_t{0})
                        .add("init", *options.init_from)
                        .add("init_step", *init_step));
}

void RunReporter::step(const StepReport& report, const StepWatch& watch,
                       const JsonLine& job_bytes) {
  const Config& c = core_.config;
  // The step's communication is read before the MoE figures are summed over the ranks: that
  // bookkeeping is no part of the training's traffic (as comm_bytes_job leaves it out too).
  JsonLine line;
  if (core_.is_logger()) line = step_metrics(report, watch, *core_.backend, reports_loss_scale_);
  bool has_moe = false;
  const JsonLine moe = moe_metrics(&has_moe);
  if (!core_.is_logger()) return;
  line.add("comm_bytes_job", job_bytes);
  if (has_moe) line.add("moe", moe);
  if (core_.data.is_mixture()) line.add("tokens_by_source", tokens_by_source());
  metrics_->write(line);
  // A skipped step is always shown: the steps before a non-finite stop say how it came.
  const std::int64_t step = report.step;
  if (step % c.train.log_every == 0 || step == c.train.steps || step == 1 || !report.result.applied)
    print_step(report, c.train.steps);
}

JsonLine RunReporter::tokens_by_source() const {
  const TrainingData& data = core_.data;
  const auto samples = static_cast<std::uint64_t>(core_.progress.data_position) *
                       static_cast<std::uint64_t>(outer_.data_stride());
  const std::vector<std::uint64_t> drawn = data.drawn_before(samples);
  JsonLine line;
  for (std::size_t s = 0; s < drawn.size(); ++s)
    line.add(data.sources()[s].name,
             drawn[s] * static_cast<std::uint64_t>(core_.config.model.seq_len));
  return line;
}

void RunReporter::print_startup() const {
  const Config& c = core_.config;
  const TrainingData& data = core_.data;
  const Mesh& mesh = core_.mesh;
  std::cout << "model: " << ParameterLayout::for_gpt(core_.shape).total() << " parameters ("
            << c.model.n_layer << " layers, d_model " << c.model.d_model << ", vocab "
            << c.model.vocab_size << " padded to " << core_.shape.padded_vocab() << ") on "
            << core_.backend->name()
            // The CPU backend's GEMMs: which library, threading and kernels (blas.h).
            << (core_.device == Device::cpu ? " (GEMMs on " + cpu::blas_library().describe() + ")"
                                            : "")
            << " | mesh tp " << mesh.tp_size()
            << (mesh.cp_size() > 1 ? " x cp " + std::to_string(mesh.cp_size()) + " (" +
                                         kContextCommChoices.word(c.parallel.cp_comm).data() + ")"
                                   : "")
            << " x dp " << mesh.dp_size()
            << (mesh.ep_size() > 1 ? " (experts over ep " + std::to_string(mesh.ep_size()) + ")"
                                   : "")
            << " x pp " << mesh.pp_size() << " ("
            << kPipelineScheduleChoices.word(c.parallel.pipeline_schedule)
            << (c.parallel.virtual_stages > 1
                    ? ", " + std::to_string(c.parallel.virtual_stages) + " chunks per rank"
                    : "")
            << (c.parallel.sequence_parallel ? ", sequence parallel" : "") << "), rank 0 holds "
            << core_.backend->layout().total() << " | micro_batch " << c.train.micro_batch << " x "
            << core_.settings.accumulation << " accumulation steps | "
            << static_cast<std::int64_t>(c.train.global_batch) * c.model.seq_len
            << " tokens/step\n";
  if (const Fp8Settings& fp8 = c.precision.fp8; fp8.enabled()) {
    int gemms = 0, in_fp8 = 0;
    for (int l = 0; l < c.model.n_layer; ++l)
      for (const bool runs : fp8_gemms_of_block(fp8, core_.shape, l)) {
        ++gemms;
        in_fp8 += runs ? 1 : 0;
      }
    std::cout << "fp8: " << kFp8ScalingChoices.word(fp8.scaling) << " scaling"
              << (fp8.scaling == Fp8Scaling::delayed
                      ? " (amax history of " + std::to_string(fp8.history) + " steps)"
                      : "")
              << ", " << (fp8.formats == Fp8Formats::hybrid ? "e4m3 with e5m2 gradients" : "e4m3")
              << ", on " << in_fp8 << " of the blocks' " << gemms
              << " FP8-eligible GEMMs (fp8_layers, fp8_min_size " << fp8.min_size << ")\n";
  }
  // Said once, by the logger: every rank opened the same shards.
  if (const std::string note = data.missing_checksums_note(); !note.empty())
    std::cerr << note << "\n";
  if (data.is_mixture()) {
    const std::uint64_t samples_in_run = static_cast<std::uint64_t>(c.train.steps) *
                                         static_cast<std::uint64_t>(c.train.global_batch) *
                                         static_cast<std::uint64_t>(outer_.data_stride());
    data.describe(std::cout, c, samples_in_run);
  }
  if (c.diloco.enabled) {
    const DilocoConfig& d = c.diloco;
    if (outer_.elastic() != nullptr)
      std::cout << "diloco: slot " << outer_.elastic()->slot() << " of elastic group '" << d.group
                << "' (at most " << d.workers << " workers, " << redacted_store_url(d.join)
                << "), this worker " << core_.groups.world().size() << " ranks,";
    else
      std::cout << "diloco: " << d.workers << " workers of " << core_.groups.world().size()
                << " ranks,";
    std::cout << " outer step every " << d.inner_steps << " inner steps (lr " << d.outer_lr
              << ", momentum " << d.outer_momentum << (d.nesterov ? ", Nesterov" : "")
              << "), averaging " << kAveragingChoices.word(d.averaging) << ", compression "
              << kOuterCompressionChoices.word(d.compression)
              << (d.error_feedback ? " with error feedback" : "");
    if (d.fragments > 1) {  // streaming: how even the fragments are
      std::cout << ", " << d.fragments << " fragments of";
      const char* separator = " ";
      for (std::size_t n : diloco_fragment_sizes(core_.shape, d.fragments)) {
        std::cout << separator << human_count(static_cast<double>(n));
        separator = ", ";
      }
      std::cout << " parameters";
    }
    if (d.drop_probability > 0) std::cout << ", drop probability " << d.drop_probability;
    if (d.aggregation != AggregationRule::mean)
      std::cout << ", aggregation " << kAggregationChoices.word(d.aggregation);
    std::cout << " | global_batch is per worker\n";
    if (const ElasticWorker* elastic = outer_.elastic(); elastic != nullptr) {
      if (const SharedSecret* secret = elastic->secret(); secret != nullptr)
        std::cout << "diloco: group '" << d.group
                  << "' is authenticated: its store records are signed and every connection "
                     "between members is challenged with the secret in "
                  << d.secret_file << " (fingerprint " << secret->fingerprint() << ")\n";
      else
        std::cout << "diloco: group '" << d.group
                  << "' is unauthenticated: anyone who can write to its store or reach a member's "
                     "port can join it (set diloco.secret_file to a secret its workers share)\n";
    }
  }
  // Rank 0's memory; what ZeRO saves is the optimizer state of the layout at stage 0.
  const MemoryAccount m = core_.backend->memory();
  const auto mib = [](std::size_t bytes) { return static_cast<double>(bytes) / 1048576.0; };
  std::printf(
      "memory (rank 0): model state %.2f MiB (master weights %.2f, compute weights %.2f, "
      "gradients %.2f, optimizer state %.2f)",
      mib(m.model_state()), mib(m.master_weights), mib(m.compute_weights), mib(m.gradients),
      mib(m.optimizer_state));
  if (core_.backend->plan().sharded) {
    // Stage 0 holds every element of the layout in each buffer: fp32 weights, gradients and
    // two moments, and the compute copy at the size per element this backend stores it in.
    const ReductionPlan& plan = core_.backend->plan();
    const double elements = static_cast<double>(core_.backend->layout().padded_total(1));
    const double compute_per_element =
        static_cast<double>(m.compute_weights) / static_cast<double>(plan.parameter_range.size());
    const double stage0 = elements * (4 * sizeof(float) + compute_per_element);
    std::printf("; ZeRO stage %d saves %.2f MiB of it against stage 0 (%.2f MiB)",
                c.parallel.zero.stage, (stage0 - static_cast<double>(m.model_state())) / 1048576.0,
                stage0 / 1048576.0);
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

JsonLine RunReporter::moe_metrics(bool* has_moe) {
  const Config& config = core_.config;
  const MoeConfig& moe = config.model.moe;
  *has_moe = moe.enabled();
  if (!moe.enabled()) return {};
  const std::size_t stride = MoeTotals::stride(moe.experts);
  std::vector<double> totals = core_.backend->take_moe_totals();
  totals.resize(static_cast<std::size_t>(config.model.n_layer) * stride, 0.0);
  // A stage's tensor-parallel ranks route the same tokens: each block counted once per replica.
  if (core_.mesh.tp_rank() != 0) std::fill(totals.begin(), totals.end(), 0.0);
  for (Communicator* group : {&core_.groups.tp(), &core_.groups.pp(), &core_.groups.dp()})
    group->all_reduce_sum(totals.data(), totals.size());
  JsonLine blocks;
  for (int l = 0; l < config.model.n_layer; ++l) {
    const double* t = totals.data() + static_cast<std::size_t>(l) * stride;
    const double micro_batches = t[MoeTotals::micro_batches];
    if (!moe.is_moe_block(l) || micro_batches == 0) continue;
    const double* tokens = t + MoeTotals::kFields;
    const auto [least, most] = std::minmax_element(tokens, tokens + moe.experts);
    double sum = 0;
    for (int e = 0; e < moe.experts; ++e) sum += tokens[e];
    blocks.add(
        "h." + std::to_string(l),
        JsonLine()
            .add("aux_loss", t[MoeTotals::aux] / micro_batches)
            .add("z_loss", t[MoeTotals::z] / micro_batches)
            .add("dropped_fraction", t[MoeTotals::dropped] / t[MoeTotals::choices])
            .add("tokens_per_expert", std::vector<double>{*least, sum / moe.experts, *most}));
  }
  return blocks;
}

void RunReporter::done() {
  const float activation_mib = static_cast<float>(core_.backend->activation_bytes() / 1048576.0);
  const std::size_t stages = static_cast<std::size_t>(core_.groups.pp().size());
  std::vector<float> by_stage(stages);
  core_.groups.pp().all_gather(&activation_mib, by_stage.data(), 1);
  // Each stage's pipeline time per step (steps after the first), in all and in transfers: its
  // idle time inside the schedule (docs/ARCHITECTURE.md §5, Metrics).
  const PipelineExecutor::Timing timing = core_.backend->pipeline_timing();
  const double per_step = timing.steps > 0 ? 1e3 / timing.steps : 0;
  const double mine[2] = {timing.seconds * per_step, timing.transfer_seconds * per_step};
  std::vector<double> pipeline_ms(2 * stages);
  core_.groups.pp().all_gather(mine, pipeline_ms.data(), 2);
  std::vector<double> pipeline_step_ms, pipeline_idle_ms;
  for (std::size_t s = 0; s < stages; ++s) {
    pipeline_step_ms.push_back(pipeline_ms[2 * s]);
    pipeline_idle_ms.push_back(pipeline_ms[2 * s + 1]);
  }
  if (!core_.is_logger()) return;
  metrics_->write(JsonLine()
                      .add("step", core_.progress.step)
                      .add("peak_rss_mib", peak_rss_mib())
                      .add("activation_mib_by_stage", by_stage, "%.3f")
                      .add("pipeline_ms_by_stage", pipeline_step_ms, "%.3f")
                      .add("pipeline_idle_ms_by_stage", pipeline_idle_ms, "%.3f"));
  std::printf("done: %lld steps, peak memory %.0f MiB, activations %s MiB%s\n",
              static_cast<long long>(core_.progress.step), peak_rss_mib(),
              by_stage.size() == 1 ? json_number(by_stage[0], "%.3f").c_str()
                                   : json_array(by_stage, "%.3f").c_str(),
              by_stage.size() == 1 ? "" : " by pipeline stage");
}

}  // namespace strata
