// The config contract of docs/ARCHITECTURE.md §3: the document's own example parses, defaults fill
// missing keys, every kind of mistake stops with a message naming the key and the reason, --set
// overrides any key, the world-size checks, and the effective config written to a run reproduces it
// exactly.
#include "plan/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "tests/support/test_paths.h"

namespace strata {
namespace {

// The smallest valid config: only data.train has no default.
const char* const kMinimal = "data: {train: shards/train}\n";

// The example of docs/ARCHITECTURE.md §3, read from the document itself so that the two cannot
// drift: the first ```yaml block of the "### An example" subsection. Read once per process.
const std::string& design_example() {
  static const std::string example = [] {
    const std::string path = testing::source_dir() + "/docs/ARCHITECTURE.md";
    std::ifstream in(path);
    if (!in) fail("cannot read ", path);
    const std::string markdown{std::istreambuf_iterator<char>(in), {}};
    const auto heading = markdown.find("\n### An example\n");
    if (heading == std::string::npos) fail(path, ": no '### An example' heading");
    const std::string open = "\n```yaml\n";
    const auto fence = markdown.find(open, heading + 1);
    const auto next_heading = markdown.find("\n#", heading + 1);
    if (fence == std::string::npos || fence > next_heading)
      fail(path, ": no ```yaml block under '### An example'");
    const auto begin = fence + open.size();
    const auto close = markdown.find("\n```", begin - 1);
    if (close == std::string::npos)
      fail(path, ": the ```yaml block under '### An example' is open");
    return markdown.substr(begin, close + 1 - begin);
  }();
  return example;
}

// The message of the Error that parsing throws; fails the test when nothing is thrown.
std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "config.yaml", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << yaml;
  return "";
}

std::string error_of_set(const std::string& override_text) {
  return error_of(kMinimal, {override_text});
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

TEST(Config, MissingKeysKeepTheDefaults) {
  const Config config = parse_config(kMinimal, "config.yaml");
  Config expected;
  expected.data.train = "shards/train";
  EXPECT_EQ(config, expected);
  EXPECT_EQ(config.run_directory(), "runs/demo");
  EXPECT_EQ(config.checkpoint_directory(), "runs/demo/checkpoints");
  EXPECT_EQ(config.parallel.dp, 0);
  EXPECT_TRUE(config.parallel.pp_layers.empty());
  EXPECT_EQ(config.threads, 0);  // auto
}

// `train base.yaml plan.yaml`: a plan's fragment (a nested `parallel:` map) once could not be
// combined with its config (duplicate key `parallel` when pasted in).
TEST(Config, FilesMergeInOrderMapsKeyByKeyListsWhole) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata_config_merge_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string base = dir / "base.yaml", plan = dir / "plan.yaml", bad = dir / "bad.yaml";
  std::ofstream(base) << design_example() << "\n";
  std::ofstream(plan) << "parallel: {tp: 2, pp: 2, pp_layers: [1, 3]}\n"
                      << "train: {micro_batch: 4}\n";
  std::ofstream(bad) << "parallel: {tp: 2, tpp: 3}\n";
  std::ofstream(dir / "list.yaml") << "parallel: {pp_layers: [2, 2]}\n";

  const Config merged = load_configs({base, plan}, {"train.steps=10"});
  EXPECT_EQ(merged.parallel.tp, 2);
  EXPECT_EQ(merged.parallel.pp, 2);
  EXPECT_EQ(merged.parallel.gpus_per_node, 8);  // the base's, beside the fragment's keys
  EXPECT_EQ(merged.parallel.pipeline_schedule, PipelineSchedule::one_f_one_b);  // likewise
  EXPECT_EQ(merged.train.micro_batch, 4);
  EXPECT_EQ(merged.train.global_batch, 64);
  EXPECT_EQ(merged.train.steps, 10);  // the overrides come last
  EXPECT_EQ(load_configs({base, plan, dir / "list.yaml"}).parallel.pp_layers,
            (std::vector<int>{2, 2}));
  EXPECT_EQ(load_configs({base}), load_config(base));
  try {
    load_configs({base, bad});
    ADD_FAILURE() << "an unknown key in the second file was accepted";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), base + " + " + bad);
    EXPECT_CONTAINS(e.what(), "parallel.tpp");
  }
  std::filesystem::remove_all(dir);
}

// What a resumed run reports it changed (plan/config_diff.cpp): every key, as the effective
// config writes it.
TEST(Config, ChangesNameEachDifferingKeyWithBothValues) {
  const Config before = parse_config(kMinimal, "a");
  EXPECT_TRUE(config_changes(before, before).empty());
  const Config after = parse_config(
      kMinimal, "b", {"train.steps=400", "optimizer.lr=2.0e-3", "parallel.dp=2", "recompute=full"});
  const std::vector<ConfigChange> expected{
      {"optimizer.lr", "0.001", "0.002"},
      {"parallel.dp", "auto", "2"},
      {"recompute", "none", "full"},
      {"train.steps", std::to_string(before.train.steps), "400"}};
  EXPECT_EQ(config_changes(before, after), expected);
}

TEST(Config, EmptySectionsKeepTheDefaults) {
  const Config config = parse_config("data: {train: t}\ncheckpoint:\nparallel: {zero: }\n", "c");
  EXPECT_EQ(config.checkpoint.every, 500);
  EXPECT_EQ(config.parallel.zero.stage, 0);
}

TEST(Config, DesignExampleParses) {
  const Config c = parse_config(design_example(), "docs/ARCHITECTURE.md");
  EXPECT_EQ(c.run.name, "demo");
  EXPECT_EQ(c.run.seed, 1234u);
  EXPECT_EQ(c.model.vocab_size, 4096);
  EXPECT_EQ(c.data.val, "data/fortunes/val");
  EXPECT_EQ(c.data.tokenizer, "data/fortunes/tokenizer.model");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-8);
  EXPECT_EQ(c.optimizer.schedule, LrSchedule::cosine);
  EXPECT_EQ(c.train.eval_tokens, 65536);
  EXPECT_EQ(c.precision.loss_scale, "dynamic");
  EXPECT_EQ(c.parallel.dp, 0);
  EXPECT_EQ(c.parallel.pipeline_schedule, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(c.recompute, Recompute::none);
  EXPECT_EQ(c.device, Device::automatic);
  EXPECT_TRUE(c.diloco.nesterov);
  EXPECT_DOUBLE_EQ(c.diloco.outer_lr, 0.7);
}

TEST(Config, EveryKeyIsRead) {
  const Config c = parse_config(R"(
run: {name: r1, dir: out, seed: 18446744073709551615}
model: {n_layer: 6, n_head: 8, d_model: 512, seq_len: 256, vocab_size: 50257}
data: {train: a, val: b, tokenizer: c}
optimizer: {lr: 6e-4, min_lr: 0, warmup_steps: 0, schedule: linear, weight_decay: 0,
            beta1: 0, beta2: 0.999, eps: 1e-6, grad_clip: 0}
train: {steps: 1, global_batch: 48, micro_batch: 4, eval_every: 0, eval_tokens: 0, log_every: 1}
checkpoint: {every: 0, keep: 0, dir: /ckpt}
precision: {compute: bf16, loss_scale: 65536, loss_scale_window: 2, initial_loss_scale: 128}
parallel:
  tp: 2
  pp: 3
  dp: 4
  gpus_per_node: 4
  pipeline_schedule: gpipe
  sequence_parallel: true
  pp_layers: [1, 3, 2]
  zero: {stage: 3, quantized_weights: true, hierarchical_partition: true, quantized_gradients: true}
recompute: selective
device: cuda
threads: 3
diloco: {enabled: true, workers: 2, inner_steps: 10, outer_lr: 1, outer_momentum: 0,
         nesterov: false, compression: int8}
)",
                                "c.yaml");
  EXPECT_EQ(c.run.seed, 18446744073709551615u);
  EXPECT_EQ(c.checkpoint_directory(), "/ckpt");
  EXPECT_EQ(c.precision.loss_scale, "65536");
  EXPECT_EQ(c.precision.initial_loss_scale, 128);
  EXPECT_EQ(c.parallel.dp, 4);
  EXPECT_EQ(c.parallel.pp_layers, (std::vector<int>{1, 3, 2}));
  EXPECT_EQ(c.parallel.zero.stage, 3);
  EXPECT_TRUE(c.parallel.zero.hierarchical_partition);
  EXPECT_EQ(c.recompute, Recompute::selective);
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.diloco.compression, OuterCompression::int8);
  EXPECT_FALSE(c.diloco.nesterov);
}

