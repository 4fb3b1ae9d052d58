// The run configuration: typed structs mapped one-to-one to the YAML keys of docs/ARCHITECTURE.md
// §3. load_config() parses a file, applies `--set key.path=value` overrides, and validates
// everything (unknown keys with a did-you-mean, wrong types, ranges, sizes that do not divide)
// before any work; every problem is a strata::Error whose message names the key and the reason.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/core/choice.h"
#include "model/core/context_chunks.h"
#include "model/fp8/fp8_recipe.h"
#include "model/gpt_shape.h"
#include "model/kernels/cpu/precision.h"
#include "model/recompute.h"
#include "parallel/diloco/averaging.h"
#include "parallel/diloco/outer_compression.h"
#include "parallel/diloco/robust_aggregation.h"
#include "parallel/mesh/mesh.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/swarm/stochastic_wiring.h"
#include "parallel/zero/gradient_reduction.h"

namespace strata {

// The enumerated keys are parsed once, at load, into enums; the words each one accepts are its
// table's (beside the enum's definition; these eight are implemented in train/, which plan/ may
// not include, so the config owns them).
enum class LrSchedule { cosine, linear, constant };
inline constexpr Choices kLrScheduleChoices{
    std::array{ChoiceWord{LrSchedule::cosine, "cosine"}, ChoiceWord{LrSchedule::linear, "linear"},
               ChoiceWord{LrSchedule::constant, "constant"}}};
// optimizer.name (train/optimizer/optimizer.h): the update the inner optimizer applies.
enum class OptimizerName { adamw, adafactor, adamw8bit, muon };
inline constexpr Choices kOptimizerNameChoices{std::array{
    ChoiceWord{OptimizerName::adamw, "adamw"}, ChoiceWord{OptimizerName::adafactor, "adafactor"},
    ChoiceWord{OptimizerName::adamw8bit, "adamw8bit"}, ChoiceWord{OptimizerName::muon, "muon"}}};
// diloco.outer_schedule (train/diloco/outer_optimizer.h): the outer step's extrapolation constant,
// or following the inner learning-rate schedule (warmed up and annealed with it).
enum class OuterSchedule { constant, inner };
inline constexpr Choices kOuterScheduleChoices{std::array{
    ChoiceWord{OuterSchedule::constant, "constant"}, ChoiceWord{OuterSchedule::inner, "inner"}}};
// diloco.layouts (train/diloco/logical_replica.h): an elastic group's workers share one layout and
// average share by share, or each has its own and they average the logical model from rank 0.
enum class WorkerLayouts { same, any };
inline constexpr Choices kWorkerLayoutsChoices{
    std::array{ChoiceWord{WorkerLayouts::same, "same"}, ChoiceWord{WorkerLayouts::any, "any"}}};
// swarm.routing (parallel/swarm/stochastic_wiring.h): the least loaded peer of the next stage by
// its measured speed, or round-robin (tests and equivalence).
inline constexpr Choices kSwarmRoutingChoices{std::array{
    ChoiceWord{SwarmRouting::balanced, "balanced"}, ChoiceWord{SwarmRouting::fixed, "fixed"}}};
// swarm.compression (train/swarm/stage_requests.h): the activations and gradients between a
// swarm's stages as sent, fp32 or int8 in blocks with an fp32 scale each.
enum class SwarmCompression { none, int8 };
inline constexpr Choices kSwarmCompressionChoices{std::array{
    ChoiceWord{SwarmCompression::none, "none"}, ChoiceWord{SwarmCompression::int8, "int8"}}};
enum class OptimizerOffload { none, host, disk };
inline constexpr Choices kOptimizerOffloadChoices{std::array{
    ChoiceWord{OptimizerOffload::none, "none"}, ChoiceWord{OptimizerOffload::host, "host"},
    ChoiceWord{OptimizerOffload::disk, "disk"}}};
enum class NonfinitePolicy { skip, stop };
inline constexpr Choices kNonfinitePolicyChoices{std::array{
    ChoiceWord{NonfinitePolicy::skip, "skip"}, ChoiceWord{NonfinitePolicy::stop, "stop"}}};
// Where a run computes: `auto` resolves to cpu or cuda at start-up
// (train/backend/device_choice.cpp).
enum class Device { cpu, cuda, automatic };
inline constexpr Choices kDeviceChoices{std::array{ChoiceWord{Device::cpu, "cpu"},
                                                   ChoiceWord{Device::cuda, "cuda"},
                                                   ChoiceWord{Device::automatic, "auto"}}};
enum class DeviceComm { automatic, nccl, host };
inline constexpr Choices kDeviceCommChoices{std::array{ChoiceWord{DeviceComm::automatic, "auto"},
                                                       ChoiceWord{DeviceComm::nccl, "nccl"},
                                                       ChoiceWord{DeviceComm::host, "host"}}};

struct RunConfig {
  std::string name = "demo";
  std::string dir = "runs";
  std::uint64_t seed = 1234;

