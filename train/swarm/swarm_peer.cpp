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
#include "train/swarm/swarm_driver.h"
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
  return config_to_yaml(shared);
}

StageRegistrySettings registry_settings(const Config& config) {
  StageRegistrySettings s;
  s.store_url = config.swarm.join;
  s.group = config.swarm.group;
  s.stages = static_cast<int>(config.swarm.stages.size());
  s.timeout_s = config.swarm.timeout;
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

// Serves the stage's requests, stepping it at each full round, until it has made train.steps
// steps and the drivers are done: the store's "<swarm>/finished", or no live first-stage peer.
std::string serve_stage(const Config& config, SwarmStage& stage, StageRegistry& registry,
                        RpcServer& server, MetricsWriter& metrics) {
  const auto handler = [&stage](const RpcMessage& m) { return stage.handle(m); };
  const std::string finished = config.swarm.group + "/finished";
  double looked_at = steady_seconds();
  std::int64_t served = 0;
  while (true) {
    if (stop_requested()) return "stopped by signal at step " + std::to_string(stage.steps_done());
    if (server.serve_one(0.05, handler)) served += 1;
    if (stage.round_complete()) {
      const StageStep s = stage.step();
      metrics.write(JsonLine()
                        .add("step", s.step)
                        .add("stage", stage.index())
                        .add("lr", s.lr)
                        .add("grad_norm", s.grad_norm)
                        .add("requests", served));
      const int every = config.train.log_every;
      if (s.step % every == 0 || s.step == 1 || s.step == config.train.steps || !s.applied) {
        std::printf("stage %d step %6lld/%d | lr %.3e | grad_norm %.3f | %lld requests%s\n",
                    stage.index(), static_cast<long long>(s.step), config.train.steps, s.lr,
                    s.grad_norm, static_cast<long long>(served),
                    s.applied ? "" : " | skipped (non-finite)");
        std::fflush(stdout);
      }
    }
    if (stage.steps_done() < config.train.steps || steady_seconds() - looked_at < 0.5) continue;
    looked_at = steady_seconds();
    if (registry.store().get(finished) || registry.stage_peers(0).empty())
      return "finished its " + std::to_string(config.train.steps) + " steps";
  }
}

}  // namespace

void run_swarm_peer(const Config& config, MpiCommunicator& world, const SwarmPeerOptions& options) {
  if (world.size() != 1)
    fail(
        "a swarm peer is one process (swarm.join): start each peer as its own `train`, not "
        "under mpirun -np ",
        world.size());
  const GptShape shape = gpt_shape_of(config.model);
  const Device device = resolve_device(config, shape);
  RunLock lock(config.run_directory());
  claim_run_directory(config, options.overwrite);
  if (!lock.takeover().empty()) std::cout << "note: " << lock.takeover() << std::endl;

  std::unique_ptr<StageRegistry> registry;
  try {
    registry = std::make_unique<StageRegistry>(registry_settings(config));
  } catch (const std::runtime_error& e) {
    fail(e.what());
  }
  const int index = config.swarm.stage >= 0 ? config.swarm.stage : registry->least_served_stage();
  // Peers of one stage would each step on their own rounds: until they average their gradients
  // (the next step of this mode), a stage takes one peer.
  if (const std::vector<SwarmPeerRecord> serving = registry->stage_peers(index); !serving.empty())
    fail("stage ", index, " of swarm '", config.swarm.group, "' already has a peer (peer ",
         serving.front().id, " at ", serving.front().endpoint,
         "): a stage takes one peer for now (swarm.stage)");
  SwarmStage stage(config, index, device, world);
  stage.initialize();
  // The first stage reads the training data; its tokenizer check is the run's.
  std::unique_ptr<TrainingData> data;
  if (stage.first()) {
    data = std::make_unique<TrainingData>(config);
    data->check(config);
  }
  const std::string host = config.swarm.host.empty() ? "127.0.0.1" : config.swarm.host;
  std::unique_ptr<RpcServer> server;
  try {
    server = std::make_unique<RpcServer>("tcp://" + host + ":*", host);
  } catch (const std::runtime_error& e) {
    fail("swarm.host: ", e.what());
  }
  const std::int64_t id = registry->join(index, server->endpoint());

  const std::string run_dir = config.run_directory();
  fs::create_directories(run_dir);
  std::ofstream(fs::path(run_dir) / "config.yaml") << config_to_yaml(config);
  MetricsWriter metrics((fs::path(run_dir) / "metrics.jsonl").string(), -1);
  const ModelPartition p = swarm_stage_partition(config, index);
  std::printf("swarm '%s' (%s): peer %lld serves stage %d of %zu (layers %d-%d%s%s) at %s\n",
              config.swarm.group.c_str(), config.swarm.join.c_str(), static_cast<long long>(id),
              index, config.swarm.stages.size(), p.layer_begin, p.layer_end - 1,
              p.has_embedding ? ", embedding" : "", p.has_head ? ", head" : "",
              server->endpoint().c_str());
  std::fflush(stdout);

  install_stop_signal_handlers();
  std::string why;
  if (stage.first()) {
    SwarmDriver driver(config, stage, *registry, *server, *data, metrics);
    why = driver.run();
    registry->store().set(config.swarm.group + "/finished", store_bytes(why));
  } else {
    why = serve_stage(config, stage, *registry, *server, metrics);
  }
  std::printf("swarm peer %lld: %s\n", static_cast<long long>(id), why.c_str());
  registry->leave(why);
}

}  // namespace strata
