// Trainer::State (trainer_state.h): what a run prints and logs when it starts and when it ends.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/blas.h"
#include "model/parameter_layout.h"
#include "train/diloco/diloco_fragments.h"
#include "train/metrics/process_memory.h"
#include "train/trainer_state.h"

namespace strata {

void Trainer::State::print_startup() const {
  const Config& c = config;
  std::cout << "model: " << ParameterLayout::for_gpt(shape).total() << " parameters ("
            << c.model.n_layer << " layers, d_model " << c.model.d_model << ", vocab "
            << c.model.vocab_size << " padded to " << shape.padded_vocab() << ") on "
            << backend->name()
            // The CPU backend's GEMMs: which library, threading and kernels (blas.h).
            << (device == Device::cpu ? " (GEMMs on " + cpu::blas_library().describe() + ")" : "")
            << " | mesh tp " << mesh.tp_size() << " x dp " << mesh.dp_size()
            << (mesh.ep_size() > 1 ? " (experts over ep " + std::to_string(mesh.ep_size()) + ")"
                                   : "")
            << " x pp " << mesh.pp_size() << " ("
            << kPipelineScheduleChoices.word(c.parallel.pipeline_schedule)
            << (c.parallel.virtual_stages > 1
                    ? ", " + std::to_string(c.parallel.virtual_stages) + " chunks per rank"
                    : "")
            << (c.parallel.sequence_parallel ? ", sequence parallel" : "") << "), rank 0 holds "
            << backend->layout().total() << " | micro_batch " << c.train.micro_batch << " x "
            << settings.accumulation << " accumulation steps | "
            << static_cast<std::int64_t>(c.train.global_batch) * c.model.seq_len
            << " tokens/step\n";
  // Said once, by the logger: every rank opened the same shards.
  if (const std::string note = data.missing_checksums_note(); !note.empty())
    std::cerr << note << "\n";
  if (data.is_mixture()) {
    const std::uint64_t samples_in_run = static_cast<std::uint64_t>(c.train.steps) *
                                         static_cast<std::uint64_t>(c.train.global_batch) *
                                         static_cast<std::uint64_t>(data_stride());
    data.describe(std::cout, c, samples_in_run);
  }
  if (c.diloco.enabled) {
    const DilocoConfig& d = c.diloco;
    if (elastic)
      std::cout << "diloco: slot " << elastic->slot() << " of elastic group '" << d.group
                << "' (at most " << d.workers << " workers, " << d.join << "), this worker "
                << groups.world().size() << " ranks,";
    else
      std::cout << "diloco: " << d.workers << " workers of " << groups.world().size() << " ranks,";
    std::cout << " outer step every " << d.inner_steps << " inner steps (lr " << d.outer_lr
              << ", momentum " << d.outer_momentum << (d.nesterov ? ", Nesterov" : "")
              << "), averaging " << kAveragingChoices.word(d.averaging) << ", compression "
              << kOuterCompressionChoices.word(d.compression)
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

JsonLine Trainer::State::moe_metrics(bool* has_moe) {
  const MoeConfig& moe = config.model.moe;
  *has_moe = moe.enabled();
  if (!moe.enabled()) return {};
  const std::size_t stride = MoeTotals::stride(moe.experts);
  std::vector<double> totals = backend->take_moe_totals();
  totals.resize(static_cast<std::size_t>(config.model.n_layer) * stride, 0.0);
  // A stage's tensor-parallel ranks route the same tokens: each block counted once per replica.
  if (mesh.tp_rank() != 0) std::fill(totals.begin(), totals.end(), 0.0);
  for (Communicator* group : {&groups.tp(), &groups.pp(), &groups.dp()})
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

void Trainer::State::report_done() {
  const float activation_mib = static_cast<float>(backend->activation_bytes() / 1048576.0);
  const std::size_t stages = static_cast<std::size_t>(groups.pp().size());
  std::vector<float> by_stage(stages);
  groups.pp().all_gather(&activation_mib, by_stage.data(), 1);
  // Each stage's pipeline time per step (steps after the first), in all and in transfers: its
  // idle time inside the schedule (docs/ARCHITECTURE.md §5, Metrics).
  const PipelineExecutor::Timing timing = backend->pipeline_timing();
  const double per_step = timing.steps > 0 ? 1e3 / timing.steps : 0;
  const double mine[2] = {timing.seconds * per_step, timing.transfer_seconds * per_step};
  std::vector<double> pipeline_ms(2 * stages);
  groups.pp().all_gather(mine, pipeline_ms.data(), 2);
  std::vector<double> pipeline_step_ms, pipeline_idle_ms;
  for (std::size_t s = 0; s < stages; ++s) {
    pipeline_step_ms.push_back(pipeline_ms[2 * s]);
    pipeline_idle_ms.push_back(pipeline_ms[2 * s + 1]);
  }
  if (!is_logger()) return;
  metrics->write(JsonLine()
                     .add("step", progress.step)
                     .add("peak_rss_mib", peak_rss_mib())
                     .add("activation_mib_by_stage", by_stage, "%.3f")
                     .add("pipeline_ms_by_stage", pipeline_step_ms, "%.3f")
                     .add("pipeline_idle_ms_by_stage", pipeline_idle_ms, "%.3f"));
  std::printf("done: %lld steps, peak memory %.0f MiB, activations %s MiB%s\n",
              static_cast<long long>(progress.step), peak_rss_mib(),
              by_stage.size() == 1 ? json_number(by_stage[0], "%.3f").c_str()
                                   : json_array(by_stage, "%.3f").c_str(),
              by_stage.size() == 1 ? "" : " by pipeline stage");
}

}  // namespace strata