  bool operator==(const RunConfig&) const = default;
};

struct ModelConfig {
  int n_layer = 4;
  int n_head = 4;
  int d_model = 128;
  int seq_len = 128;
  int vocab_size = 4096;
  MoeConfig moe;  // model.moe: experts 0 (the default) keeps every MLP dense
  // model.norm, norm_eps, mlp, d_ff, ffn_multiple_of, position, rope_theta, kv_heads, bias,
  // tie_embeddings: the block (GPT-2's by default; model/gpt_architecture.h)
  GptArchitecture arch;

  bool operator==(const ModelConfig&) const = default;
};

// One entry of `data.train` written as a list: a source of a weighted mixture (data/mixture.h).
struct DataSource {
  std::string path;   // its training shards: a file, directory or glob
  double weight = 1;  // > 0; the source draws weight / (Σ weights) of the training samples
  std::string val;    // its validation shards (its own val_loss); may be empty
  std::string name;   // unique among the sources; the config may leave it out (source_name_of)

  bool operator==(const DataSource&) const = default;
};

struct DataConfig {
  // `data.train` is either a string, one split (file, directory or glob of token shards), held
  // in `train`, or a list of sources, held in `mixture`; exactly one of the two is non-empty.
  std::string train;
  std::string val;        // file, directory or glob; may be empty (then only the sources' val)
  std::string tokenizer;  // SentencePiece model; may be empty
  std::vector<DataSource> mixture;

  // The training sources either way: the string form is one source of weight 1 (no val).
  std::vector<DataSource> train_sources() const;

  bool operator==(const DataConfig&) const = default;
};

// The name a source takes when the config gives none: the last component of its path that says
// something (not a glob, not `train`, without `.h5`), in letters, digits, '.', '_' and '-'
// (others become '_'); "" when no component qualifies. data/wiki/train -> wiki,
// corpora/code/train/*.h5 -> code, books.h5 -> books.
std::string source_name_of(const std::string& path);

// optimizer.adafactor (train/optimizer/adafactor.h; Shazeer & Stern 2018, in the form of
// torch.optim.Adafactor): factored second moments of every matrix, a full one of every vector.
struct AdafactorConfig {
  double beta1 = 0;             // first moment of the clipped update; 0 keeps none
  double decay_rate = -0.8;     // 1 − β2 at update t is t^decay_rate
  double eps1 = 1.1920929e-07;  // floor of the variance (squared) and of its row mean
  double eps2 = 1e-3;           // floor of RMS(θ) in the relative step
  double clip_threshold = 1.0;  // d: the update is divided by max(1, RMS(update) / d)
  // false: the step size is optimizer.lr and its schedule. true: the paper's relative step,
  // max(eps2, RMS(θ)) · min(lr, 1/√t), lr the scheduled one.
  bool relative_step = false;

  bool operator==(const AdafactorConfig&) const = default;
};

// optimizer.muon (train/optimizer/muon.h; Jordan et al. 2024): momentum orthogonalised by
// Newton-Schulz iterations for the blocks' matrices; AdamW (optimizer.lr, beta1, ...) for the rest.
struct MuonConfig {
  double lr = 0.02;  // the matrices' peak step size; its schedule is optimizer.lr's, scaled
  double momentum = 0.95;
  int ns_steps = 5;  // Newton-Schulz iterations
  bool nesterov = true;

