#include "train/swarm/stage_rounds.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <exception>
#include <vector>

#include "model/core/error.h"
#include "parallel/elastic/gloo_communicator.h"
#include "parallel/elastic/signed_store.h"

namespace strata {

namespace {

// The stage's averaging group as an elastic DiLoCo group's settings: the swarm's store, a group
// per stage, swarm.stage_peers slots.
Config stage_group_config(const Config& config, int stage) {
  Config c = config;
  c.diloco.enabled = true;
  c.diloco.join = config.swarm.join;
  c.diloco.group = config.swarm.group + "/stage" + std::to_string(stage);
  c.diloco.workers = config.swarm.stage_peers;
  c.diloco.slot = -1;
  c.diloco.min_workers = 1;
  c.diloco.timeout = config.swarm.timeout;
  c.diloco.interface = config.swarm.interface;
  c.diloco.secret_file = config.swarm.secret_file;
  return c;
}

}  // namespace

StageRounds::StageRounds(const Config& config, int stage, MpiCommunicator& world,
                         const TestHooks& hooks, std::shared_ptr<const SharedSecret> secret)
    : config_(config),
      stage_index_(stage),
      hooks_(hooks),
      prefix_(config.swarm.group + "/stage" + std::to_string(stage) + "/"),
      group_config_(stage_group_config(config, stage)) {
  group_ = std::make_unique<ElasticWorker>(group_config_, MeshShape{}, world);
  store_ = open_group_store(config.swarm.join, std::move(secret), config.swarm.timeout);
}

StageRounds::~StageRounds() = default;

std::string StageRounds::start(SwarmStage& stage, bool resumed) {
  if (!resumed) stage.initialize();
  const std::optional<std::int64_t> newest = group_->newest_sync();
  if (!newest) {
    // Its rounds are numbered by the stage's steps, from those it resumed at.
    round_ = stage.steps_done();
    if (resumed) return "goes on from its checkpoint at step " + std::to_string(round_);
    return "a fresh stage: starts from the run's seed";
  }
  // The stage has averaged rounds 0 … newest: this peer joins at the end of the next.
  round_ = *newest + 1;
  joining_ = true;
  const StageStep joined = finish(stage);
  return "joined at round " + std::to_string(joined.step) + ": took the stage's state";
}

StageRounds::Claim StageRounds::claim(std::int64_t micro_batch, int samples) {
  const std::string claim = key("mb/" + std::to_string(micro_batch));
  if (!store_->create(claim, store_bytes(std::to_string(round_)))) return Claim::duplicate;
  // Atomic: of concurrent claims exactly those that fit the target get in (every micro-batch has
  // micro_batch samples and the target is a multiple of it, so none straddles the target).
  const std::int64_t total =
      store_->add(key("round/" + std::to_string(round_) + "/samples"), samples);
  if (total - samples >= swarm_target_batch(config_)) {
    // The round filled before: the claim is the next round's, made again after the averaging.
    store_->remove(claim);
    return Claim::full;
  }
  held_ += samples;
  return Claim::add;
}

bool StageRounds::full() {
  return store_->add(key("round/" + std::to_string(round_) + "/samples"), 0) >=
         swarm_target_batch(config_);
}

bool StageRounds::pending() {
  return store_->add(key("round/" + std::to_string(round_) + "/samples"), 0) > 0;
}

StageStep StageRounds::finish(SwarmStage& stage) {
  TrainingBackend& backend = stage.backend();
  const std::size_t n = backend.plan().gradient_range.size();
  for (int attempt = 0;; ++attempt) {
    const SyncMembers m = group_->sync(round_, round_ - 1, joining_, attempt);
    const int me = m.index_of(m.own_slot);
    if (me < 0) {
      // Left out (it arrived after the decision): its round is lost with the others' next; it
      // joins the next round and takes the state then.
      backend.zero_gradients();
      held_ = 0;
      round_ += 1;
      joining_ = true;
      attempt = -1;
      continue;
    }
    // [gradients | held samples], a joiner's zeros.
    std::vector<float> sums(n + 1, 0.0f);
    if (!joining_) {
      backend.copy_gradients(sums.data());
      sums[n] = static_cast<float>(held_);
    }
    bool averaged = group_->connected();
    if (averaged) {
      try {
        Communicator& gloo = group_->outer();
        // Two pieces, so that the test hook can die between them with the others holding half.
        const std::size_t half = (n + 1) / 2;
        gloo.all_reduce_sum(sums.data(), half);
        if (hooks_.kill_in_averaging == stage.steps_done() + 1) std::raise(SIGKILL);
        gloo.all_reduce_sum(sums.data() + half, n + 1 - half);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "warning: stage %d's averaging of round %lld failed (%s)\n",
                     stage_index_, static_cast<long long>(round_), e.what());
        averaged = false;
      }
    }
    const ElasticGroup::Outcome outcome = group_->settle(m, averaged);
    if (outcome == ElasticGroup::Outcome::retry) continue;
    const int samples = static_cast<int>(sums[n]);
    StageStep s;
    if (!joining_ && samples > 0) {
      backend.set_gradients(sums.data());
      s = stage.step(static_cast<double>(swarm_target_batch(config_)) / samples);
    } else if (!joining_) {
      // Every contributor's gradients died with it: nothing to apply.
      backend.zero_gradients();
      s.step = stage.steps_done();
    }
    // A joiner takes the state the round's step made.
    if (std::find(m.joining.begin(), m.joining.end(), true) != m.joining.end()) hand_over(stage, m);
    if (joining_) {
      s.joined = true;
      s.step = stage.steps_done();
    }
    s.held = held_;
    s.samples = samples;
    s.weights_sum = stage.weights_sum();
    s.members = static_cast<int>(m.slots.size());
    joining_ = false;
    held_ = 0;
    round_ += 1;
    return s;
  }
}

void StageRounds::hand_over(SwarmStage& stage, const SyncMembers& m) {
  // The first contributor gives; every joiner takes. Everyone of the group calls the broadcasts.
  int donor = -1;
  for (std::size_t i = 0; i < m.slots.size() && donor < 0; ++i)
    if (!m.joining[i]) donor = static_cast<int>(i);
  if (donor < 0) {
    // The stage has made round_ steps: its schedule goes on from there (a resumed peer's own
    // counts stand).
    if (stage.steps_done() < round_) stage.set_counts(round_, round_);
    std::printf(
        "swarm: no peer of stage %d held its state (every earlier one has left): this "
        "peer goes on from its own weights, at the stage's step %lld\n",
        stage_index_, static_cast<long long>(stage.steps_done()));
    return;
  }
  Communicator& gloo = group_->outer();
  std::vector<StateBuffer> state = stage.backend().state();
  for (StateBuffer& b : state) gloo.broadcast(std::span<float>(b.values), donor);
  std::int64_t counts[2] = {stage.steps_done(), stage.optimizer_steps()};
  gloo.broadcast(counts, sizeof counts, donor);
  if (joining_) {
    stage.backend().set_state(state);
    stage.set_counts(counts[0], counts[1]);
  }
}

}  // namespace strata
