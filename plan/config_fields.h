// Internal to plan/config*.cpp: the one list of config keys (visit_fields) that parsing, writing
// and the unknown-key check all walk, so a key added here is read, written and known everywhere.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/core/error.h"
#include "plan/config.h"

namespace YAML {
class Node;
class Emitter;
}  // namespace YAML

namespace strata::config_detail {

// An enumerated key: one of the words of its table (docs/ARCHITECTURE.md §3), held as the enum.
template <class E, std::size_t N>
struct Choice {
  E& value;
  const Choices<E, N>& choices;
};
template <class E, std::size_t N>
Choice(E&, const Choices<E, N>&) -> Choice<E, N>;  // clang before 17 needs it spelled out
// A list of words of one table (precision.fp8_layers): each entry at most once.
template <class E, std::size_t N>
struct ChoiceList {
  std::vector<E>& values;
  const Choices<E, N>& choices;
};
template <class E, std::size_t N>
ChoiceList(std::vector<E>&, const Choices<E, N>&) -> ChoiceList<E, N>;
// parallel.dp, threads and swarm.stage: `auto` (stored as least − 1) or an integer >= `least`.
// The effective config writes `auto_means` as a comment beside `auto`.
struct AutoCount {
  int& value;
  const char* auto_means;
  int least = 1;
  bool is_auto() const { return value == least - 1; }
};
// precision.loss_scale: `dynamic` or a positive number, kept as written.
struct LossScale {
  std::string& value;
};
// data.train: a string (one split) or a list of sources {path, weight, val, name}
// (config_sources.cpp).
struct TrainData {
  std::string& path;
  std::vector<DataSource>& mixture;
};

// Calls visit(path, field) for every key in YAML order. Sections must stay contiguous: the writer
// opens and closes maps as the path prefix changes.
template <class Visitor>
void visit_fields(Config& c, Visitor&& visit) {
  visit("run.name", c.run.name);
  visit("run.dir", c.run.dir);
  visit("run.seed", c.run.seed);

  visit("model.n_layer", c.model.n_layer);
  visit("model.n_head", c.model.n_head);
  visit("model.d_model", c.model.d_model);
  visit("model.seq_len", c.model.seq_len);
  visit("model.vocab_size", c.model.vocab_size);
  visit("model.norm", Choice{c.model.arch.norm, kNormChoices});
  visit("model.norm_eps", c.model.arch.norm_eps);
  visit("model.mlp", Choice{c.model.arch.mlp, kMlpChoices});
  visit("model.d_ff", c.model.arch.d_ff);
  visit("model.ffn_multiple_of", c.model.arch.ffn_multiple_of);
  visit("model.position", Choice{c.model.arch.position, kPositionChoices});
  visit("model.rope_theta", c.model.arch.rope_theta);
  visit("model.kv_heads", c.model.arch.kv_heads);
  visit("model.bias", c.model.arch.bias);
  visit("model.tie_embeddings", c.model.arch.tie_embeddings);
  visit("model.moe.experts", c.model.moe.experts);
  visit("model.moe.top_k", c.model.moe.top_k);
  visit("model.moe.every", c.model.moe.every);
  visit("model.moe.capacity_factor", c.model.moe.capacity_factor);
  visit("model.moe.group_sequences", c.model.moe.group_sequences);
  visit("model.moe.aux_loss", c.model.moe.aux_loss);
  visit("model.moe.z_loss", c.model.moe.z_loss);

  visit("data.train", TrainData{c.data.train, c.data.mixture});
  visit("data.val", c.data.val);
  visit("data.tokenizer", c.data.tokenizer);

  visit("optimizer.name", Choice{c.optimizer.name, kOptimizerNameChoices});
  visit("optimizer.lr", c.optimizer.lr);
  visit("optimizer.min_lr", c.optimizer.min_lr);
  visit("optimizer.warmup_steps", c.optimizer.warmup_steps);
  visit("optimizer.schedule", Choice{c.optimizer.schedule, kLrScheduleChoices});
  visit("optimizer.weight_decay", c.optimizer.weight_decay);
  visit("optimizer.beta1", c.optimizer.beta1);
  visit("optimizer.beta2", c.optimizer.beta2);
  visit("optimizer.eps", c.optimizer.eps);
  visit("optimizer.grad_clip", c.optimizer.grad_clip);
  visit("optimizer.offload", Choice{c.optimizer.offload, kOptimizerOffloadChoices});
  visit("optimizer.offload_dir", c.optimizer.offload_dir);
  visit("optimizer.offload_chunk", c.optimizer.offload_chunk);
  visit("optimizer.adafactor.beta1", c.optimizer.adafactor.beta1);
  visit("optimizer.adafactor.decay_rate", c.optimizer.adafactor.decay_rate);
  visit("optimizer.adafactor.eps1", c.optimizer.adafactor.eps1);
  visit("optimizer.adafactor.eps2", c.optimizer.adafactor.eps2);
  visit("optimizer.adafactor.clip_threshold", c.optimizer.adafactor.clip_threshold);
  visit("optimizer.adafactor.relative_step", c.optimizer.adafactor.relative_step);
  visit("optimizer.adamw8bit.block_size", c.optimizer.adamw8bit.block_size);
  visit("optimizer.muon.lr", c.optimizer.muon.lr);
  visit("optimizer.muon.momentum", c.optimizer.muon.momentum);
  visit("optimizer.muon.ns_steps", c.optimizer.muon.ns_steps);
  visit("optimizer.muon.nesterov", c.optimizer.muon.nesterov);

  visit("train.steps", c.train.steps);
  visit("train.global_batch", c.train.global_batch);
  visit("train.micro_batch", c.train.micro_batch);
  visit("train.eval_every", c.train.eval_every);
  visit("train.eval_tokens", c.train.eval_tokens);
  visit("train.eval_multiple_choice", c.train.eval_multiple_choice);
  visit("train.log_every", c.train.log_every);
  visit("train.stop_after", c.train.stop_after);
  visit("train.nonfinite", Choice{c.train.nonfinite, kNonfinitePolicyChoices});
  visit("train.nonfinite_limit", c.train.nonfinite_limit);

  visit("checkpoint.every", c.checkpoint.every);
  visit("checkpoint.keep", c.checkpoint.keep);
  visit("checkpoint.dir", c.checkpoint.dir);

  visit("precision.compute", Choice{c.precision.compute, cpu::kComputeDtypeChoices});
  visit("precision.loss_scale", LossScale{c.precision.loss_scale});
  visit("precision.loss_scale_window", c.precision.loss_scale_window);
  visit("precision.initial_loss_scale", c.precision.initial_loss_scale);
  visit("precision.fp8", Choice{c.precision.fp8.scaling, kFp8ScalingChoices});
  visit("precision.fp8_format", Choice{c.precision.fp8.formats, kFp8FormatsChoices});
  visit("precision.fp8_history", c.precision.fp8.history);
  visit("precision.fp8_layers", ChoiceList{c.precision.fp8.layers, kFp8LayerChoices});
  visit("precision.fp8_min_size", c.precision.fp8.min_size);

  visit("parallel.tp", c.parallel.tp);
  visit("parallel.pp", c.parallel.pp);
  visit("parallel.dp", AutoCount{c.parallel.dp, "world / (tp*cp*pp)"});
  visit("parallel.ep", c.parallel.ep);
  visit("parallel.cp", c.parallel.cp);
  visit("parallel.cp_comm", Choice{c.parallel.cp_comm, kContextCommChoices});
  visit("parallel.gpus_per_node", c.parallel.gpus_per_node);
  visit("parallel.pipeline_schedule",
        Choice{c.parallel.pipeline_schedule, kPipelineScheduleChoices});
  visit("parallel.virtual_stages", c.parallel.virtual_stages);
  visit("parallel.sequence_parallel", c.parallel.sequence_parallel);
  visit("parallel.pp_layers", c.parallel.pp_layers);
  visit("parallel.device_comm", Choice{c.parallel.device_comm, kDeviceCommChoices});
  visit("parallel.zero.stage", c.parallel.zero.stage);
  visit("parallel.zero.gradient_reduction",
        Choice{c.parallel.zero.gradient_reduction, kGradientReductionChoices});
  visit("parallel.zero.quantized_weights", c.parallel.zero.quantized_weights);
  visit("parallel.zero.hierarchical_partition", c.parallel.zero.hierarchical_partition);
  visit("parallel.zero.quantized_gradients", c.parallel.zero.quantized_gradients);
  visit("parallel.auto", c.parallel.auto_layout);
  visit("parallel.cluster", c.parallel.cluster);

  visit("recompute", Choice{c.recompute, kRecomputeChoices});
  visit("device", Choice{c.device, kDeviceChoices});
  visit("threads", AutoCount{c.threads, "OMP_NUM_THREADS, else this host's cores / its ranks"});

  visit("diloco.enabled", c.diloco.enabled);
  visit("diloco.workers", c.diloco.workers);
  visit("diloco.inner_steps", c.diloco.inner_steps);
  visit("diloco.outer_lr", c.diloco.outer_lr);
  visit("diloco.outer_momentum", c.diloco.outer_momentum);
  visit("diloco.nesterov", c.diloco.nesterov);
  visit("diloco.outer_schedule", Choice{c.diloco.outer_schedule, kOuterScheduleChoices});
  visit("diloco.compression", Choice{c.diloco.compression, kOuterCompressionChoices});
  visit("diloco.error_feedback", c.diloco.error_feedback);
  visit("diloco.fragments", c.diloco.fragments);
  visit("diloco.overlap", c.diloco.overlap);
  visit("diloco.averaging", Choice{c.diloco.averaging, kAveragingChoices});
  visit("diloco.drop_probability", c.diloco.drop_probability);
  visit("diloco.aggregation", Choice{c.diloco.aggregation, kAggregationChoices});
  visit("diloco.trim", c.diloco.trim);
  visit("diloco.clip_radius", c.diloco.clip_radius);
  visit("diloco.clip_iterations", c.diloco.clip_iterations);
  visit("diloco.outlier_factor", c.diloco.outlier_factor);
  visit("diloco.join", c.diloco.join);
  visit("diloco.group", c.diloco.group);
  visit("diloco.slot", c.diloco.slot);
  visit("diloco.min_workers", c.diloco.min_workers);
  visit("diloco.timeout", c.diloco.timeout);
  visit("diloco.interface", c.diloco.interface);
  visit("diloco.secret_file", c.diloco.secret_file);
  visit("diloco.layouts", Choice{c.diloco.layouts, kWorkerLayoutsChoices});

  visit("swarm.join", c.swarm.join);
  visit("swarm.group", c.swarm.group);
  visit("swarm.stage",
        AutoCount{c.swarm.stage, "the stage with the least throughput per sample", 0});
  visit("swarm.stages", c.swarm.stages);
  visit("swarm.target_batch", c.swarm.target_batch);
  visit("swarm.routing", Choice{c.swarm.routing, kSwarmRoutingChoices});
  visit("swarm.compression", Choice{c.swarm.compression, kSwarmCompressionChoices});
  visit("swarm.timeout", c.swarm.timeout);
  visit("swarm.request_timeout", c.swarm.request_timeout);
  visit("swarm.host", c.swarm.host);
  visit("swarm.stage_peers", c.swarm.stage_peers);
  visit("swarm.interface", c.swarm.interface);
  visit("swarm.rebalance_every", c.swarm.rebalance_every);
  visit("swarm.in_flight", c.swarm.in_flight);
  visit("swarm.secret_file", c.swarm.secret_file);
}

// The config's source name plus which keys a `--set` wrote, so that every message can say both
// where the bad value came from and which key it is.
class ConfigSource {
 public:
  explicit ConfigSource(std::string name) : name_(std::move(name)) {}