  bool operator==(const MuonConfig&) const = default;
};

// optimizer.adamw8bit (train/optimizer/adamw8bit.h; Dettmers et al. 2022): AdamW whose moments
// are stored as one byte per element in blocks of block_size consecutive logical elements of a
// tensor, each block with its own scale (its largest magnitude).
struct AdamW8bitConfig {
  int block_size = 2048;

  bool operator==(const AdamW8bitConfig&) const = default;
};

struct OptimizerConfig {
  OptimizerName name = OptimizerName::adamw;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 100;
  LrSchedule schedule = LrSchedule::cosine;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  // Where AdamW's state lives between updates (train/optimizer/chunked_state.h): none (in place),
  // host (an arena of its own, updated in chunks), disk (a file in offload_dir, streamed through
  // three chunks of offload_chunk elements).
  OptimizerOffload offload = OptimizerOffload::none;
  std::string offload_dir;
  std::int64_t offload_chunk = 1 << 20;
  AdafactorConfig adafactor;
  AdamW8bitConfig adamw8bit;
  MuonConfig muon;

  bool operator==(const OptimizerConfig&) const = default;
};

struct TrainConfig {
  int steps = 2000;
  int global_batch = 64;  // sequences per optimizer step
  int micro_batch = 8;    // sequences per forward/backward on one rank
  int eval_every = 200;   // 0 disables periodic evaluation
  std::int64_t eval_tokens = 65536;
  // A multiple-choice file (HellaSwag's layout, data/multiple_choice.h) scored at every
  // evaluation with data.tokenizer; empty: none.
  std::string eval_multiple_choice;
  int log_every = 10;
  int stop_after = 0;  // stop (with a checkpoint) once this many steps are done; 0: run to `steps`
  // A step whose loss or gradients are non-finite (not an fp16 overflow, which the loss scale
  // handles) is never applied. skip: the run goes on, and stops once `nonfinite_limit` such steps
  // come in a row; stop: the first one stops the run. Either way the last checkpoint is intact.
  NonfinitePolicy nonfinite = NonfinitePolicy::skip;
  int nonfinite_limit = 3;

  bool operator==(const TrainConfig&) const = default;
};

struct CheckpointConfig {
  int every = 500;  // 0: only at the end and on a signal
  int keep = 3;     // newest checkpoints kept; 0 keeps all
  std::string dir;  // empty: <run.dir>/<run.name>/checkpoints

  bool operator==(const CheckpointConfig&) const = default;
};

struct PrecisionConfig {
  cpu::ComputeDtype compute = cpu::ComputeDtype::fp32;
  std::string loss_scale = "dynamic";  // dynamic | a positive number written as a string
  int loss_scale_window = 1000;        // clean fp16 steps before a dynamic scale doubles
  double initial_loss_scale = 65536;   // where a dynamic scale starts (2^16, as PyTorch's)
  Fp8Settings fp8{};  // precision.fp8, fp8_format, fp8_history, fp8_layers, fp8_min_size

  bool operator==(const PrecisionConfig&) const = default;
};

struct ZeroConfig {
  int stage = 0;  // 0..3
  bool quantized_weights = false;
  bool hierarchical_partition = false;
  bool quantized_gradients = false;
  // Stage 2 and 3: when a segment's gradients are reduce-scattered
  // (parallel/zero/sharded_parameters.h).
  GradientReduction gradient_reduction = GradientReduction::step;

