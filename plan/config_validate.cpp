// Range and consistency rules for a typed Config (types were checked while reading), and the
// world-size checks of resolve_mesh. Each rule names the key it blames and the reason.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "model/gpt_shape.h"
#include "plan/config.h"

#include "parallel/mesh/mesh.h"
#include "plan/config_fields.h"
#include "plan/config_rules.h"

namespace strata {
namespace config_detail {
namespace {

void validate_run_and_data(const Config& c, const Rules& rules) {
  // The name becomes one directory below run.dir; anything else could escape or nest it.
  if (c.run.name.empty()) rules.fail("run.name", "must not be empty");
  if (c.run.name.find('/') != std::string::npos || c.run.name == "." || c.run.name == "..")
    rules.fail("run.name", "must be a plain directory name without '/', got '", c.run.name, "'");
  if (c.data.train.empty() && c.data.mixture.empty())
    rules.fail("data.train",
               "must name the training token shards (a file, directory or glob) or a list of "
               "sources {path, weight}");
  STRATA_CHECK(c.data.train.empty() || c.data.mixture.empty(), "data.train in both forms");
  validate_mixture(c.data.mixture, rules.source());
}

// Whether any split is evaluated: data.val, or a source's val.
bool has_validation(const DataConfig& data) {
  return !data.val.empty() ||
         std::ranges::any_of(data.mixture, [](const DataSource& s) { return !s.val.empty(); });
}

// model.moe (model/moe/moe_config.h): only checked when experts > 0.
void validate_moe(const Config& c, const Rules& rules) {
  const MoeConfig& moe = c.model.moe;
  rules.at_least("model.moe.experts", moe.experts, 0);
  if (!moe.enabled()) return;
  rules.at_least("model.moe.top_k", moe.top_k, 1);
  if (moe.top_k > moe.experts)
    rules.fail("model.moe.top_k", "(", moe.top_k, ") must be <= model.moe.experts (", moe.experts,
               ")");
  rules.at_least("model.moe.every", moe.every, 1);
  if (moe.every > c.model.n_layer)
    rules.fail("model.moe.every", "(", moe.every, ") must be <= model.n_layer (", c.model.n_layer,
               "): block i has experts when i % every == every - 1");
  if (!(moe.capacity_factor >= 0))
    rules.fail("model.moe.capacity_factor", "must be >= 0 (0: dropless), got ",
               moe.capacity_factor);
  rules.at_least("model.moe.group_sequences", moe.group_sequences, 1);
  if (c.train.micro_batch % moe.group_sequences != 0)
    rules.fail("model.moe.group_sequences", "(", moe.group_sequences,
               ") must divide train.micro_batch (", c.train.micro_batch,
               "): capacity is counted over groups of whole sequences of a micro-batch");
  if (!(moe.aux_loss >= 0)) rules.fail("model.moe.aux_loss", "must be >= 0, got ", moe.aux_loss);
  if (!(moe.z_loss >= 0)) rules.fail("model.moe.z_loss", "must be >= 0, got ", moe.z_loss);
}

// The block's architecture (model/gpt_architecture.h).
void validate_architecture(const Config& c, const Rules& rules) {
  const ModelConfig& m = c.model;
  const GptArchitecture& a = m.arch;
  if (!(a.norm_eps > 0 && a.norm_eps < 1))
    rules.fail("model.norm_eps", "must be in (0, 1), got ", a.norm_eps);
  rules.at_least("model.d_ff", a.d_ff, 0);
  rules.at_least("model.ffn_multiple_of", a.ffn_multiple_of, 1);
  if (!(a.rope_theta > 1)) rules.fail("model.rope_theta", "must be > 1, got ", a.rope_theta);
  rules.at_least("model.kv_heads", a.kv_heads, 0);
  if (a.kv_heads > 0 && m.n_head % a.kv_heads != 0)
    rules.fail("model.kv_heads", "(", a.kv_heads, ") must divide model.n_head (", m.n_head,
               "): each key/value head serves a group of query heads");
  const GptShape shape = gpt_shape_of(m);
  if (a.position == Position::rope && shape.head_size() % 2 != 0)
    rules.fail("model.position", "rope turns pairs of channels: the head size (d_model / n_head = ",
               shape.head_size(), ") must be even");
}

void validate_model(const Config& c, const Rules& rules) {
  const auto& m = c.model;
  rules.at_least("model.n_layer", m.n_layer, 1);
  rules.at_least("model.n_head", m.n_head, 1);
  rules.at_least("model.d_model", m.d_model, 1);
  rules.at_least("model.seq_len", m.seq_len, 1);
  rules.at_least("model.vocab_size", m.vocab_size, 2);
  if (m.d_model % m.n_head != 0)
    rules.fail("model.d_model", "(", m.d_model, ") must be divisible by model.n_head (", m.n_head,
               ")");
  // Element counts and offsets are 64-bit: refuse a model whose parameters, one layer's
  // activations or the logits of a sequence (which attention's T² also bounds) could overflow
  // them, long before any machine could hold it (found by fuzzing: docs/FUZZING.md).
  const double C = m.d_model, T = m.seq_len, V = m.vocab_size, L = m.n_layer;
  // The MLP's width as GptShape::ffn_width computes it in int, here in double, so that a width
  // past an int's range is refused before anything computes it (found by fuzzing).
  const GptArchitecture& a = m.arch;
  const double multiple = std::max(1, a.ffn_multiple_of);
  const double F = a.d_ff > 0 ? a.d_ff
                   : a.mlp == MlpKind::gelu
                       ? 4 * C
                       : std::ceil(std::floor(8 * C / 3) / multiple) * multiple;
  if (F > 0x1p30)
    rules.fail("model.d_ff", "the MLP's width (", F,
               ": model.d_ff or its default) must be <= 2^30");
  const double mlp_rows = (a.mlp == MlpKind::swiglu ? 3 : 2) * F;  // fc (gate and up) and proj
  const double parameters = L * (4 * C * C + mlp_rows * C) + 2 * (V + 256) * C + T * C;
  const double per_sequence = T * (16 * C + V) + m.n_head * T * T;
  constexpr double kLimit = 0x1p50;  // a petabyte of fp32 elements
  if (parameters > kLimit || per_sequence > kLimit)
    rules.fail("model", "is too large to index: about ", parameters, " parameters and ",
               per_sequence, " activations per sequence layer (the limit is 2^50 elements)");
  validate_architecture(c, rules);
  validate_moe(c, rules);
}

void validate_optimizer(const Config& c, const Rules& rules) {
  const auto& o = c.optimizer;
  rules.positive("optimizer.lr", o.lr);
  if (!(o.min_lr >= 0 && o.min_lr <= o.lr))
    rules.fail("optimizer.min_lr", "must be in [0, optimizer.lr = ", o.lr, "], got ", o.min_lr);
  rules.at_least("optimizer.warmup_steps", o.warmup_steps, 0);
  rules.at_least("optimizer.weight_decay", o.weight_decay, 0.0);
  rules.unit_interval("optimizer.beta1", o.beta1);
  rules.unit_interval("optimizer.beta2", o.beta2);
  rules.positive("optimizer.eps", o.eps);
  rules.at_least("optimizer.grad_clip", o.grad_clip, 0.0);
  if (o.offload == OptimizerOffload::disk && o.offload_dir.empty())
    rules.fail("optimizer.offload_dir", "must name a directory for optimizer.offload disk");
  // The CUDA backend's own update is AdamW's fused kernel; offloaded, every optimizer runs on the
  // host (train/backend/cuda_training.h). device auto is checked once it resolves to cuda.
  if (c.device == Device::cuda && o.name != OptimizerName::adamw &&
      o.offload == OptimizerOffload::none)
    rules.fail("optimizer.name", kOptimizerNameChoices.word(o.name),
               " has no CUDA kernel: on device cuda it needs optimizer.offload host or disk "
               "(the update on the host's cores)");
  if (!(o.offload_chunk >= 1024 && o.offload_chunk <= (std::int64_t{1} << 30)))
    rules.fail("optimizer.offload_chunk", "must be in [1024, 1073741824], got ", o.offload_chunk);
  const AdafactorConfig& a = o.adafactor;
  rules.unit_interval("optimizer.adafactor.beta1", a.beta1);
  if (!(a.decay_rate >= -1 && a.decay_rate < 0))
    rules.fail("optimizer.adafactor.decay_rate", "must be in [-1, 0), got ", a.decay_rate);
  rules.positive("optimizer.adafactor.eps1", a.eps1);
  rules.positive("optimizer.adafactor.eps2", a.eps2);
  rules.positive("optimizer.adafactor.clip_threshold", a.clip_threshold);
  if (!(o.adamw8bit.block_size >= 1 && o.adamw8bit.block_size <= (1 << 24)))
    rules.fail("optimizer.adamw8bit.block_size", "must be in [1, 16777216], got ",
               o.adamw8bit.block_size);
  rules.positive("optimizer.muon.lr", o.muon.lr);
  rules.unit_interval("optimizer.muon.momentum", o.muon.momentum);
  rules.at_least("optimizer.muon.ns_steps", o.muon.ns_steps, 1);
}

void validate_train(const Config& c, const Rules& rules) {
  const auto& t = c.train;
  rules.at_least("train.steps", t.steps, 1);
  rules.at_least("train.global_batch", t.global_batch, 1);
  rules.at_least("train.micro_batch", t.micro_batch, 1);
  if (t.global_batch % t.micro_batch != 0)
    rules.fail("train.global_batch", "(", t.global_batch,
               ") must be divisible by train.micro_batch (", t.micro_batch, ")");
  rules.at_least("train.eval_every", t.eval_every, 0);
  rules.at_least("train.eval_tokens", t.eval_tokens, std::int64_t{0});
  // One evaluation sequence needs seq_len inputs plus the next token as the last target.
  if (t.eval_every > 0 && has_validation(c.data) && t.eval_tokens <= c.model.seq_len)
    rules.fail("train.eval_tokens", "(", t.eval_tokens, ") must be more than model.seq_len (",
               c.model.seq_len, ") to evaluate at least one sequence");
  // Its text becomes ids with the run's tokenizer, which only data.tokenizer names.
  if (!t.eval_multiple_choice.empty() && c.data.tokenizer.empty())
    rules.fail("train.eval_multiple_choice", "needs data.tokenizer to tokenize its text");
  rules.at_least("train.log_every", t.log_every, 1);
  rules.at_least("train.stop_after", t.stop_after, 0);
  rules.at_least("train.nonfinite_limit", t.nonfinite_limit, 1);

  rules.at_least("checkpoint.every", c.checkpoint.every, 0);
  rules.at_least("checkpoint.keep", c.checkpoint.keep, 0);
  rules.at_least("precision.loss_scale_window", c.precision.loss_scale_window, 1);
  // The bounds of a dynamic scale (LossScaler): below 1 it only shrinks gradients, 2^32 already
  // lifts the smallest fp32 gradient of interest into fp16's range.
  const double initial_scale = c.precision.initial_loss_scale;
  if (!(initial_scale >= 1 && initial_scale <= 4294967296.0))
    rules.fail("precision.initial_loss_scale", "must be in [1, 4294967296 (2^32)], got ",
               initial_scale);
}

// parallel.ep: experts split over ep ranks of the data-parallel group (ep dividing dp is checked
// with the world, resolve_mesh). What it does not compose with yet is refused by name.
void validate_expert_parallelism(const Config& c, const Rules& rules) {
  const auto& p = c.parallel;
  rules.at_least("parallel.ep", p.ep, 1);
  if (p.ep <= 1) return;
  const int experts = c.model.moe.experts;
  if (experts == 0)
    rules.fail("parallel.ep", "(", p.ep,
               ") splits a mixture of experts over ranks: set model.moe.experts or use ep 1");
  else if (experts % p.ep != 0)
    rules.fail("parallel.ep", "(", p.ep, ") must divide model.moe.experts (", experts, ")");
  if (p.zero.hierarchical_partition || p.zero.quantized_gradients)
    rules.fail("parallel.ep", "(", p.ep,
               ") shards over the ranks holding the same experts; ZeRO++ hpZ and qgZ, which split "
               "the whole data-parallel group by node, do not run with it yet");
}

// parallel.cp: every sequence cut into 2·cp chunks over cp ranks (ARCHITECTURE §2, "cp"). What
// it does not compose with yet is refused by name.
void validate_context_parallelism(const Config& c, const Rules& rules) {
  const auto& p = c.parallel;
  rules.at_least("parallel.cp", p.cp, 1);
  if (p.cp <= 1) return;
  const int chunks = 2 * p.cp;
  if (c.model.seq_len % chunks != 0)
    rules.fail("parallel.cp", "(", p.cp, ") cuts each sequence into 2*cp = ", chunks,
               " equal chunks, but model.seq_len (", c.model.seq_len, ") is not a multiple of ",
               chunks);
  if (c.model.moe.enabled())
    rules.fail("parallel.cp", "(", p.cp,
               ") splits sequences, but model.moe's capacity groups are whole sequences: use cp 1 "
               "with experts");
  if (p.zero.hierarchical_partition || p.zero.quantized_gradients)
    rules.fail("parallel.cp", "(", p.cp,
               ") shards over data and context ranks together; ZeRO++ hpZ and qgZ, which split "
               "the data-parallel group by node, do not run with it yet");
  if (p.sequence_parallel && c.model.seq_len % (p.cp * p.tp) != 0)
    rules.fail("parallel.sequence_parallel", "splits each rank's ", c.model.seq_len / p.cp,
               " rows of a sequence (model.seq_len / parallel.cp) over parallel.tp (", p.tp,
               "), which does not divide them");
  if (!c.train.eval_multiple_choice.empty())
    rules.fail("train.eval_multiple_choice",
               "scores whole sequences on one rank; it does not run with parallel.cp > 1 yet");
  if (c.swarm.enabled())
    rules.fail("parallel.cp", "(", p.cp,
               ") does not run under swarm (its stages are single ranks)");
}

void validate_parallel(const Config& c, const Rules& rules) {
  const auto& p = c.parallel;
  rules.at_least("parallel.tp", p.tp, 1);
  rules.at_least("parallel.pp", p.pp, 1);
  rules.at_least("parallel.dp", p.dp, 0);
  rules.at_least("parallel.gpus_per_node", p.gpus_per_node, 1);
  rules.at_least("threads", c.threads, 0);  // 0 is auto
  validate_expert_parallelism(c, rules);
  validate_context_parallelism(c, rules);
  if (p.zero.stage < 0 || p.zero.stage > 3)
    rules.fail("parallel.zero.stage", "must be 0, 1, 2 or 3, got ", p.zero.stage);
  // ZeRO++ acts on the gathers and reduce-scatters of sharded weights: stage 3's.
  const std::pair<const char*, bool> zero_plus_plus[] = {
      {"parallel.zero.quantized_weights", p.zero.quantized_weights},
      {"parallel.zero.hierarchical_partition", p.zero.hierarchical_partition},
      {"parallel.zero.quantized_gradients", p.zero.quantized_gradients}};
  for (const auto& [key, on] : zero_plus_plus)
    if (on && p.zero.stage != 3)
      rules.fail(key,
                 "is a ZeRO++ switch and needs parallel.zero.stage 3 (the stage whose weights ",
                 "are sharded and gathered), got stage ", p.zero.stage);

  // Tensor parallelism splits attention by heads; with d_model % n_head == 0 this also splits
  // d_model evenly. Key/value heads are split too (not replicated): each rank holds whole groups.
  if (c.model.n_head % p.tp != 0)
    rules.fail("parallel.tp", "(", p.tp, ") must divide model.n_head (", c.model.n_head, ")");
  const GptShape model_shape = gpt_shape_of(c.model);
  if (model_shape.kv_head_count() % p.tp != 0)
    rules.fail("parallel.tp", "(", p.tp, ") must divide model.kv_heads (",
               model_shape.kv_head_count(), "): tensor parallelism splits the key/value heads");
  if (model_shape.ffn_width() % p.tp != 0)
    rules.fail("parallel.tp", "(", p.tp, ") must divide the MLP width (", model_shape.ffn_width(),
               ": model.d_ff or its default)");
  // The token embedding (and the LM head tied to it) is split by vocabulary rows; the padding to
  // a multiple of 128 makes any power-of-two tp divide it, but not e.g. tp = 3.
  GptShape shape;
  shape.vocab_size = c.model.vocab_size;
  const int padded_vocab = shape.padded_vocab();
  if (padded_vocab % p.tp != 0)
    rules.fail("parallel.tp", "(", p.tp, ") must divide the padded vocabulary (", padded_vocab,
               ": model.vocab_size ", c.model.vocab_size, " rounded up to a multiple of 128)");
  // Sequence parallelism splits the sequence dimension across the tensor-parallel ranks.
  if (p.sequence_parallel && c.model.seq_len % p.tp != 0)
    rules.fail("parallel.sequence_parallel", "needs model.seq_len (", c.model.seq_len,
               ") divisible by parallel.tp (", p.tp, ")");

  // NCCL carries device arrays: a run on the CPU has none.
  if (!p.cluster.empty() && !p.auto_layout)
    rules.fail("parallel.cluster",
               "describes the cluster parallel.auto plans for; set "
               "parallel.auto: true or remove it");
  if (p.device_comm == DeviceComm::nccl && c.device == Device::cpu)
    rules.fail("parallel.device_comm", "nccl needs device cuda or auto, not cpu");

  // Chunks per rank: the schedule decides (pipeline_schedule.h).
  rules.at_least("parallel.virtual_stages", p.virtual_stages, 1);
  const std::string schedule = pipeline_schedule_name(p.pipeline_schedule);
  if (p.pipeline_schedule == PipelineSchedule::interleaved && p.virtual_stages < 2)
    rules.fail("parallel.virtual_stages", "must be >= 2 for pipeline_schedule interleaved (chunks ",
               "of layers per rank), got ", p.virtual_stages);
  if (p.pipeline_schedule == PipelineSchedule::zbv && p.virtual_stages != 2)
    rules.fail("parallel.virtual_stages", "must be 2 for pipeline_schedule zbv (the two arms of ",
               "the V), got ", p.virtual_stages);
  const bool chunked = p.pipeline_schedule == PipelineSchedule::interleaved ||
                       p.pipeline_schedule == PipelineSchedule::zbv;
  if (!chunked && p.virtual_stages != 1)
    rules.fail("parallel.virtual_stages", "must be 1 for pipeline_schedule ", schedule,
               " (one chunk per rank; interleaved and zbv hold several), got ", p.virtual_stages);
  if (chunked && p.pp < 2)
    rules.fail("parallel.pipeline_schedule", schedule, " needs parallel.pp >= 2, got ", p.pp);
  // Every (virtual) pipeline stage holds at least one layer.
  const int stages = p.pp * std::max(1, p.virtual_stages);
  if (p.pp > c.model.n_layer)
    rules.fail("parallel.pp", "(", p.pp, ") must be <= model.n_layer (", c.model.n_layer, ")");
  else if (stages > c.model.n_layer)
    rules.fail("parallel.virtual_stages", "(", p.virtual_stages, ") times parallel.pp (", p.pp,
               ") must be <= model.n_layer (", c.model.n_layer, "): one layer per virtual stage");
  if (!p.pp_layers.empty()) {
    if (static_cast<int>(p.pp_layers.size()) != stages)
      rules.fail("parallel.pp_layers",
                 "must have one entry per pipeline stage (parallel.pp = ", p.pp,
                 p.virtual_stages > 1 ? " times parallel.virtual_stages" : "", " = ", stages,
                 "), got ", p.pp_layers.size());
    for (std::size_t i = 0; i < p.pp_layers.size(); ++i) {
      if (p.pp_layers[i] < 1)
        rules.fail("parallel.pp_layers", "entries must be >= 1, got ", p.pp_layers[i], " at index ",
                   i);
    }
    const std::int64_t total =
        std::accumulate(p.pp_layers.begin(), p.pp_layers.end(), std::int64_t{0});
    if (total != c.model.n_layer)
      rules.fail("parallel.pp_layers", "must sum to model.n_layer (", c.model.n_layer, "), got ",
                 total);
  }
}

void validate_diloco(const Config& c, const Rules& rules) {
  const auto& d = c.diloco;
  rules.at_least("diloco.workers", d.workers, 1);
  rules.at_least("diloco.inner_steps", d.inner_steps, 1);
  rules.positive("diloco.outer_lr", d.outer_lr);
  rules.unit_interval("diloco.outer_momentum", d.outer_momentum);
  rules.unit_interval("diloco.drop_probability", d.drop_probability);
  rules.at_least("diloco.fragments", d.fragments, 1);
  // Streaming syncs F fragments of about N/F parameters at offsets f·H/F of each period
  // (train/diloco/diloco_fragments.h); more fragments than layers would only add syncs.
  if (d.fragments > c.model.n_layer)
    rules.fail("diloco.fragments", "(", d.fragments, ") must not exceed model.n_layer (",
               c.model.n_layer, "): at most one fragment per layer");
  if (d.inner_steps % d.fragments != 0)
    rules.fail("diloco.fragments", "(", d.fragments, ") must divide diloco.inner_steps (",
               d.inner_steps, "): fragment f syncs at offset f·H/F");
  rules.at_least("diloco.trim", d.trim, 1);
  rules.positive("diloco.clip_radius", d.clip_radius);
  rules.at_least("diloco.clip_iterations", d.clip_iterations, 1);
  if (d.aggregation != AggregationRule::mean && d.averaging != Averaging::all_reduce)
    rules.fail("diloco.aggregation", kAggregationChoices.word(d.aggregation),
               " needs diloco.averaging all_reduce: every member gathers every outer gradient "
               "and combines them itself (",
               kAveragingChoices.word(d.averaging), " passes partial averages on)");
  if (d.layouts == WorkerLayouts::any && d.join.empty())
    rules.fail("diloco.layouts",
               "any is for elastic groups (diloco.join): the workers of one job "
               "share its layout");
  if (d.layouts == WorkerLayouts::any && c.parallel.ep > 1)
    rules.fail("diloco.layouts", "any does not take parallel.ep > 1 (", c.parallel.ep,
               "): a worker of experts split over ranks needs diloco.layouts same");
  if (d.join.empty() && !d.secret_file.empty())
    rules.fail("diloco.secret_file",
               "is for elastic groups (diloco.join): the workers of one job trust each other");
  if (d.join.empty()) return;
  if (!d.join.starts_with("file:///") && !d.join.starts_with("redis://"))
    rules.fail("diloco.join", "must be file:///absolute/dir or redis://host:port, got '", d.join,
               "'");
  if (d.group.empty() || d.group.find_first_of(" /") != std::string::npos)
    rules.fail("diloco.group", "must be a name without spaces or '/', got '", d.group, "'");
  if (d.slot < -1 || d.slot >= d.workers)
    rules.fail("diloco.slot", "must be -1 (the first free slot) or a slot below diloco.workers (",
               d.workers, "), got ", d.slot);
  if (d.min_workers < 1 || d.min_workers > d.workers)
    rules.fail("diloco.min_workers", "must be between 1 and diloco.workers (", d.workers, "), got ",
               d.min_workers);
  rules.positive("diloco.timeout", d.timeout);
  if (d.drop_probability > 0)
    rules.fail("diloco.drop_probability",
               "simulates failures of a job's own workers; an elastic group (diloco.join) has "
               "real ones");
}

}  // namespace

void validate_config(const Config& config, const ConfigSource& source) {
  const Rules rules(source);
  validate_run_and_data(config, rules);
  validate_model(config, rules);
  validate_optimizer(config, rules);
  validate_train(config, rules);
  validate_parallel(config, rules);
  validate_diloco(config, rules);
  validate_swarm(config, rules);
  validate_fp8(config, rules);
}

}  // namespace config_detail

// DiLoCo: every worker is a contiguous block of world/k ranks; the mesh is one worker's.
int worker_world_size(const Config& config, int world_size) {
  const auto& d = config.diloco;
  // An elastic worker is a job of its own.
  if (!d.enabled || d.elastic()) return world_size;
  if (world_size % d.workers != 0)
    fail("'diloco.workers' (", d.workers, ") must divide the world (", world_size,
         " ranks): each worker is world/workers ranks");
  const int size = world_size / d.workers, node = config.parallel.gpus_per_node;
  // A worker's simulated nodes must be nodes of the job: whole nodes, or a part of one.
  if (size % node != 0 && node % size != 0)
    fail("'diloco.workers' (", d.workers, ") gives workers of ", size,
         " ranks, which neither fill whole nodes nor share one (parallel.gpus_per_node = ", node,
         ")");
  return size;
}

MeshShape resolve_mesh(const Config& config, int world_size) {
  const auto& p = config.parallel;
  world_size = worker_world_size(config, world_size);
  const MeshShape shape =
      resolve_mesh_shape(MeshRequest{p.tp, p.pp, p.dp, p.gpus_per_node, p.ep, p.cp}, world_size);
  const auto& t = config.train;
  const std::int64_t sequences_per_pass = std::int64_t{t.micro_batch} * shape.dp;
  if (t.global_batch % sequences_per_pass != 0)
    fail("'train.global_batch' (", t.global_batch, ") must be divisible by micro_batch*dp (",
         t.micro_batch, "*", shape.dp, "=", sequences_per_pass, ")");
  // Interleaved walks whole groups of pp micro-batches through each chunk.
  const std::int64_t micro_batches = t.global_batch / sequences_per_pass;
  if (p.pipeline_schedule == PipelineSchedule::interleaved && micro_batches % shape.pp != 0)
    fail(
        "'parallel.pipeline_schedule' interleaved needs the micro-batches per step "
        "(train.global_batch / (micro_batch*dp) = ",
        micro_batches, ") to be a multiple of parallel.pp (", shape.pp,
        "): its order walks whole groups of pp micro-batches through each chunk");
  // ZeRO shards over the data-parallel group (with context parallelism, dp × cp): with one
  // rank there is nothing to shard, and asking for it is a mistake about the layout rather than a
  // no-op to ignore.
  if (p.zero.stage > 0 && shape.dp * shape.cp == 1)
    fail("'parallel.zero.stage' (", p.zero.stage,
         ") shards the training state over the data-parallel ranks, but this layout has dp 1 "
         "(world ",
         world_size, " = tp ", shape.tp, " * pp ", shape.pp, "): use stage 0 or more ranks");
  // Under expert parallelism the shards are the dp/ep ranks holding the same experts.
  if (p.zero.stage > 0 && shape.ep > 1 && shape.dp == shape.ep)
    fail("'parallel.zero.stage' (", p.zero.stage,
         ") shards over the data-parallel ranks that hold ", "the same experts, but parallel.ep (",
         shape.ep, ") equals dp (", shape.dp,
         "): every rank holds its own; use stage 0 or dp > ep");
  // hpZ keeps a secondary weight partition over the data-parallel ranks of a node: every node
  // must hold the same number of each data-parallel group's ranks.
  // hpZ's secondary groups and qgZ's two hops split the dp group into nodes × ranks per node.
  for (const auto& [key, on] :
       {std::pair<const char*, bool>{"hierarchical_partition", p.zero.hierarchical_partition},
        std::pair<const char*, bool>{"quantized_gradients", p.zero.quantized_gradients}})
    if (on && !Mesh(shape, 0, p.gpus_per_node).dp_factors_evenly())
      fail("'parallel.zero.", key,
           "' needs the data-parallel ranks of every node to divide the data-parallel group "
           "evenly, but dp ",
           shape.dp, " (tp ", shape.tp, ", pp ", shape.pp, ") over nodes of ", p.gpus_per_node,
           " ranks (parallel.gpus_per_node) does not");
  return shape;
}

int resolve_data_parallel(const Config& config, int world_size) {
  return resolve_mesh(config, world_size).dp;
}

std::vector<std::string> config_warnings(const Config& config) {
  std::vector<std::string> warnings;
  const OptimizerConfig& o = config.optimizer;
  if (o.warmup_steps > 0 && o.warmup_steps >= config.train.steps)
    warnings.push_back(
        "optimizer.warmup_steps (" + std::to_string(o.warmup_steps) + ") >= train.steps (" +
        std::to_string(config.train.steps) +
        "): the learning rate is still warming up when the run ends and never reaches "
        "optimizer.lr");
  return warnings;
}

}  // namespace strata
