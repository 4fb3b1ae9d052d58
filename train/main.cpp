// train CONFIG.yaml [MORE.yaml]... [--set key.path=value]...
//       [--resume [CHECKPOINT] | --init CHECKPOINT] [--overwrite] [--print-config]
// Several configs merge in order (plan/config.h, load_configs), then the overrides apply. The
// flags and what they do are kCommand's (`train --help`).
// One process per data-parallel rank under mpirun. Errors print one `error: ...` line (from rank
// 0 when every rank fails the same way during set-up) and exit non-zero.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/core/command_line.h"
#include "model/core/error.h"
#include "model/kernels/cpu/thread_budget.h"
#include "parallel/comm/mpi_communicator.h"
#include "plan/auto_layout.h"
#include "plan/config.h"
#include "train/stop_signal.h"
#include "train/swarm/swarm_peer.h"
#include "train/trainer.h"

namespace {

struct Arguments {
  std::vector<std::string> config_paths;
  std::vector<std::string> overrides;
  std::optional<std::string> resume_from;
  std::optional<std::string> init_from;
  bool overwrite = false;
  bool print_config = false;
};

// The help; the flags are parsed below by hand, as --resume's value is optional.
const strata::CommandSpec kCommand{
    "usage: train CONFIG.yaml [MORE.yaml]... [--set key.path=value]... "
    "[--resume [CHECKPOINT] | --init CHECKPOINT] [--overwrite] [--print-config]",
    "Trains the GPT a config describes, on the layout it gives (one process per rank under "
    "mpirun -np N). Several configs merge in order, a later file winning key by key; then the "
    "--set overrides apply. Outputs go to <run.dir>/<run.name>/: config.yaml, metrics.jsonl, "
    "TensorBoard events, checkpoints.",
    {{"--set", "key.path=value", "", "override one config key (the value is YAML)", "", false,
      true},
     {"--resume", "[CHECKPOINT]", "",
      "continue the run: from CHECKPOINT, or its newest intact checkpoint when none is named"},
     {"--init", "CHECKPOINT", "",
      "start a new run from a checkpoint's weights only (fresh optimizer state, step 0), on any "
      "layout"},
     {"--overwrite", "", "",
      "start a fresh run in a run directory that holds an earlier run's files, replacing them "
      "(its checkpoints are removed)"},
     {"--print-config", "", "",
      "print the merged, validated config (every key, each with the file or --set it came "
      "from, or `default`) and exit without touching the run directory"}},
    "Every config key, its default and its rule: docs/ARCHITECTURE.md §3 (Configuration); a "
    "commented example: configs/fortunes.yaml.\n\n"
    "  mpirun -np 4 build/bin/train configs/fortunes.yaml --set parallel.tp=2\n"
    "  build/bin/train configs/fortunes.yaml --print-config"};
const std::string& kUsage = kCommand.usage;

// Whether `text` names a YAML file: what a config looks like on the command line.
bool looks_like_config(const std::string& text) {
  return text.ends_with(".yaml") || text.ends_with(".yml");
}

Arguments parse_arguments(int argc, char** argv) {
  Arguments args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << strata::help_text(kCommand) << std::flush;
      std::exit(0);
    } else if (arg == "--set") {
      if (i + 1 >= argc) strata::fail("--set needs key.path=value");
      args.overrides.push_back(argv[++i]);
    } else if (arg.starts_with("--set=")) {
      args.overrides.push_back(arg.substr(6));
    } else if (arg == "--resume") {
      args.resume_from = "";
      if (i + 1 < argc && !std::string(argv[i + 1]).starts_with("--")) args.resume_from = argv[++i];
    } else if (arg.starts_with("--resume=")) {
      args.resume_from = arg.substr(9);
    } else if (arg == "--init") {
      if (i + 1 >= argc || std::string(argv[i + 1]).starts_with("--"))
        strata::fail("--init needs a CHECKPOINT (", kUsage, ")");
      args.init_from = argv[++i];
    } else if (arg.starts_with("--init=")) {
      args.init_from = arg.substr(7);
      if (args.init_from->empty()) strata::fail("--init needs a CHECKPOINT (", kUsage, ")");
    } else if (arg == "--overwrite") {
      args.overwrite = true;
    } else if (arg == "--print-config") {
      args.print_config = true;
    } else if (arg.starts_with("-")) {
      strata::fail("unknown option '", arg, "' (", kUsage, ")");
    } else {
      args.config_paths.push_back(arg);
    }
  }
  // `train --resume x.yaml`: the flag took a config as its CHECKPOINT; say what it swallowed.
  for (const auto& [flag, value] :
       {std::pair{"--resume", args.resume_from}, std::pair{"--init", args.init_from}})
    if (value && looks_like_config(*value))
      strata::fail(flag, " took '", *value,
                   "' as its CHECKPOINT, but that names a config: give the configs first (train ",
                   *value, " ", flag, ")");
  if (args.config_paths.empty()) strata::fail("missing CONFIG.yaml (", kUsage, ")");
  // A resume continues a run; --init starts a new one.
  if (args.resume_from && args.init_from) strata::fail("--init and --resume cannot be combined");
  // --overwrite replaces a run; --resume continues it.
  if (args.resume_from && args.overwrite)
    strata::fail("--overwrite and --resume cannot be combined");
  return args;
}