// Found by fuzzing: bytes that are not UTF-8, or NUL bytes, reached strings that the effective
// config could not write back as they were.
TEST(ConfigErrors, TextThatIsNotUtf8IsRefusedWithItsLine) {
  EXPECT_EQ(error_of("run: {name: x}\ndata: {tokenizer: \"a\xC3(b\"}\n"),
            "config.yaml:2: not valid UTF-8 (byte 0xC3 at offset 35)");
  EXPECT_EQ(error_of_set("data.tokenizer=\xFF"),
            "a --set override:1: not valid UTF-8 (byte 0xFF at offset 15)");
  // A NUL byte: yaml-cpp took a value opening with \x01\0\0\0 for UTF-32 and read code points
  // that are no Unicode, which the effective config could not write back.
  EXPECT_EQ(error_of_set(std::string("data.train=\x01\0\0\0th", 17)),
            "a --set override:1: a NUL byte at offset 12 (YAML is text without them)");
}

// Found by fuzzing: a layout's 64-bit offsets overflowed for a model of 2^60 parameters.
TEST(ConfigErrors, AModelTooLargeToIndexIsRefused) {
  EXPECT_NE(error_of(kMinimal, {"model.n_layer=2000", "model.d_model=1048576"})
                .find("is too large to index"),
            std::string::npos);
  EXPECT_NE(error_of_set("model.seq_len=100000000").find("is too large to index"),
            std::string::npos);
}

TEST(ConfigErrors, UnknownKeySuggestsTheClosestKey) {
  EXPECT_EQ(error_of("data: {train: t}\noptimizer: {lrr: 1}"),
            "config.yaml: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\ntrain: {stpes: 3}"),
                  "unknown key 'train.stpes' (did you mean 'train.steps'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {zero: {stag: 1}}"),
                  "unknown key 'parallel.zero.stag' (did you mean 'parallel.zero.stage'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {zeroo: {stage: 1}}"),
                  "(did you mean 'parallel.zero'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\noptimizer: {warmup: 10}"),
                  "unknown key 'optimizer.warmup' (did you mean 'optimizer.warmup_steps'?)");
  // The right key in the wrong section.
  EXPECT_CONTAINS(error_of("data: {train: t}\ntrain: {lr: 1}"),
                  "unknown key 'train.lr' (did you mean 'optimizer.lr'?)");
}

TEST(ConfigErrors, UnknownSectionSuggestsTheClosestSection) {
  EXPECT_EQ(error_of("data: {train: t}\noptimiser: {lr: 1}"),
            "config.yaml: unknown key 'optimiser' (did you mean 'optimizer'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nrecomput: full"), "(did you mean 'recompute'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nthread: 2"), "(did you mean 'threads'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nlr: 1"),
                  "unknown key 'lr' (did you mean 'optimizer.lr'?)");
}

TEST(ConfigErrors, FarOffUnknownKeyHasNoSuggestion) {
  EXPECT_EQ(error_of("data: {train: t}\nmodel: {flash_attention: true}"),
            "config.yaml: unknown key 'model.flash_attention'");
}

TEST(ConfigErrors, DuplicateKey) {
  EXPECT_CONTAINS(error_of("data: {train: t}\ntrain: {steps: 1, steps: 2}"),
                  "duplicate key 'train.steps'");
}

// A key given twice in one file is refused naming the file and line, whether the file is read
// alone or merged with others (the merge once kept the last value silently: 7 steps, rc 0).
TEST(ConfigErrors, DuplicateKeyInAFileNamesItsLine) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("strata_config_duplicate_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string twice = dir / "twice.yaml", other = dir / "other.yaml";
  std::ofstream(twice) << "data: {train: t}\ntrain:\n  steps: 5\n  steps: 7\n";
  std::ofstream(other) << "run: {name: x}\n";
  const auto error_of_files = [](const std::vector<std::string>& paths) -> std::string {
    try {
      load_configs(paths);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of_files({twice}), twice + ", line 4: duplicate key 'train.steps'");
  EXPECT_EQ(error_of_files({other, twice}), twice + ", line 4: duplicate key 'train.steps'");
  std::ofstream(twice) << "data: {train: t}\ndata: {val: v}\n";
  EXPECT_EQ(error_of_files({other, twice}), twice + ", line 2: duplicate key 'data'");
  std::filesystem::remove_all(dir);
}

TEST(ConfigErrors, WrongTypes) {
  EXPECT_EQ(error_of("data: {train: t}\ntrain: {steps: abc}"),
            "config.yaml: 'train.steps' must be an integer, got 'abc'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ntrain: {steps: 1.5}"),
                  "'train.steps' must be an integer, got '1.5'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ntrain: {steps: {a: 1}}"),
                  "'train.steps' must be an integer, got a map");
  EXPECT_CONTAINS(error_of("data: {train: t}\ntrain: {steps: }"),
                  "'train.steps' must be an integer, got nothing");
  EXPECT_CONTAINS(error_of("data: {train: t}\nmodel: {vocab_size: 2147483648}"),
                  "'model.vocab_size' must be an integer in [-2147483648, 2147483647]");
  EXPECT_CONTAINS(error_of("data: {train: t}\nrun: {seed: -1}"), "'run.seed' must be an integer");
  EXPECT_CONTAINS(error_of("data: {train: t}\noptimizer: {lr: fast}"),
                  "'optimizer.lr' must be a number, got 'fast'");
  EXPECT_CONTAINS(error_of("data: {train: t}\noptimizer: {lr: .nan}"),
                  "'optimizer.lr' must be a number");
  EXPECT_CONTAINS(error_of("data: {train: t}\ndiloco: {enabled: yes}"),
                  "'diloco.enabled' must be true or false, got 'yes'");
  EXPECT_CONTAINS(error_of("data: {train: {path: a}}"),
                  "'data.train' must be a string (a file, directory or glob of token shards) or "
                  "a list of sources {path, weight, val, name}, got a map");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {pp_layers: 4}"),
                  "'parallel.pp_layers' must be a list of integers, got '4'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {pp: 2, pp_layers: [2, x]}"),
                  "'parallel.pp_layers[1]' must be an integer, got 'x'");
  EXPECT_CONTAINS(error_of("data: {train: t}\noptimizer: 3"),
                  "'optimizer' must be a map of keys, got '3'");
  EXPECT_CONTAINS(error_of("- a\n- b"), "expected a map of sections at the top level");
}

TEST(ConfigErrors, SpecialScalars) {
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {dp: 0}"),
                  "'parallel.dp' must be 'auto' or a positive integer, got '0'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {dp: many}"),
                  "'parallel.dp' must be 'auto' or a positive integer, got 'many'");
  EXPECT_EQ(error_of("data: {train: t}\nthreads: 0"),
            "config.yaml: 'threads' must be 'auto' or a positive integer, got '0'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nthreads: all"),
                  "'threads' must be 'auto' or a positive integer, got 'all'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nthreads: 1.5"),
                  "'threads' must be 'auto' or a positive integer, got '1.5'");
  EXPECT_EQ(error_of_set("threads=-2"),
            "config.yaml: 'threads' must be 'auto' or a positive integer, got '-2' "
            "(from --set 'threads=-2')");
  EXPECT_EQ(parse_config("data: {train: t}\nthreads: auto", "c").threads, 0);
  EXPECT_EQ(parse_config(kMinimal, "c", {"threads=12"}).threads, 12);
  EXPECT_CONTAINS(error_of("data: {train: t}\nprecision: {loss_scale: -8}"),
                  "'precision.loss_scale' must be 'dynamic' or a positive number, got '-8'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nprecision: {loss_scale: static}"),
                  "'precision.loss_scale' must be 'dynamic' or a positive number");
}