  bool operator==(const ZeroConfig&) const = default;
};

struct ParallelConfig {
  int tp = 1;
  int pp = 1;
  int dp = 0;  // 0 means auto: world / (tp * pp)
  int gpus_per_node = 8;
  PipelineSchedule pipeline_schedule = PipelineSchedule::one_f_one_b;
  // Chunks of layers per pipeline rank (virtual pipeline stages): >= 2 for interleaved, 2 for
  // zbv, 1 for every other schedule.
  int virtual_stages = 1;
  bool sequence_parallel = false;
  std::vector<int> pp_layers;  // empty: balanced; one entry per virtual stage
  // Expert parallelism: model.moe's experts split over ep ranks of the data-parallel group.
  int ep = 1;
  // Context parallelism (model/core/context_chunks.h): every sequence split over cp ranks, each
  // holding 2 of its 2·cp chunks; attention's K/V travel among them by cp_comm.
  int cp = 1;
  ContextComm cp_comm = ContextComm::ring;
  // How a CUDA run's ranks exchange device arrays: nccl (GPU to GPU; one GPU per rank), host
  // (staged through host memory over MPI; ranks may share a GPU), auto (nccl where it can run).
  DeviceComm device_comm = DeviceComm::automatic;
  ZeroConfig zero;
  // parallel.auto: the planner chooses every layout key above (plan/auto_layout.h) for the
  // cluster described by `cluster` (a configs/clusters file; empty: this machine, measured at
  // start-up).
  bool auto_layout = false;
  std::string cluster;

  bool operator==(const ParallelConfig&) const = default;
};

struct DilocoConfig {
  bool enabled = false;
  int workers = 4;
  int inner_steps = 500;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  OuterSchedule outer_schedule = OuterSchedule::constant;
  OuterCompression compression = OuterCompression::none;
  bool error_feedback = false;  // compression's residual added to the next outer gradient
  int fragments = 1;            // streaming: fragments of ~1/F of the model synced in turn
  bool overlap = false;         // the outer reduction in flight during the next inner step
  Averaging averaging = Averaging::all_reduce;
  double drop_probability = 0.0;  // simulated failures: [0, 1)
  // Robust averaging (parallel/diloco/robust_aggregation.h): how the kept members' outer gradients
  // combine, and the screen that leaves out a non-finite one or one whose norm is more than
  // outlier_factor times the median (≤ 0: non-finite ones only).
  AggregationRule aggregation = AggregationRule::mean;
  int trim = 1;              // trimmed_mean: values dropped at each end of every coordinate
  double clip_radius = 1.0;  // centered_clip: τ over the members' median distance from the median
  int clip_iterations = 20;  // centered_clip
  double outlier_factor = 10;
  // Elastic DiLoCo (parallel/elastic/): this job is one worker of an open group of at most
  // `workers` slots that meet in a rendezvous store, "file:///dir" or "redis://host:port"; empty:
  // the workers are blocks of this job's ranks.
  std::string join;
  std::string group = "strata";  // the group's name in the store
  int slot = -1;                 // the slot to hold; -1: the first free one
  int min_workers = 1;           // a fresh group starts training when this many hold slots
  double timeout = 60;           // seconds of silence (or of an unreachable store) that drop
  std::string interface;         // Gloo's TCP interface ("eth0"); empty: the host name's address
  // A file holding the group's shared secret (parallel/elastic/record_signing.h): records signed,
  // members challenged; empty: an unauthenticated group.
  std::string secret_file;
  // same: every worker has this layout, and rank r averages its share with rank r of the others;
  // any: each worker its own layout (parallel keys), rank 0 averages the logical model.
  WorkerLayouts layouts = WorkerLayouts::same;

  bool elastic() const { return enabled && !join.empty(); }

  bool operator==(const DilocoConfig&) const = default;
};

// SWARM parallelism (train/swarm/, docs/ARCHITECTURE.md §2 "SWARM"): this job is one peer serving
// one stage of a pipeline whose stages are pools of peers that meet in a rendezvous store.
struct SwarmConfig {
  std::string join;             // the store, "file:///dir" or "redis://host:port"; empty: off
  std::string group = "swarm";  // the swarm's name in the store
  int stage = -1;               // the stage this peer serves; -1 (auto): the least throughput
  std::vector<int> stages;      // layers per stage, summing to model.n_layer (at least 2)
  int target_batch = 0;         // samples per optimizer step of a stage; 0: train.global_batch
  SwarmRouting routing = SwarmRouting::balanced;
  SwarmCompression compression = SwarmCompression::none;  // the boundaries' activations, gradients
  double timeout = 60;                                    // seconds of silence that drop a peer
  double request_timeout = 30;  // seconds a request may take before it goes to another peer
  std::string host;             // the address other peers reach this one by; empty: 127.0.0.1
  int stage_peers = 8;          // the most peers one stage holds (its averaging group's slots)
  std::string interface;        // Gloo's interface for a stage's averaging; empty: the host name
  double rebalance_every = 60;  // seconds between a server's looks for a better stage; 0: never
  int in_flight = 1;            // micro-batches a driver has in flight at once
  std::string secret_file;      // the swarm's shared secret (as diloco.secret_file); empty: none