// --print-config: the effective config with each value's source; the warnings on stderr.
void print_config(const strata::LoadedConfig& loaded) {
  if (loaded.config.parallel.auto_layout)
    std::cout << "# parallel.auto: at start-up the planner replaces the layout keys below with its "
                 "choice for the job's ranks\n";
  std::cout << strata::config_to_yaml(loaded.config, &loaded.sources);
  for (const std::string& warning : strata::config_warnings(loaded.config))
    std::cerr << "warning: " << warning << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  strata::ignore_file_size_signal();
  strata::MpiRuntime mpi(&argc, &argv);
  const int rank = mpi.world_rank();
  // Declared outside the try: when a step fails on one rank, the job is aborted while the trainer
  // still lives. Destroying it first would free device memory and NCCL communicators, which waits
  // for collectives that peers, stuck waiting for this rank, never finish.
  std::optional<strata::MpiCommunicator> world;
  std::unique_ptr<strata::Trainer> trainer;
  bool set_up = false;
  try {
    const Arguments args = parse_arguments(argc, argv);
    // The one test-only channel, read once (train/core/test_hooks.h).
    strata::TestHooks test_hooks = strata::TestHooks::from_environment();
    strata::LoadedConfig loaded =
        strata::load_configs_with_sources(args.config_paths, args.overrides);
    if (args.print_config) {
      if (rank == 0) print_config(loaded);
      return 0;
    }
    // parallel.auto: the planner fills the layout keys (plan/auto_layout.h), before the thread
    // budget, as its measurement of this machine sets its own.
    const strata::AutoLayout chosen =
        strata::choose_run_layout(std::move(loaded.config), mpi.world_size(), mpi.ranks_on_host());
    const strata::Config& config = chosen.config;
    // Before any kernel runs: OpenMP and OpenBLAS would otherwise start a thread per core in
    // every rank, and ranks sharing a host would preempt each other
    // (model/kernels/cpu/thread_budget.h).
    const strata::ThreadBudget threads = strata::set_thread_budget(
        mpi.ranks_on_host(),
        config.threads > 0 ? std::optional<int>(config.threads) : std::nullopt);
    world.emplace(MPI_COMM_WORLD, config.parallel.gpus_per_node);
    // A swarm peer (train/swarm/swarm_peer.h) is one process of its own loop, not a Trainer.
    if (config.swarm.enabled()) {
      // A peer starts from the seed, its checkpoint, or the state of its stage's live peers.
      if (args.init_from) strata::fail("--init is not for swarm peers (swarm.join)");
      std::cout << strata::describe(threads) << std::endl;
      strata::run_swarm_peer(
          config, *world,
          strata::SwarmPeerOptions{args.resume_from, args.overwrite, std::move(test_hooks)});
      return 0;
    }
    trainer = std::make_unique<strata::Trainer>(
        config, *world,
        strata::TrainerOptions{args.resume_from, args.init_from, args.overwrite,
                               std::move(test_hooks)});
    set_up = true;
    // Said once set-up has succeeded: a set-up error stays the run's one line of output.
    if (rank == 0) {
      if (!chosen.report.empty()) std::cout << chosen.report << std::endl;
      std::cout << strata::describe(threads) << std::endl;
      for (const std::string& warning : strata::config_warnings(config))
        std::cerr << "warning: " << warning << std::endl;
    }
    return trainer->run();
  } catch (const strata::CollectiveError& e) {
    // Every rank fails here alike: no peer waits, so no abort.
    if (rank == 0) std::cerr << "error: " << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    // Set-up errors (config, data, checkpoint) are identical on every rank: rank 0 speaks for all.
    // Later errors may hit one rank only: it speaks and aborts the job so no peer waits forever.
    if (rank == 0 || set_up) std::cerr << "error: " << e.what() << std::endl;
    if (set_up && mpi.world_size() > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}
