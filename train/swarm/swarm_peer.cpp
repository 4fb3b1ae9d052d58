#include "train/swarm/swarm_peer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "model/core/error.h"
#include "parallel/swarm/stage_registry.h"
#include "parallel/swarm/swarm_transport.h"
#include "train/backend/cuda_training.h"
#include "train/metrics/metrics.h"
#include "train/run_directory.h"
#include "train/run_lock.h"
#include "train/stop_signal.h"
#include "train/swarm/stage_checkpoints.h"
#include "train/swarm/stage_rounds.h"
#include "train/swarm/stage_server.h"
#include "train/swarm/swarm_driver.h"
#include "train/swarm/swarm_progress.h"
#include "train/swarm/swarm_stage.h"
#include "train/training_data.h"

namespace strata {

namespace {

namespace fs = std::filesystem;

// The settings every peer of a swarm shares, as the config YAML of just those keys: the model and
// its stages, the optimizer and its schedule, the batch the stages step on, the seed (every stage
// starts from its weights) and the routing.
std::string swarm_shared_settings(const Config& config) {
  Config shared;
  shared.model = config.model;
  shared.optimizer = config.optimizer;
  shared.run.seed = config.run.seed;
  shared.train.steps = config.train.steps;
  shared.train.global_batch = config.train.global_batch;
  shared.train.micro_batch = config.train.micro_batch;
  shared.data.train = "(the drivers' own)";
  shared.swarm.join = "file:///(each peer's own)";
  shared.swarm.stages = config.swarm.stages;
  shared.swarm.target_batch = config.swarm.target_batch;
  shared.swarm.routing = config.swarm.routing;
  shared.swarm.compression = config.swarm.compression;
  return config_to_yaml(shared);
}

StageRegistrySettings registry_settings(const Config& config,
                                        std::shared_ptr<const SharedSecret> secret) {
  StageRegistrySettings s;
  s.store_url = config.swarm.join;
  s.group = config.swarm.group;
  s.stages = static_cast<int>(config.swarm.stages.size());
  s.timeout_s = config.swarm.timeout;
  s.secret = std::move(secret);
  const std::string mine = swarm_shared_settings(config);
  s.shared_settings = mine;
  s.difference = [mine](const std::string& theirs) -> std::string {
    const std::vector<ConfigChange> changes = config_changes(
        parse_config(theirs, "the swarm's settings"), parse_config(mine, "this peer's settings"));
    if (changes.empty()) return "";
    const ConfigChange& c = changes.front();
    return c.key + " is " + c.after + " here but " + c.before +
           " in the swarm: every peer of a swarm shares it";
  };
  return s;
}

}  // namespace

void run_swarm_peer(const Config& config, MpiCommunicator& world, const SwarmPeerOptions& options) {
  const TestHooks& hooks = options.test_hooks;
  if (world.size() != 1)
    fail(
        "a swarm peer is one process (swarm.join): start each peer as its own `train`, not "
        "under mpirun -np ",
        world.size());
  const GptShape shape = gpt_shape_of(config.model);
  const Device device = resolve_device(config, shape);
  RunLock lock(config.run_directory());
  // A resumed peer continues its run (and serves its checkpoint's stage); a fresh one claims it.
  std::optional<StageResume> resume;
  if (options.resume_from)
    resume = choose_stage_resume(config, *options.resume_from, world);
  else
    claim_run_directory(config, options.overwrite);
  if (!lock.takeover().empty()) std::cout << "note: " << lock.takeover() << std::endl;

  // swarm.secret_file, read once: the store, the requests and the stage's store share it.
  std::shared_ptr<const SharedSecret> secret;
  std::unique_ptr<StageRegistry> registry;
  try {
    secret = SharedSecret::of_config(config.swarm.secret_file, "swarm.secret_file");
    registry = std::make_unique<StageRegistry>(registry_settings(config, secret));
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  const int wanted = resume ? resume->stage : config.swarm.stage;
  int index = wanted >= 0 ? wanted : registry->least_served_stage();
  auto stage = std::make_unique<SwarmStage>(config, index, device, world);
  if (resume) {
    const std::int64_t step = load_stage_checkpoint(config, *stage, resume->path);
    std::printf("resumed from %s at step %lld\n", resume->path.c_str(),
                static_cast<long long>(step));
  }
  // The first stage reads the training data; its tokenizer check is the run's.
  std::unique_ptr<TrainingData> data;
  std::string tokenizer_model;
  if (stage->first()) {
    data = std::make_unique<TrainingData>(config);
    tokenizer_model = data->check(config);
  }
  StageCheckpoints checkpoints(config, tokenizer_model, data && data->without_tokenizer());
  const std::string host = config.swarm.host.empty() ? "127.0.0.1" : config.swarm.host;
  std::unique_ptr<RpcServer> server;
  try {
    server = std::make_unique<RpcServer>("tcp://" + host + ":*", host, secret);
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  const std::string run_dir = config.run_directory();
  fs::create_directories(run_dir);
  std::ofstream(fs::path(run_dir) / "config.yaml") << config_to_yaml(config);
  MetricsWriter metrics((fs::path(run_dir) / "metrics.jsonl").string(),
                        resume ? stage->steps_done() : -1);
  install_stop_signal_handlers();
  SwarmProgress progress(config, registry->store());
  // One pass per stage this peer serves: a server that rebalancing moves serves the next.
  for (bool first_pass = true;; first_pass = false) {
    std::unique_ptr<StageRounds> rounds;
    try {
      rounds = std::make_unique<StageRounds>(config, index, world, hooks, secret);
    } catch (const std::runtime_error& e) {
      fail(e.what());
    }
    const ModelPartition p = swarm_stage_partition(config, index);
    std::printf("swarm '%s' (%s): stage %d of %zu (layers %d-%d%s%s), serving at %s\n",
                config.swarm.group.c_str(), redacted_store_url(config.swarm.join).c_str(), index,
                config.swarm.stages.size(), p.layer_begin, p.layer_end - 1,
                p.has_embedding ? ", embedding" : "", p.has_head ? ", head" : "",
                server->endpoint().c_str());
    if (first_pass) {
      if (!secret)
        std::printf(
            "swarm '%s' is unauthenticated: anyone who can write to its store or reach a peer's "
            "port can join it or send it requests (set swarm.secret_file to a secret its peers "
            "share)\n",
            config.swarm.group.c_str());
      else
        std::printf(
            "swarm '%s' is authenticated: its store records and requests are signed and its "
            "averaging groups challenged with the secret in %s (fingerprint %s)\n",
            config.swarm.group.c_str(), config.swarm.secret_file.c_str(),
            secret->fingerprint().c_str());
    }
    // A stage that has averaged before is joined: its state taken before any request is served.
    std::printf("stage %d: %s\n", index,
                rounds->start(*stage, first_pass && resume.has_value()).c_str());
    std::fflush(stdout);
    if (first_pass)
      registry->join(index, server->endpoint());
    else
      registry->move(index);
    std::printf("swarm peer %lld serves stage %d\n", static_cast<long long>(registry->id()), index);
    std::fflush(stdout);

    std::string why;
    if (stage->first()) {
      progress.start_at(stage->steps_done() * swarm_target_batch(config) /
                        config.train.micro_batch);
      SwarmDriver driver(config, *stage, *rounds, *registry, *server, progress, *data, metrics,
                         checkpoints);
      why = driver.run();
      // Its deathrattle tells the servers that the drivers are done.
      registry->leave(why);
    } else {
      StageServer serving(config, *stage, *rounds, *server, *registry, progress, metrics,
                          checkpoints, hooks);
      const ServeEnd end = serving.run();
      why = end.why;
      if (end.move_to >= 0) {
        // Its stage's group goes on without it; its weights are the next stage's, taken anew.
        rounds->leave(why);
        index = end.move_to;
        stage = std::make_unique<SwarmStage>(config, index, device, world);
        continue;
      }
    }
    // The state at the end (a stop signal's step), unless written at this step.
    checkpoints.save(*stage);
    std::printf("swarm peer %lld: %s\n", static_cast<long long>(registry->id()), why.c_str());
    rounds->leave(why);
    registry->leave(why);
    return;
  }
}

}  // namespace strata