TEST(ConfigErrors, EnumsListTheChoices) {
  EXPECT_EQ(error_of("data: {train: t}\noptimizer: {schedule: cosin}"),
            "config.yaml: 'optimizer.schedule' must be cosine, linear or constant, got 'cosin' "
            "(did you mean 'cosine'?)");
  EXPECT_CONTAINS(
      error_of("data: {train: t}\nprecision: {compute: BF16}"),
      "'precision.compute' must be fp32, bf16 or fp16, got 'BF16' (did you mean 'bf16'?)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {pipeline_schedule: zb}"),
                  "'parallel.pipeline_schedule' must be 1f1b, gpipe, zb-h1, zb-h2, interleaved or "
                  "zbv, got 'zb'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nrecompute: all"),
                  "'recompute' must be none, selective or full, got 'all'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ndevice: gpu"),
                  "'device' must be cpu, cuda or auto, got 'gpu'");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {device_comm: mpi}"),
                  "'parallel.device_comm' must be auto, nccl or host, got 'mpi'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ndiloco: {compression: int2}"),
                  "'diloco.compression' must be none, fp16, bf16, int8 or int4, got 'int2'");
  EXPECT_CONTAINS(
      error_of("data: {train: t}\ndiloco: {averaging: ring}"),
      "'diloco.averaging' must be all_reduce, butterfly, gossip or moshpit, got 'ring'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ndiloco: {outer_schedule: cosine}"),
                  "'diloco.outer_schedule' must be constant or inner, got 'cosine'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ndiloco: {aggregation: median}"),
                  "'diloco.aggregation' must be mean, trimmed_mean or centered_clip, got 'median'");
  EXPECT_CONTAINS(
      error_of("data: {train: t}\ndiloco: {aggregation: centered_clip, averaging: gossip}"),
      "'diloco.aggregation' centered_clip needs diloco.averaging all_reduce");
}

TEST(ConfigErrors, OutOfRangeNamesTheKey) {
  struct Case {
    const char* set;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"train.steps=0", "'train.steps' must be >= 1, got 0"},
      {"diloco.drop_probability=1", "'diloco.drop_probability' must be in [0, 1), got 1"},
      {"diloco.fragments=0", "'diloco.fragments' must be >= 1, got 0"},
      {"diloco.fragments=64", "'diloco.fragments' (64) must not exceed model.n_layer"},
      {"diloco.fragments=3", "'diloco.fragments' (3) must divide diloco.inner_steps (500)"},
      {"diloco.trim=0", "'diloco.trim' must be >= 1, got 0"},
      {"diloco.clip_radius=0", "'diloco.clip_radius' must be > 0, got 0"},
      {"diloco.clip_iterations=0", "'diloco.clip_iterations' must be >= 1, got 0"},
      {"model.n_layer=0", "'model.n_layer' must be >= 1"},
      {"model.n_head=0", "'model.n_head' must be >= 1"},
      {"model.d_model=-4", "'model.d_model' must be >= 1"},
      {"model.seq_len=0", "'model.seq_len' must be >= 1"},
      {"model.vocab_size=1", "'model.vocab_size' must be >= 2, got 1"},
      {"model.d_model=130", "'model.d_model' (130) must be divisible by model.n_head (4)"},
      {"optimizer.lr=0", "'optimizer.lr' must be > 0, got 0"},
      {"optimizer.min_lr=0.01",
       "'optimizer.min_lr' must be in [0, optimizer.lr = 0.001], got 0.01"},
      {"optimizer.min_lr=-1", "'optimizer.min_lr' must be in [0"},
      {"optimizer.warmup_steps=-1", "'optimizer.warmup_steps' must be >= 0"},
      {"optimizer.weight_decay=-0.1", "'optimizer.weight_decay' must be >= 0"},
      {"optimizer.beta1=1", "'optimizer.beta1' must be in [0, 1), got 1"},
      {"optimizer.beta2=-0.5", "'optimizer.beta2' must be in [0, 1)"},
      {"optimizer.eps=0", "'optimizer.eps' must be > 0"},
      {"optimizer.grad_clip=-1", "'optimizer.grad_clip' must be >= 0"},
      {"train.global_batch=0", "'train.global_batch' must be >= 1"},
      {"train.micro_batch=0", "'train.micro_batch' must be >= 1"},
      {"train.micro_batch=7",
       "'train.global_batch' (64) must be divisible by train.micro_batch (7)"},
      {"train.eval_every=-1", "'train.eval_every' must be >= 0"},
      {"train.eval_tokens=-1", "'train.eval_tokens' must be >= 0"},
      {"train.log_every=0", "'train.log_every' must be >= 1"},
      {"checkpoint.every=-1", "'checkpoint.every' must be >= 0"},
      {"checkpoint.keep=-1", "'checkpoint.keep' must be >= 0"},
      {"precision.loss_scale_window=0", "'precision.loss_scale_window' must be >= 1"},
      {"precision.initial_loss_scale=0.5", "'precision.initial_loss_scale' must be in [1, "},
      {"precision.initial_loss_scale=1e10", "'precision.initial_loss_scale' must be in [1, "},
      {"parallel.tp=0", "'parallel.tp' must be >= 1"},
      {"parallel.pp=0", "'parallel.pp' must be >= 1"},
      {"parallel.gpus_per_node=0", "'parallel.gpus_per_node' must be >= 1"},
      {"parallel.zero.stage=4", "'parallel.zero.stage' must be 0, 1, 2 or 3, got 4"},
      {"parallel.zero.quantized_weights=true",
       "'parallel.zero.quantized_weights' is a ZeRO++ switch and needs parallel.zero.stage 3"},
      {"parallel.zero.hierarchical_partition=true",
       "'parallel.zero.hierarchical_partition' is a ZeRO++ switch and needs parallel.zero.stage 3"},
      {"parallel.zero.quantized_gradients=true",
       "'parallel.zero.quantized_gradients' is a ZeRO++ switch and needs parallel.zero.stage 3"},
      {"parallel.tp=3", "'parallel.tp' (3) must divide model.n_head (4)"},
      {"parallel.pp=5", "'parallel.pp' (5) must be <= model.n_layer (4)"},
      {"parallel.pp_layers=[2,2]", "'parallel.pp_layers' must have one entry per pipeline stage"},
      {"run.name=", "'run.name' must not be empty"},
      {"run.name=a/b", "'run.name' must be a plain directory name without '/', got 'a/b'"},
      {"data.train=", "'data.train' must name the training token shards"},
      {"diloco.workers=0", "'diloco.workers' must be >= 1"},
      {"diloco.inner_steps=0", "'diloco.inner_steps' must be >= 1"},
      {"diloco.outer_lr=0", "'diloco.outer_lr' must be > 0"},
      {"diloco.outer_momentum=1", "'diloco.outer_momentum' must be in [0, 1)"},
  };
  for (const auto& c : cases) {
    const std::string set = c.set;
    const std::string message = error_of_set(set);
    EXPECT_CONTAINS(message, "config.yaml: " + std::string(c.message));
    // A rule blames one key; when that is the key the --set wrote, the message says so.
    const std::string key = set.substr(0, set.find('='));
    if (std::string(c.message).starts_with("'" + key + "'")) {
      EXPECT_CONTAINS(message, "(from --set '" + set + "')");
    }
  }
}