  const std::string& name() const { return name_; }
  // Records that `--set <text>` assigned the subtree at `path`.
  void note_override(const std::string& path, const std::string& text) { overrides_[path] = text; }
  // " (from --set 'k=v')" when `path` or one of its sections was assigned by a --set, else "".
  std::string origin(std::string_view path) const {
    for (std::string prefix(path);;) {
      if (auto it = overrides_.find(prefix); it != overrides_.end())
        return " (from --set '" + it->second + "')";
      // data.train[1].weight -> data.train[1] -> data.train -> data
      const auto cut = prefix.ends_with(']') ? prefix.rfind('[') : prefix.rfind('.');
      if (cut == std::string::npos) return "";
      prefix.resize(cut);
    }
  }
  // Throws "<source>: '<path>' <parts...>[ (from --set ...)]".
  template <class... Parts>
  [[noreturn]] void fail_key(std::string_view path, const Parts&... parts) const {
    fail(name_, ": '", path, "' ", parts..., origin(path));
  }

 private:
  std::string name_;
  std::map<std::string, std::string> overrides_;
};

// "a map", "a list", "'text'" or "nothing": what a node is, for messages.
std::string describe(const YAML::Node& node);
// Emits a string value so that it reads back the same: double-quoted (control characters escaped)
// when it holds one, which yaml-cpp would otherwise write raw (a lone carriage return then reads
// back as a line break: found by fuzzing, docs/FUZZING.md).
void emit_string(YAML::Emitter& out, const std::string& value);
// A finite number written as YAML/JSON writes one ("1e-3", "+2"); std::nullopt otherwise.
std::optional<double> parse_number(std::string_view text);

// data.train's two forms (config_sources.cpp). read_train_data: `node` is the key's value, either
// form, checked for shape and types, with every missing name derived (source_name_of).
void read_train_data(const YAML::Node& node, const std::string& path, TrainData data,
                     const ConfigSource& source);
void write_train_data(YAML::Emitter& out, const TrainData& data);
// One line: the path, or [{path: a, weight: 0.7, name: a}, ...] (resume warnings).
std::string train_data_text(const TrainData& data);
// The mixture's ranges and names: weights > 0 and each at least 1/1024 of the total, names
// unique and usable as metrics keys.
void validate_mixture(const std::vector<DataSource>& mixture, const ConfigSource& source);

// Each key's value as the effective config writes it (an empty string as "", unquoted), by key
// path (config_diff.cpp): what a resume compares, and the defaults of docs/ARCHITECTURE.md §3
// (config_reference.cpp).
std::map<std::string, std::string> field_texts(const Config& config);

// Every range and consistency rule that needs no world size (config_validate.cpp).
void validate_config(const Config& config, const ConfigSource& source);

// The candidate closest to `word` by edit distance (case-insensitive, transpositions count once),
// or "" when none is close enough to be a plausible typo.
std::string closest_word(std::string_view word, std::span<const std::string> candidates);

}  // namespace strata::config_detail
