#include "train/swarm/stage_server.h"

#include <csignal>
#include <cstdio>
#include <stdexcept>

#include "parallel/elastic/membership.h"
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
}

RpcMessage StageServer::handle(const RpcMessage& message) {
  const swarm::StageRequest r =
      swarm::read_stage_request(message, stage_.boundary_floats(1), config_.model.seq_len);
  const bool for_last = r.method == swarm::kLoss || r.method == swarm::kEvaluate;
  if (for_last != stage_.last())
    throw std::runtime_error("swarm request '" + r.method + "' sent to stage " +
                             std::to_string(stage_.index()) + " of " +
                             std::to_string(stage_.stages()));
  requests_ += 1;
  const double began = steady_seconds();
  // A round the other peers filled is averaged before serving on its weights.
  if (r.method == swarm::kForward || r.method == swarm::kEvaluate)
    if (rounds_.full()) finish_round();
  RpcMessage reply;
  if (r.method == swarm::kForward) {
    reply = swarm::stage_reply(stage_.forward(nullptr, r.input.data(), r.batch), r.compression);
  } else if (r.method == swarm::kEvaluate) {
    reply = swarm::stage_reply(
        {}, r.compression, stage_.loss(r.input.data(), r.targets.data(), r.batch, nullptr, false));
  } else {
    // A backward: counted once into the stage's rounds, after the round it would overflow.
    StageRounds::Claim claim;
    while ((claim = rounds_.claim(r.micro_batch, r.batch)) == StageRounds::Claim::full)
      finish_round();
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
  return reply;
}

std::string StageServer::run() {
  const auto handler = [this](const RpcMessage& m) { return handle(m); };
  double looked_at = steady_seconds();
  while (true) {
    if (stop_requested()) return "stopped by signal at step " + std::to_string(stage_.steps_done());
    const bool served = server_.serve_one(0.02, handler);
    // Others' requests may have filled the round: look now and then, not per request.
    if (!served && steady_seconds() - looked_at < 0.05) continue;
    looked_at = steady_seconds();
    if (rounds_.full()) {
      finish_round();
      continue;
    }
    if (!progress_.drained()) continue;
    // The data has come through: a last round that holds samples (a peer lost some) is averaged
    // over what it has; the drivers' last evaluation still passes through.
    if (rounds_.pending()) finish_round();
    if (!registry_.stage_peers(0).empty()) continue;
    return "done at step " + std::to_string(stage_.steps_done()) + " (the swarm's data has " +
           "come through and its drivers have left)";
  }
}

}  // namespace strata