TEST(ConfigErrors, ElasticDilocoKeysNameTheKey) {
  const std::string elastic = "data: {train: t}\ndiloco: {enabled: true, workers: 3, join: ";
  EXPECT_CONTAINS(error_of(elastic + "'ftp://x'}"),
                  "'diloco.join' must be file:///absolute/dir or redis://host:port, got 'ftp://x'");
  EXPECT_CONTAINS(error_of(elastic + "'file:///s', slot: 3}"),
                  "'diloco.slot' must be -1 (the first free slot) or a slot below diloco.workers");
  EXPECT_CONTAINS(error_of(elastic + "'file:///s', min_workers: 4}"),
                  "'diloco.min_workers' must be between 1 and diloco.workers (3), got 4");
  EXPECT_CONTAINS(error_of(elastic + "'redis://h:1', group: 'a/b'}"),
                  "'diloco.group' must be a name without spaces or '/'");
  EXPECT_CONTAINS(error_of(elastic + "'redis://h:1', timeout: 0}"), "'diloco.timeout' must be > 0");
  EXPECT_CONTAINS(error_of(elastic + "'redis://h:1', drop_probability: 0.1}"),
                  "'diloco.drop_probability' simulates failures of a job's own workers");
  EXPECT_NO_THROW(parse_config(elastic + "'redis://h:1', slot: 2, min_workers: 3}", "ok.yaml"));
  EXPECT_NO_THROW(parse_config(elastic + "'redis://h:1', overlap: true}", "overlap.yaml"));
  // Workers of any layout: an elastic group's, without expert parallelism.
  const Config any = parse_config(elastic + "'redis://h:1', layouts: any}", "any.yaml");
  EXPECT_EQ(any.diloco.layouts, WorkerLayouts::any);
  EXPECT_EQ(parse_config(config_to_yaml(any), "written"), any);
  EXPECT_CONTAINS(error_of(elastic + "'redis://h:1', layouts: mixed}"),
                  "'diloco.layouts' must be same or any, got 'mixed'");
  EXPECT_CONTAINS(error_of("data: {train: t}\ndiloco: {enabled: true, layouts: any}"),
                  "'diloco.layouts' any is for elastic groups (diloco.join)");
  EXPECT_CONTAINS(
      error_of("data: {train: t}\nmodel: {moe: {experts: 4}}\nparallel: {dp: 2, ep: 2}\n"
               "diloco: {enabled: true, join: 'redis://h:1', layouts: any}"),
      "'diloco.layouts' any does not take parallel.ep > 1 (2)");
}

TEST(ConfigErrors, OptimizerKeysNameTheKey) {
  const std::string data = "data: {train: t}\n";
  EXPECT_CONTAINS(error_of(data + "optimizer: {name: lion}"),
                  "'optimizer.name' must be adamw, adafactor, adamw8bit or muon, got 'lion'");
  EXPECT_CONTAINS(error_of(data + "optimizer: {adamw8bit: {block_size: 0}}"),
                  "'optimizer.adamw8bit.block_size' must be in [1, 16777216], got 0");
  for (const char* name : {"adafactor", "adamw8bit", "muon"})  // every optimizer offloads
    EXPECT_NO_THROW(parse_config(data + "optimizer: {offload: host, name: " + name + "}", "ok"));
  EXPECT_CONTAINS(error_of(data + "optimizer: {offload: disk}"),
                  "'optimizer.offload_dir' must name a directory for optimizer.offload disk");
  EXPECT_CONTAINS(error_of(data + "optimizer: {offload: nvme}"),
                  "'optimizer.offload' must be none, host or disk, got 'nvme'");
  // On CUDA: AdamW on the device or any optimizer offloaded to the host; the others need offload.
  EXPECT_NO_THROW(parse_config(data + "device: cuda\noptimizer: {offload: host}", "ok"));
  EXPECT_NO_THROW(
      parse_config(data + "device: cuda\noptimizer: {offload: host, name: muon}", "ok"));
  EXPECT_CONTAINS(error_of(data + "device: cuda\noptimizer: {name: adafactor}"),
                  "'optimizer.name' adafactor has no CUDA kernel: on device cuda it needs "
                  "optimizer.offload host or disk");
  EXPECT_CONTAINS(error_of(data + "optimizer: {offload_chunk: 10}"),
                  "'optimizer.offload_chunk' must be in [1024, 1073741824], got 10");
  EXPECT_CONTAINS(error_of(data + "optimizer: {muon: {ns_steps: 0}}"),
                  "'optimizer.muon.ns_steps' must be >= 1, got 0");
  EXPECT_CONTAINS(error_of(data + "optimizer: {muon: {momentum: 1.5}}"),
                  "'optimizer.muon.momentum' must be in [0, 1), got 1.5");
  EXPECT_CONTAINS(error_of(data + "optimizer: {muon: {lr: 0}}"), "'optimizer.muon.lr' must be > 0");
  EXPECT_CONTAINS(error_of(data + "optimizer: {adafactor: {beta1: 1}}"),
                  "'optimizer.adafactor.beta1' must be in [0, 1), got 1");
  EXPECT_CONTAINS(error_of(data + "optimizer: {adafactor: {decay_rate: 0.5}}"),
                  "'optimizer.adafactor.decay_rate' must be in [-1, 0), got 0.5");
  EXPECT_CONTAINS(error_of(data + "optimizer: {adafactor: {eps1: 0}}"),
                  "'optimizer.adafactor.eps1' must be > 0");
  EXPECT_CONTAINS(error_of(data + "optimizer: {adafactor: {clip_threshold: -1}}"),
                  "'optimizer.adafactor.clip_threshold' must be > 0");
  EXPECT_CONTAINS(error_of(data + "optimizer: {adafactor: {relative: true}}"),
                  "optimizer.adafactor.relative");
  const Config c = parse_config(
      data + "optimizer: {name: adafactor, adafactor: {beta1: 0.9, relative_step: true}}", "ok");
  EXPECT_EQ(c.optimizer.name, OptimizerName::adafactor);
  EXPECT_EQ(c.optimizer.adafactor.beta1, 0.9);
  EXPECT_TRUE(c.optimizer.adafactor.relative_step);
  EXPECT_EQ(c.optimizer.adafactor.decay_rate, -0.8);  // the default
}

TEST(ConfigErrors, NcclOnTheCpuIsAnError) {
  EXPECT_CONTAINS(error_of("data: {train: t}\ndevice: cpu\nparallel: {device_comm: nccl}"),
                  "'parallel.device_comm' nccl needs device cuda or auto, not cpu");
  EXPECT_NO_THROW(
      parse_config("data: {train: t}\ndevice: cpu\nparallel: {device_comm: host}", "c.yaml"));
}

TEST(ConfigErrors, LayoutsThatDoNotDivideTheModel) {
  EXPECT_CONTAINS(error_of("data: {train: t}\nmodel: {seq_len: 100, n_head: 8}\n"
                           "parallel: {tp: 8, sequence_parallel: true}"),
                  "'parallel.sequence_parallel' needs model.seq_len (100) divisible by "
                  "parallel.tp (8)");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {pp: 2, pp_layers: [1, 2]}"),
                  "'parallel.pp_layers' must sum to model.n_layer (4), got 3");
  EXPECT_CONTAINS(error_of("data: {train: t}\nparallel: {pp: 2, pp_layers: [4, 0]}"),
                  "'parallel.pp_layers' entries must be >= 1, got 0 at index 1");
}

TEST(ConfigErrors, MixtureOfExpertsKeys) {
  const std::string base = "data: {train: t}\ntrain: {micro_batch: 4}\n";
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 4, top_k: 5}}"),
                  "'model.moe.top_k' (5) must be <= model.moe.experts (4)");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 4, group_sequences: 3}}"),
                  "'model.moe.group_sequences' (3) must divide train.micro_batch (4)");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 4, every: 5}}"),
                  "'model.moe.every' (5) must be <= model.n_layer (4)");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 4, capacity_factor: -1}}"),
                  "'model.moe.capacity_factor' must be >= 0 (0: dropless), got -1");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: -1}}"),
                  "'model.moe.experts' must be >= 0, got -1");
  // Expert parallelism: of a mixture of experts, dividing its experts, what it composes with.
  EXPECT_CONTAINS(error_of(base + "parallel: {ep: 2}"),
                  "'parallel.ep' (2) splits a mixture of experts over ranks: set "
                  "model.moe.experts or use ep 1");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 6}}\nparallel: {ep: 4}"),
                  "'parallel.ep' (4) must divide model.moe.experts (6)");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 4}}\nparallel: {ep: 0}"),
                  "'parallel.ep' must be >= 1, got 0");
  EXPECT_CONTAINS(error_of(base + "model: {moe: {experts: 4}}\nparallel: {ep: 2, zero: {stage: 3, "
                                  "hierarchical_partition: true}}"),
                  "'parallel.ep' (2) shards over the ranks holding the same experts; ZeRO++ hpZ "
                  "and qgZ");
  // Both backends split the experts.
  EXPECT_EQ(parse_config(base + "model: {moe: {experts: 4}}\nparallel: {ep: 2}\ndevice: cuda", "c")
                .parallel.ep,
            2);
  EXPECT_EQ(parse_config(base + "model: {moe: {experts: 4}}\nparallel: {ep: 4}", "c").parallel.ep,
            4);
  // Experts 0 (the default) ignores the rest.
  EXPECT_NO_THROW(parse_config(base + "model: {moe: {top_k: 9}}", "c"));
  const Config c = parse_config(
      base + "model: {moe: {experts: 8, top_k: 1, every: 2, capacity_factor: 0}}", "c");
  EXPECT_EQ(c.model.moe.experts, 8);
  EXPECT_EQ(c.model.moe.top_k, 1);
  EXPECT_EQ(c.model.moe.every, 2);
  EXPECT_EQ(c.model.moe.capacity_factor, 0.0);
  EXPECT_EQ(parse_config(config_to_yaml(c), "again"), c);  // written back whole
}

