#include "train/swarm/stage_server.h"

#include <csignal>
#include <cstdio>
#include <stdexcept>

#include "parallel/elastic/membership.h"
#include "parallel/swarm/stage_rebalance.h"
#include "parallel/swarm/stochastic_wiring.h"
#include "train/stop_signal.h"
#include "train/swarm/stage_requests.h"

namespace strata {

void report_stage_step(const Config& config, int stage, const StageStep& s, std::int64_t requests,
                       MetricsWriter& metrics) {
  JsonLine line;
  line.add("step", s.step).add("stage", stage);
  if (s.joined) {
    line.add("joined", true);
  } else {
    line.add("lr", s.lr).add("grad_norm", s.grad_norm);
  }
  line.add("held_samples", s.held)
      .add("round_samples", s.samples)
      .add("members", s.members)
      .add("requests", requests)
      .add("weights_sum", s.weights_sum);
  metrics.write(line);
  if (s.joined) {
    std::printf("stage %d: joined at step %lld, taking the stage's state\n", stage,
                static_cast<long long>(s.step));
  } else if (s.step % config.train.log_every == 0 || s.step == 1 || s.step == config.train.steps ||
             !s.applied || s.samples != swarm_target_batch(config)) {
    std::printf(
        "stage %d step %6lld/%d | lr %.3e | grad_norm %.3f | %d of %d samples here, %d peers | "
        "%lld requests%s\n",
        stage, static_cast<long long>(s.step), config.train.steps, s.lr, s.grad_norm, s.held,
        s.samples, s.members, static_cast<long long>(requests),
        s.applied ? "" : " | skipped (non-finite or no samples)");
  }
  std::fflush(stdout);
}

StageServer::StageServer(const Config& config, SwarmStage& stage, StageRounds& rounds,
                         RpcServer& server, StageRegistry& registry, SwarmProgress& progress,
                         MetricsWriter& metrics, StageCheckpoints& checkpoints,
                         const TestHooks& hooks)
    : config_(config),
      stage_(stage),
      rounds_(rounds),
      server_(server),
      registry_(registry),
      progress_(progress),
      metrics_(metrics),
      checkpoints_(checkpoints),
      hooks_(hooks) {}

void StageServer::finish_round() {
  const StageStep s = rounds_.finish(stage_);
  report_stage_step(config_, stage_.index(), s, requests_, metrics_);
  checkpoints_.after_step(stage_, s);
  consider_moving();
}

void StageServer::consider_moving() {
  const double every = config_.swarm.rebalance_every;
  if (every <= 0 || moving_to_ >= 0 || steady_seconds() - looked_at_ < every) return;
  const std::vector<SwarmPeerRecord> peers = registry_.live_peers();
  const int stages = stage_.stages();
  const std::vector<StageLoad> loads = stage_loads(peers, stages);
  const std::optional<StageMove> move = choose_stage_move(peers, stages, 1);
  const bool mine = move && move->peer == registry_.id();
  // A peer that holds part of a round moves at the round's end (it looks again then), unless its
  // destination has no peer at all: then the gradients it holds are lost as a dead peer's are.
  if (mine && rounds_.held() > 0 && loads[static_cast<std::size_t>(move->to)].peers > 0) return;
  looked_at_ = steady_seconds();
  std::vector<double> counts, rates;
  for (const StageLoad& load : loads) {
    counts.push_back(load.peers);
    rates.push_back(load.samples_per_second);
  }
  const std::int64_t moves = registry_.store().add(config_.swarm.group + "/moves", mine ? 1 : 0);
  metrics_.write(JsonLine()
                     .add("step", stage_.steps_done())
                     .add("swarm", true)
                     .add("stage_peers", counts)
                     .add("stage_samples_per_s", rates)
                     .add("moves", moves));
  if (!mine) return;
  moving_to_ = move->to;
  // Off the stage first: the drivers stop choosing it once they look again.
  registry_.move(-1);
  std::printf(
      "swarm peer %lld moves from stage %d (%.0f samples/s with %d peers) to stage %d "
      "(%.0f samples/s, the bottleneck)\n",
      static_cast<long long>(registry_.id()), move->from,
      loads[static_cast<std::size_t>(move->from)].samples_per_second,
      loads[static_cast<std::size_t>(move->from)].peers, move->to,
      loads[static_cast<std::size_t>(move->to)].samples_per_second);
  std::fflush(stdout);
}

void StageServer::measure(const std::string& method, int batch, double seconds) {
  // Units as the wiring counts them: a forward 1 per sample, a backward (with its recomputed
  // forward) backward_cost more; a training sample is a forward and a backward here, the loss
  // alone on the last stage.
  const double backward = WiringSettings().backward_cost;
  const bool trains = method == swarm::kBackward || method == swarm::kLoss;
  busy_units_ += batch * (trains ? 1 + backward : 1.0);
  busy_seconds_ += seconds;
  const double now = steady_seconds();
  // The first measurement at once (a stage is not judged before one), then about once a second.
  if ((published_ && now - published_at_ < 1.0) || busy_seconds_ <= 0) return;
  published_ = true;
  const double per_sample = stage_.last() ? 1 + backward : 2 + backward;
  registry_.publish_speed(busy_units_ / busy_seconds_ / per_sample);
  published_at_ = now;
  busy_units_ = busy_seconds_ = 0;
}

RpcMessage StageServer::handle(const RpcMessage& message) {
  const swarm::StageRequest r =
      swarm::read_stage_request(message, stage_.boundary_floats(1), config_.model.seq_len);
  const auto decline = [&](const std::string& why) {
    return std::runtime_error(swarm::kDeclined + why);
  };
  if (r.stage != stage_.index())
    throw decline("this peer serves stage " + std::to_string(stage_.index()) + ", not " +
                  std::to_string(r.stage));
  if (moving_to_ >= 0) throw decline("moving to stage " + std::to_string(moving_to_));
  const bool for_last = r.method == swarm::kLoss || r.method == swarm::kEvaluate;
  if (for_last != stage_.last())
    throw std::runtime_error("swarm request '" + r.method + "' sent to stage " +
                             std::to_string(stage_.index()) + " of " +
                             std::to_string(stage_.stages()));
  requests_ += 1;
  const double began = steady_seconds();
  // A round the other peers filled is averaged before serving on its weights (and this peer may
  // then move: the request goes to another).
  if (r.method == swarm::kForward || r.method == swarm::kEvaluate)
    if (rounds_.full()) finish_round();
  if (moving_to_ >= 0) throw decline("moving to stage " + std::to_string(moving_to_));
  RpcMessage reply;
  if (r.method == swarm::kForward) {
    reply = swarm::stage_reply(stage_.forward(nullptr, r.input.data(), r.batch), r.compression);
  } else if (r.method == swarm::kEvaluate) {
    reply = swarm::stage_reply(
        {}, r.compression, stage_.loss(r.input.data(), r.targets.data(), r.batch, nullptr, false));
  } else {
    // A backward: counted once into the stage's rounds, after the round it would overflow.
    StageRounds::Claim claim;
    while ((claim = rounds_.claim(r.micro_batch, r.batch)) == StageRounds::Claim::full) {
      finish_round();
      if (moving_to_ >= 0) throw decline("moving to stage " + std::to_string(moving_to_));
    }
    const bool add = claim == StageRounds::Claim::add;
    if (r.method == swarm::kBackward) {
      reply = swarm::stage_reply(
          stage_.backward(nullptr, r.input.data(), r.output_grad.data(), r.batch, add),
          r.compression);
    } else {
      std::vector<float> input_grad;
      const double sum = stage_.loss(r.input.data(), r.targets.data(), r.batch, &input_grad, add);
      reply = swarm::stage_reply(input_grad, r.compression, sum);
    }
  }
  // The test hooks: a request lasts at least step_seconds (a slow peer whatever the machine's
  // load); the work done, the reply never sent.
  if (const double left = hooks_.step_seconds - (steady_seconds() - began); left > 0)
    sleep_seconds(left);
  if (hooks_.kill_in_request == requests_) std::raise(SIGKILL);
  measure(r.method, r.batch, steady_seconds() - began);
  return reply;
}

ServeEnd StageServer::run() {
  const auto handler = [this](const RpcMessage& m) { return handle(m); };
  double looked_at = steady_seconds();
  looked_at_ = published_at_ = steady_seconds();
  while (true) {
    if (moving_to_ >= 0) return {"moves to stage " + std::to_string(moving_to_), moving_to_};
    if (stop_requested())
      return {"stopped by signal at step " + std::to_string(stage_.steps_done())};
    const bool served = server_.serve_one(0.02, handler);
    // Others' requests may have filled the round: look now and then, not per request.
    if (!served && steady_seconds() - looked_at < 0.05) continue;
    looked_at = steady_seconds();
    if (rounds_.full()) {
      finish_round();
      continue;
    }
    // Idle: a look at the stages may be due (a stage that lost its last peer stops the rounds).
    if (!served) consider_moving();
    if (!progress_.drained()) continue;
    // The data has come through: a last round that holds samples (a peer lost some) is averaged
    // over what it has; the drivers' last evaluation still passes through.
    if (rounds_.pending()) finish_round();
    if (!registry_.stage_peers(0).empty()) continue;
    return {"done at step " + std::to_string(stage_.steps_done()) + " (the swarm's data has " +
            "come through and its drivers have left)"};
  }
}

}  // namespace strata