  bool enabled() const { return !join.empty(); }
  bool operator==(const SwarmConfig&) const = default;
};

struct Config {
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainConfig train;
  CheckpointConfig checkpoint;
  PrecisionConfig precision;
  ParallelConfig parallel;
  Recompute recompute = Recompute::none;
  Device device = Device::automatic;
  // OpenMP (and GEMM) threads per rank; 0 means auto: OMP_NUM_THREADS if set, else this host's
  // cores shared by its ranks (model/kernels/cpu/thread_budget.h).
  int threads = 0;
  DilocoConfig diloco;
  SwarmConfig swarm;

  // <run.dir>/<run.name>
  std::string run_directory() const;
  // checkpoint.dir, or <run_directory()>/checkpoints
  std::string checkpoint_directory() const;

  bool operator==(const Config&) const = default;
};

// Parses YAML text (`source_name` names it in messages), applies overrides of the form
// "key.path=value" (value parsed as YAML), validates, and returns the typed config.
// The model's shape (what its layout and every size follow) from the `model` keys.
inline GptShape gpt_shape_of(const ModelConfig& m) {
  return GptShape{m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size, m.moe, m.arch};
}
// The inverse: the `model` keys of a shape (a converted or synthesised checkpoint's config).
inline ModelConfig model_config_of(const GptShape& s) {
  return ModelConfig{s.n_layer, s.n_head, s.d_model, s.seq_len, s.vocab_size, s.moe, s.arch};
}

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});
// Reads the file, then parse_config. A missing or unreadable file is an Error naming it.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Several files merged in order before the overrides: a later file wins key by key (nested maps
// merged, lists replaced whole), so `train base.yaml plan.yaml` applies a plan's fragment.
Config load_configs(const std::vector<std::string>& paths,
                    const std::vector<std::string>& overrides = {});
// Where each key's value came from, by key path: the last file that gives it, or "--set 'k=v'";
// a key missing from the map holds its default (`train --print-config`).
using ConfigSources = std::map<std::string, std::string>;
struct LoadedConfig {
  Config config;
  ConfigSources sources;
};
// load_configs, also saying where each value came from.
LoadedConfig load_configs_with_sources(const std::vector<std::string>& paths,
                                       const std::vector<std::string>& overrides = {});
// Lines a user should see although the config is legal: values that are surely not meant
// (optimizer.warmup_steps ≥ train.steps never reaches optimizer.lr). Each without "warning: ".
std::vector<std::string> config_warnings(const Config& config);
// The layout of this config on a world of `world_size` ranks: the checks that need the world size
// (resolve_mesh_shape: tp*pp divides the world, an explicit dp matches it, tensor-parallel groups
// stay inside a node) and global_batch divisible by micro_batch*dp. Together with the checks of
// load_config against the model (n_head, padded vocabulary, seq_len under sequence parallelism,
// n_layer and pp_layers) this rejects every layout that cannot run, with a strata::Error.
// Under DiLoCo the mesh is one worker's: world_size / diloco.workers ranks (which must divide).
MeshShape resolve_mesh(const Config& config, int world_size);
// resolve_mesh(config, world_size).dp.
int resolve_data_parallel(const Config& config, int world_size);
// The effective config as YAML (every key, resolved defaults); parse_config(to_yaml(c)) == c.
// With `sources`, each value is followed by a comment naming its source ("default" when absent).
std::string config_to_yaml(const Config& config, const ConfigSources* sources = nullptr);

// A key whose value differs between two configs, each value as the effective config writes it.
struct ConfigChange {
  std::string key, before, after;
  bool operator==(const ConfigChange&) const = default;
};
// Every key on which `after` differs from `before`, in key order (plan/config_diff.cpp).
std::vector<ConfigChange> config_changes(const Config& before, const Config& after);

}  // namespace strata