// The block's architecture keys (model/gpt_architecture.h): defaults are GPT-2's, each rule names
// its key, and a Llama-style model reads and writes back whole (with SwiGLU experts too).
TEST(ConfigErrors, ArchitectureKeys) {
  const std::string base = "data: {train: t}\n";
  const Config gpt2 = parse_config(base, "c");
  EXPECT_EQ(gpt2.model.arch, GptArchitecture{});
  EXPECT_EQ(gpt_shape_of(gpt2.model).qkv_width(), 3 * 128);
  EXPECT_EQ(gpt_shape_of(gpt2.model).ffn_width(), 4 * 128);
  EXPECT_CONTAINS(error_of(base + "model: {n_head: 4, kv_heads: 3}"),
                  "'model.kv_heads' (3) must divide model.n_head (4)");
  EXPECT_CONTAINS(error_of(base + "model: {kv_heads: -1}"),
                  "'model.kv_heads' must be >= 0, got -1");
  EXPECT_CONTAINS(error_of(base + "model: {norm: batchnorm}"), "layernorm or rmsnorm");
  EXPECT_CONTAINS(error_of(base + "model: {mlp: relu}"), "gelu or swiglu");
  EXPECT_CONTAINS(error_of(base + "model: {position: alibi}"), "learned or rope");
  EXPECT_CONTAINS(error_of(base + "model: {norm_eps: 0}"), "'model.norm_eps' must be in (0, 1)");
  EXPECT_CONTAINS(error_of(base + "model: {rope_theta: 1}"), "'model.rope_theta' must be > 1");
  EXPECT_CONTAINS(error_of(base + "model: {d_ff: -4}"), "'model.d_ff' must be >= 0, got -4");
  EXPECT_CONTAINS(error_of(base + "model: {n_head: 4, d_model: 12, position: rope}"),
                  "the head size (d_model / n_head = 3) must be even");
  EXPECT_CONTAINS(error_of(base + "model: {n_head: 4, kv_heads: 2}\nparallel: {tp: 4}"),
                  "'parallel.tp' (4) must divide model.kv_heads (2)");
  EXPECT_CONTAINS(error_of(base + "model: {d_ff: 30}\nparallel: {tp: 4}"),
                  "'parallel.tp' (4) must divide the MLP width (30");
  const Config c = parse_config(base + R"(model: {n_layer: 2, n_head: 8, d_model: 256,
  norm: rmsnorm, norm_eps: 1e-6, mlp: swiglu, ffn_multiple_of: 64, position: rope,
  rope_theta: 500000, kv_heads: 2, bias: false, tie_embeddings: false})",
                                "c");
  const GptShape shape = gpt_shape_of(c.model);
  EXPECT_EQ(shape.arch.norm, Norm::rmsnorm);
  EXPECT_EQ(shape.arch.rope_theta, 500000.0);
  EXPECT_EQ(shape.kv_head_count(), 2);
  EXPECT_EQ(shape.qkv_width(), (8 + 2 * 2) * 32);
  EXPECT_EQ(shape.ffn_width(), 704);  // ⌊8·256/3⌋ = 682, rounded up to a multiple of 64
  EXPECT_EQ(shape.fc_width(), 2 * 704);
  EXPECT_EQ(parse_config(config_to_yaml(c), "again"), c);  // written back whole
  // Experts are the model's MLP: SwiGLU of any width without biases, or GELU of its own width.
  const Config moe = parse_config(base + R"(model: {n_layer: 2, mlp: swiglu, d_ff: 96, bias: false,
  moe: {experts: 4, top_k: 2}})",
                                  "c");
  const MoeExpertShape experts = gpt_shape_of(moe.model).expert_shape();
  EXPECT_EQ(experts, (MoeExpertShape{128, 96, true, false}));
  EXPECT_EQ(experts.fc_width(), 2 * 96);
  EXPECT_EQ(parse_config(base + "model: {d_ff: 100, moe: {experts: 4}}", "c").model.arch.d_ff, 100);
}

// precision.fp8*: read, written back as the same config, fp8_layers a set in the table's order;
// each mistake named by its key.
TEST(ConfigErrors, Fp8Keys) {
  const std::string base = "data: {train: t}\nprecision: {compute: bf16, ";
  const Config c = parse_config(base +
                                    "fp8: delayed, fp8_format: e4m3, fp8_history: 32, "
                                    "fp8_layers: [mlp_proj, qkv], fp8_min_size: 0}",
                                "c");
  EXPECT_EQ(c.precision.fp8.scaling, Fp8Scaling::delayed);
  EXPECT_EQ(c.precision.fp8.formats, Fp8Formats::e4m3);
  EXPECT_EQ(c.precision.fp8.history, 32);
  EXPECT_EQ(c.precision.fp8.layers, (std::vector<Fp8Layer>{Fp8Layer::qkv, Fp8Layer::mlp_proj}));
  EXPECT_EQ(parse_config(config_to_yaml(c), "again"), c);
  EXPECT_EQ(parse_config(base + "fp8: delayed, fp8_format: e4m3, fp8_history: 32, "
                                "fp8_layers: [qkv, mlp_proj], fp8_min_size: 0}",
                         "c"),
            c);
  EXPECT_EQ(parse_config("data: {train: t}", "c").precision.fp8.layers.size(), 4u);
  EXPECT_CONTAINS(error_of(base + "fp8: blockwise}"), "none, tensorwise, rowwise or delayed");
  EXPECT_CONTAINS(error_of(base + "fp8_layers: [qkv, qkv]}"), "names 'qkv' twice");
  EXPECT_CONTAINS(error_of(base + "fp8_layers: [mlp_fcc]}"), "did you mean 'mlp_fc'?");
  EXPECT_CONTAINS(error_of(base + "fp8_layers: qkv}"), "must be a list of qkv, attn_proj");
  EXPECT_CONTAINS(error_of(base + "fp8: tensorwise, fp8_layers: }"),
                  "'precision.fp8_layers' is empty");
  EXPECT_CONTAINS(error_of(base + "fp8_history: 0}"),
                  "'precision.fp8_history' must be in [1, 1024]");
  EXPECT_CONTAINS(error_of(base + "fp8_min_size: -1}"), "'precision.fp8_min_size' must be >= 0");
  EXPECT_CONTAINS(error_of("data: {train: t}\nprecision: {fp8: rowwise}"),
                  "needs precision.compute: bf16, got fp32");
  EXPECT_CONTAINS(error_of(base + "fp8: delayed}\ndiloco: {enabled: true, workers: 2}"),
                  "not run under diloco");
}

TEST(ConfigErrors, VirtualStagesFollowTheSchedule) {
  const std::string base = "data: {train: t}\nmodel: {n_layer: 8}\n";
  EXPECT_CONTAINS(error_of(base + "parallel: {pp: 2, pipeline_schedule: interleaved}"),
                  "'parallel.virtual_stages' must be >= 2 for pipeline_schedule interleaved");
  EXPECT_CONTAINS(
      error_of(base + "parallel: {pp: 2, pipeline_schedule: zbv, virtual_stages: 3}"),
      "'parallel.virtual_stages' must be 2 for pipeline_schedule zbv (the two arms of the V), "
      "got 3");
  EXPECT_CONTAINS(error_of(base + "parallel: {pp: 2, virtual_stages: 2}"),
                  "'parallel.virtual_stages' must be 1 for pipeline_schedule 1f1b");
  EXPECT_CONTAINS(error_of(base + "parallel: {pp: 1, pipeline_schedule: zbv, virtual_stages: 2}"),
                  "'parallel.pipeline_schedule' zbv needs parallel.pp >= 2, got 1");
  EXPECT_CONTAINS(
      error_of(base + "parallel: {pp: 4, pipeline_schedule: interleaved, virtual_stages: 3}"),
      "'parallel.virtual_stages' (3) times parallel.pp (4) must be <= model.n_layer (8)");
  EXPECT_CONTAINS(error_of(base + "parallel: {pp: 2, pipeline_schedule: zbv, virtual_stages: 2, "
                                  "pp_layers: [4, 4]}"),
                  "'parallel.pp_layers' must have one entry per pipeline stage (parallel.pp = 2 "
                  "times parallel.virtual_stages = 4), got 2");
  EXPECT_NO_THROW(parse_config(
      base + "parallel: {pp: 2, pipeline_schedule: zbv, virtual_stages: 2, pp_layers: [1,2,3,2]}",
      "c"));
  // zbv's only value is what the key takes when left out.
  EXPECT_EQ(
      parse_config(base + "parallel: {pp: 2, pipeline_schedule: zbv}", "c").parallel.virtual_stages,
      2);
  EXPECT_EQ(parse_config(base + "parallel: {pp: 2}", "c", {"parallel.pipeline_schedule=zbv"})
                .parallel.virtual_stages,
            2);
}

TEST(ConfigErrors, EvalNeedsMoreThanOneSequenceOfTokens) {
  const std::string yaml = "data: {train: t, val: v}\ntrain: {eval_tokens: 128}\n";
  EXPECT_CONTAINS(error_of(yaml),
                  "'train.eval_tokens' (128) must be more than model.seq_len (128)");
  // Without a validation set, or with evaluation off, eval_tokens is unused.
  EXPECT_NO_THROW(parse_config("data: {train: t}\ntrain: {eval_tokens: 128}", "c"));
  EXPECT_NO_THROW(parse_config(yaml, "c", {"train.eval_every=0"}));
}

TEST(ConfigErrors, MalformedYamlGivesLineAndColumn) {
  EXPECT_EQ(error_of("data: {train: t}\ntrain: {steps: 3\nmodel: {}"),
            "config.yaml:3:6: invalid YAML: end of map flow not found");
  EXPECT_CONTAINS(error_of("data:\n  train: t\n   val: v: w\n"), "config.yaml:3:");
}

TEST(ConfigFile, MissingOrUnreadableFileIsNamed) {
  try {
    load_config("/nonexistent/strata.yaml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "cannot read config '/nonexistent/strata.yaml': No such file or directory");
  }
  const auto directory = std::filesystem::temp_directory_path();
  try {
    load_config(directory.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), "cannot read config '" + directory.string() + "': Is a directory");
  }
}

TEST(ConfigFile, LoadsAFileAndNamesItInMessages) {
  const auto path = std::filesystem::temp_directory_path() / "strata_config_test.yaml";
  std::ofstream(path) << kMinimal << "train: {steps: 7}\n";
  EXPECT_EQ(load_config(path.string()).train.steps, 7);
  EXPECT_EQ(load_config(path.string(), {"train.steps=9"}).train.steps, 9);
  try {
    load_config(path.string(), {"train.steps=0"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), path.string() + ": 'train.steps' must be >= 1");
  }
  std::filesystem::remove(path);
}

TEST(ConfigOverrides, ScalarListAndNestedValues) {
  const Config c = parse_config(design_example(), "config.yaml",
                                {"optimizer.lr=3e-4", "parallel.pp=2", "parallel.pp_layers=[1,3]",
                                 "parallel.zero.stage=2", "run.name=exp 1", "data.val="});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.parallel.pp_layers, (std::vector<int>{1, 3}));
  EXPECT_EQ(c.parallel.zero.stage, 2);
  EXPECT_EQ(c.run.name, "exp 1");
  EXPECT_EQ(c.data.val, "");
}

TEST(ConfigOverrides, CreateMissingSectionsAndAcceptMaps) {
  const Config c = parse_config(kMinimal, "c",
                                {"parallel.zero={stage: 3, quantized_weights: true}",
                                 "diloco.enabled=true", "recompute=full"});
  EXPECT_EQ(c.parallel.zero.stage, 3);
  EXPECT_TRUE(c.parallel.zero.quantized_weights);
  EXPECT_TRUE(c.diloco.enabled);
  EXPECT_EQ(c.recompute, Recompute::full);
}

TEST(ConfigOverrides, LaterOverridesWin) {
  const Config c = parse_config(kMinimal, "c", {"train.steps=5", "train.steps=6"});
  EXPECT_EQ(c.train.steps, 6);
}

TEST(ConfigOverrides, UnknownKeysAreRejectedLikeInTheFile) {
  EXPECT_EQ(error_of_set("optimizer.lrr=1"),
            "--set 'optimizer.lrr=1': unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)");
  EXPECT_EQ(error_of_set("optimiser.lr=1"),
            "--set 'optimiser.lr=1': unknown key 'optimiser' (did you mean 'optimizer'?)");
  EXPECT_CONTAINS(error_of_set("recompute.mode=full"), "unknown key 'recompute.mode'");
  // A map value is checked key by key, and the message says which --set brought it.
  EXPECT_EQ(error_of_set("parallel.zero={stag: 1}"),
            "config.yaml: unknown key 'parallel.zero.stag' (did you mean 'parallel.zero.stage'?) "
            "(from --set 'parallel.zero={stag: 1}')");
}

TEST(ConfigOverrides, MalformedOverrides) {
  EXPECT_EQ(error_of_set("train.steps"), "--set 'train.steps': expected key.path=value");
  EXPECT_EQ(error_of_set("=3"), "--set '=3': expected key.path=value");
  EXPECT_EQ(error_of_set("train..steps=3"), "--set 'train..steps=3': expected key.path=value");
  EXPECT_CONTAINS(error_of_set("parallel.pp_layers=[1,"), "--set 'parallel.pp_layers=[1,'");
  EXPECT_CONTAINS(error_of_set("parallel.pp_layers=[1,"), "invalid YAML");
  EXPECT_EQ(error_of_set("train.steps=abc"),
            "config.yaml: 'train.steps' must be an integer, got 'abc' (from --set "
            "'train.steps=abc')");
}

Config layout(int tp, int pp, int dp, int global_batch, int micro_batch) {
  Config c = parse_config(kMinimal, "c");
  c.model.n_head = 8;
  c.model.n_layer = 8;
  c.parallel.tp = tp;
  c.parallel.pp = pp;
  c.parallel.dp = dp;
  c.train.global_batch = global_batch;
  c.train.micro_batch = micro_batch;
  return c;
}

std::string resolve_error(const Config& config, int world_size) {
  try {
    resolve_data_parallel(config, world_size);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for world size " << world_size;
  return "";
}

TEST(ResolveDataParallel, AutoAndExplicit) {
  EXPECT_EQ(resolve_data_parallel(layout(1, 1, 0, 64, 8), 1), 1);
  EXPECT_EQ(resolve_data_parallel(layout(2, 2, 0, 64, 8), 16), 4);
  EXPECT_EQ(resolve_data_parallel(layout(2, 1, 4, 64, 8), 8), 4);
}

TEST(ResolveDataParallel, Errors) {
  EXPECT_EQ(resolve_error(layout(2, 2, 0, 64, 8), 6),
            "world size 6 is not divisible by parallel.tp*parallel.pp (2*2=4)");
  EXPECT_CONTAINS(resolve_error(layout(2, 2, 3, 96, 8), 8),
                  "'parallel.dp' (3) * tp*pp (2*2=4) must equal the world size 8");
  EXPECT_EQ(resolve_error(layout(1, 1, 0, 64, 8), 3),
            "'train.global_batch' (64) must be divisible by micro_batch*dp (8*3=24)");
}

TEST(ResolveDataParallel, ZeroNeedsALayoutItCanShard) {
  Config c = layout(2, 2, 0, 64, 8);
  c.parallel.zero.stage = 1;
  EXPECT_CONTAINS(resolve_error(c, 4),
                  "'parallel.zero.stage' (1) shards the training state over the data-parallel "
                  "ranks, but this layout has dp 1 (world 4 = tp 2 * pp 2)");
  EXPECT_EQ(resolve_data_parallel(c, 8), 2);
  // hpZ: 6 data-parallel ranks over nodes of 4 are 4 + 2, not an even split; over nodes of 3 or
  // 2 they are.
  c = layout(1, 1, 0, 48, 8);
  c.parallel.zero.stage = 3;
  c.parallel.zero.hierarchical_partition = true;
  c.parallel.gpus_per_node = 4;
  EXPECT_CONTAINS(resolve_error(c, 6),
                  "'parallel.zero.hierarchical_partition' needs the data-parallel ranks of every "
                  "node to divide the data-parallel group evenly, but dp 6 (tp 1, pp 1) over "
                  "nodes of 4 ranks");
  for (int per_node : {2, 3, 6}) {
    c.parallel.gpus_per_node = per_node;
    EXPECT_EQ(resolve_data_parallel(c, 6), 6) << per_node;
  }
}

TEST(ConfigYaml, WritesEveryKey) {
  Config c = parse_config(kMinimal, "c");
  const std::string yaml = config_to_yaml(c);
  for (const char* key :
       {"name: demo", "seed: 1234", "vocab_size: 4096", "val: \"\"", "lr: 0.001", "eps: 1e-08",
        "eval_tokens: 65536", "dir: \"\"  # empty: runs/demo/checkpoints", "loss_scale: dynamic",
        "loss_scale_window: 1000", "dp: auto", "pp_layers: []", "zero:\n    stage: 0",
        "quantized_gradients: false", "device_comm: auto", "recompute: none", "device: auto",
        "threads: auto  # OMP_NUM_THREADS, else this host's cores / its ranks",
        "compression: none"})
    EXPECT_CONTAINS(yaml, key);
}

TEST(ConfigYaml, RoundTripsExactly) {
  Config c = parse_config(kMinimal, "c");
  EXPECT_EQ(parse_config(config_to_yaml(c), "written"), c);

  c.run = {"run #1: test", "", 18446744073709551615u};
  c.data = {"~", "null", "true", {}};  // strings that would read back as other types if unquoted
  c.optimizer.lr = 0.1 + 0.2;          // 0.30000000000000004: needs all 17 digits
  c.optimizer.min_lr = c.optimizer.lr / 3.0;
  c.optimizer.eps = 5e-324;  // the smallest subnormal
  c.optimizer.schedule = LrSchedule::constant;
  c.train.eval_tokens = 1LL << 40;
  c.checkpoint.dir = "/tmp/ck pts";
  c.precision = {cpu::ComputeDtype::fp16, "1024.0", 50, 3.0e9 + 0.5};
  c.parallel.pp = 2;
  c.parallel.dp = 3;
  c.parallel.pp_layers = {3, 1};
  c.parallel.sequence_parallel = true;
  c.parallel.device_comm = DeviceComm::host;
  c.parallel.zero = {3, true, false, true, GradientReduction::micro_batch};
  c.recompute = Recompute::full;
  c.device = Device::cpu;
  c.threads = 6;
  c.diloco = {true,
              8,
              100,
              0.35,
              0.0,
              false,
              OuterSchedule::inner,
              OuterCompression::int4,
              true,
              4,
              true,
              Averaging::moshpit,
              0.25,
              AggregationRule::mean,  // the rules need all_reduce
              2,
              0.5 + 0.25,
              7,
              1.0 / 3.0,
              "",
              "g-1",
              3,
              2,
              7.5,
              "eth1",
              ""};  // join stays empty: drops and overlap are in-job (and so no secret)
  const std::string yaml = config_to_yaml(c);
  EXPECT_EQ(parse_config(yaml, "written"), c) << yaml;

  c.data.train.clear();  // a mixture: the list form, with strings that need quoting
  c.data.mixture = {{"null", 0.1 + 0.2, "true", "n.1"}, {"~/a b: c, [d]", 3, "", "x-2"}};
  const std::string mixed = config_to_yaml(c);
  EXPECT_EQ(parse_config(mixed, "written"), c) << mixed;
}

// data.train as a weighted list of sources (data/mixture.h).
const char* const kMixture = R"(
data:
  train:
    - {path: corpora/wiki/train, weight: 0.7, val: corpora/wiki/val}
    - {path: corpora/code/train/*.h5, weight: 0.3, name: github-code}
    - {path: books.h5, weight: 1.5e-1}
)";

TEST(ConfigMixture, AListOfSourcesParsesWithDerivedNames) {
  const Config c = parse_config(kMixture, "c");
  EXPECT_TRUE(c.data.train.empty());
  const std::vector<DataSource> expected{{"corpora/wiki/train", 0.7, "corpora/wiki/val", "wiki"},
                                         {"corpora/code/train/*.h5", 0.3, "", "github-code"},
                                         {"books.h5", 0.15, "", "books"}};
  EXPECT_EQ(c.data.mixture, expected);
  EXPECT_EQ(c.data.train_sources(), expected);
  // The string form is one source of weight 1, named by its path.
  EXPECT_EQ(parse_config("data: {train: data/fortunes/train}", "c").data.train_sources(),
            (std::vector<DataSource>{{"data/fortunes/train", 1.0, "", "fortunes"}}));
  EXPECT_EQ(source_name_of("x/train/shard_*.h5"), "x");
  EXPECT_EQ(source_name_of("/data/my corpus/"), "my_corpus");
  EXPECT_EQ(source_name_of("*.h5"), "");
  EXPECT_EQ(parse_config("data: {train: [{path: '*.h5', weight: 1}]}", "c").data.mixture[0].name,
            "source0");
}

TEST(ConfigMixture, WritesReadsMergesAndReportsChanges) {
  const Config c = parse_config(kMixture, "c");
  const std::string yaml = config_to_yaml(c);
  EXPECT_CONTAINS(yaml,
                  "  train:\n    - path: corpora/wiki/train\n      weight: 0.7\n      val: "
                  "corpora/wiki/val\n      name: wiki\n");
  EXPECT_EQ(parse_config(yaml, "written"), c) << yaml;

  // --set in YAML's flow syntax; a later file or --set replaces the list whole.
  const Config set = parse_config(
      "data: {train: base}", "c",
      {"data.train=[{path: a/train, weight: 0.7}, {path: b/train, weight: 0.3, val: b/val}]"});
  EXPECT_EQ(set.data.mixture,
            (std::vector<DataSource>{{"a/train", 0.7, "", "a"}, {"b/train", 0.3, "b/val", "b"}}));
  EXPECT_EQ(parse_config(kMixture, "c", {"data.train=plain"}).data.train_sources(),
            (std::vector<DataSource>{{"plain", 1.0, "", "plain"}}));
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strata_config_mix_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "base.yaml") << kMixture;
  std::ofstream(dir / "more.yaml") << "data: {train: [{path: only, weight: 2}], val: v}\n";
  const Config merged = load_configs({dir / "base.yaml", dir / "more.yaml"});
  EXPECT_EQ(merged.data.mixture, (std::vector<DataSource>{{"only", 2.0, "", "only"}}));
  EXPECT_EQ(merged.data.val, "v");
  std::filesystem::remove_all(dir);

  // What a resumed run says it changed.
  const Config before = parse_config("data: {train: a/train}", "a");
  EXPECT_EQ(config_changes(before, set),
            (std::vector<ConfigChange>{
                {"data.train", "a/train",
                 "[{path: a/train, weight: 0.7, name: a}, {path: b/train, weight: 0.3, val: b/val, "
                 "name: b}]"}}));
}

TEST(ConfigMixture, MistakesNameTheSourceAndTheKey) {
  const auto mixture = [](const std::string& second) {
    return "data: {train: [{path: a, weight: 1}, " + second + "]}";
  };
  EXPECT_EQ(error_of(mixture("{path: b, weight: -0.5}")),
            "config.yaml: 'data.train[1].weight' must be > 0, got -0.5");
  EXPECT_EQ(error_of(mixture("{path: b, weight: 0}")),
            "config.yaml: 'data.train[1].weight' must be > 0, got 0");
  EXPECT_EQ(error_of(mixture("{path: b, weight: lots}")),
            "config.yaml: 'data.train[1].weight' must be a number, got 'lots'");
  // A source without a weight weighs 1 (ARCHITECTURE §3).
  EXPECT_EQ(parse_config(mixture("{path: b}"), "c").data.mixture.at(1).weight, 1.0);
  EXPECT_EQ(error_of(mixture("{weight: 1}")),
            "config.yaml: 'data.train[1].path' is missing: every source names its training "
            "shards (a file, directory or glob)");
  EXPECT_EQ(error_of(mixture("{path: b, wieght: 1}")),
            "config.yaml: unknown key 'data.train[1].wieght' (did you mean "
            "'data.train[1].weight'?)");
  EXPECT_EQ(error_of(mixture("{path: b, weight: 1, path: c}")),
            "config.yaml: duplicate key 'data.train[1].path'");
  EXPECT_EQ(error_of(mixture("b")),
            "config.yaml: 'data.train[1]' must be a map {path: SHARDS, weight: W} (val and name "
            "optional), got 'b'");
  EXPECT_EQ(error_of(mixture("{path: b, weight: 1, val: [x]}")),
            "config.yaml: 'data.train[1].val' must be a string, got a list");
  EXPECT_EQ(error_of("data: {train: []}"),
            "config.yaml: 'data.train' is an empty list: a mixture needs at least one source "
            "{path, weight}");
  // Names are metrics keys: unique, and nothing to escape.
  EXPECT_EQ(error_of(mixture("{path: x/a, weight: 1}")),
            "config.yaml: 'data.train[1].name' is 'a', as is data.train[0].name: sources need "
            "unique names (one without `name` takes the last meaningful component of its path)");
  EXPECT_EQ(error_of(mixture("{path: b, weight: 1, name: 'a b'}")),
            "config.yaml: 'data.train[1].name' must be 1 to 64 letters, digits, '.', '_' or '-' "
            "(it names the source in the metrics), got 'a b'");
  // A share below one sample per block of 1024.
  EXPECT_EQ(error_of(mixture("{path: b, weight: 0.0005}")),
            "config.yaml: 'data.train[1].weight' (0.0005) is 0.04998% of the sources' total "
            "weight (1.0005); a source needs at least 1/1024 of it (mixtures are drawn in "
            "blocks of 1024 samples)");
  // A --set is named as the origin.
  EXPECT_EQ(error_of_set("data.train=[{path: a, weight: 1}, {path: b, weight: -1}]"),
            "config.yaml: 'data.train[1].weight' must be > 0, got -1 (from --set "
            "'data.train=[{path: a, weight: 1}, {path: b, weight: -1}]')");
  // Evaluation of a source's val needs at least one sequence too.
  EXPECT_CONTAINS(error_of("data: {train: [{path: a, weight: 1, val: v}]}\n"
                           "model: {seq_len: 64}\ntrain: {eval_tokens: 64}"),
                  "'train.eval_tokens' (64) must be more than model.seq_len (64)");
}

// The configs the README points users to must load and fit the world their comments launch them
// on: 8 ranks unless the file says otherwise (a swarm peer is one process).
TEST(ShippedConfigs, EveryConfigLoadsAndItsLayoutFits) {
  const std::map<std::string, int> world_of = {
      {"fortunes.yaml", 2},       {"mixture.yaml", 2},   {"gpt2_1.5b.yaml", 16},
      {"llama_fortunes.yaml", 2}, {"llama_moe.yaml", 2}, {"llama_tiny.yaml", 1},
      {"swarm_fortunes.yaml", 1}};
  int checked = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(testing::source_dir() + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const auto world = world_of.count(name) ? world_of.at(name) : 8;
    EXPECT_NO_THROW({
      const Config config = load_config(entry.path().string());
      const MeshShape mesh = resolve_mesh(config, world);
      const int workers = config.diloco.enabled ? config.diloco.workers : 1;  // mesh: one worker's
      EXPECT_EQ(mesh.tp * mesh.pp * mesh.dp * workers, world);
    });
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST(ConfigWarnings, AWarmUpAsLongAsTheRunIsSaid) {
  Config config = parse_config(kMinimal, "c");
  config.train.steps = 50;
  config.optimizer.warmup_steps = 10;
  EXPECT_TRUE(config_warnings(config).empty());
  config.optimizer.warmup_steps = 50;
  ASSERT_EQ(config_warnings(config).size(), 1u);
  EXPECT_EQ(config_warnings(config)[0].substr(0, 53),
            "optimizer.warmup_steps (50) >= train.steps (50): the ");
  config.optimizer.warmup_steps = 0;  // no warm-up at all is meant
  config.train.steps = 0;
  EXPECT_TRUE(config_warnings(config).empty());
}

// swarm.*: a peer's keys and their rules (docs/ARCHITECTURE.md §3 `swarm`).
TEST(ConfigSwarm, KeysAndRules) {
  const std::string peer =
      "data: {train: t}\nmodel: {n_layer: 4, tie_embeddings: false}\n"
      "swarm: {join: 'file:///tmp/s', stages: [1, 2, 1]}\n";
  const Config c = parse_config(peer, "c", {"swarm.stage=2", "swarm.routing=fixed"});
  EXPECT_TRUE(c.swarm.enabled());
  EXPECT_EQ(c.swarm.stage, 2);
  EXPECT_EQ(c.swarm.routing, SwarmRouting::fixed);
  EXPECT_EQ(parse_config(peer, "c", {"swarm.stage=auto"}).swarm.stage, -1);
  EXPECT_EQ(parse_config(peer, "c").swarm.stage, -1);  // auto by default
  EXPECT_EQ(parse_config(peer, "c", {"swarm.stage=0"}).swarm.stage, 0);
  EXPECT_CONTAINS(error_of(peer, {"swarm.stage=-1"}),
                  "'swarm.stage' must be 'auto' or an integer >= 0, got '-1'");
  EXPECT_CONTAINS(error_of(peer, {"swarm.stage=3"}),
                  "'swarm.stage' must be auto or a stage below 3");
  EXPECT_CONTAINS(error_of(peer, {"swarm.stages=[4]"}), "at least 2 stages");
  EXPECT_CONTAINS(error_of(peer, {"swarm.stages=[1, 1]"}), "must sum to model.n_layer (4)");
  EXPECT_CONTAINS(error_of(peer, {"swarm.stages=[0, 4]"}), "every stage >= 1 layer");
  EXPECT_CONTAINS(error_of(peer, {"swarm.join=http://x"}), "'swarm.join' must be file:///");
  EXPECT_CONTAINS(error_of(peer, {"swarm.target_batch=12"}), "multiple of train.micro_batch");
  EXPECT_CONTAINS(error_of(peer, {"model.tie_embeddings=true"}),
                  "'model.tie_embeddings' must be false");
  EXPECT_CONTAINS(error_of(peer, {"parallel.tp=2"}), "a swarm peer is one process");
  EXPECT_CONTAINS(error_of(peer, {"precision.compute=fp16"}), "fp16 is not for swarm peers");
  EXPECT_CONTAINS(error_of(peer, {"diloco.enabled=true"}), "cannot also be a DiLoCo worker");
  // Without swarm.join the other swarm keys are not checked: a tied model trains as before.
  EXPECT_FALSE(parse_config("data: {train: t}\nswarm: {stages: [9]}", "c").swarm.enabled());
}

}  // namespace
}  // namespace strata
