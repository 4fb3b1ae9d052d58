#include "train/swarm/swarm_driver.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "data/loader.h"
#include "model/core/error.h"
#include "parallel/elastic/membership.h"
#include "train/evaluate.h"
#include "train/stop_signal.h"
#include "train/swarm/stage_requests.h"
#include "train/swarm/stage_server.h"

namespace strata {

namespace {

// How often the driver reads the stages' peers from the store when nothing failed.
constexpr double kRefreshSeconds = 1.0;

WiringSettings wiring_settings(const Config& config) {
  WiringSettings s;
  s.routing = config.swarm.routing;
  s.ban_s = config.swarm.timeout;
  return s;
}

}  // namespace

SwarmDriver::SwarmDriver(const Config& config, SwarmStage& stage, StageRounds& rounds,
                         StageRegistry& registry, RpcServer& server, SwarmProgress& progress,
                         const TrainingData& data, MetricsWriter& metrics,
                         StageCheckpoints& checkpoints)
    : config_(config),
      stage_(stage),
      rounds_(rounds),
      registry_(registry),
      server_(server),
      progress_(progress),
      data_(data),
      metrics_(metrics),
      checkpoints_(checkpoints),
      wiring_(static_cast<std::size_t>(stage.stages()), StageWiring(wiring_settings(config))),
      sequence_(static_cast<std::size_t>(stage.stages()), 0) {}

void SwarmDriver::refresh_peers(int stage) {
  std::vector<std::int64_t> ids;
  for (const SwarmPeerRecord& p : registry_.stage_peers(stage)) {
    ids.push_back(p.id);
    endpoints_[p.id] = p.endpoint;
  }
  wiring_.at(static_cast<std::size_t>(stage)).set_peers(ids);
}

RpcMessage SwarmDriver::call(int stage, StageWork work, int samples, const RpcMessage& request) {
  StageWiring& wiring = wiring_.at(static_cast<std::size_t>(stage));
  const std::int64_t sequence = sequence_.at(static_cast<std::size_t>(stage))++;
  std::vector<std::int64_t> tried;
  double waiting_since = -1;
  while (true) {
    const double now = steady_seconds();
    const std::optional<WiringChoice> choice = wiring.choose(work, samples, sequence, tried, now);
    if (!choice) {
      // Every known peer failed or was tried: look again in the store, waiting for one.
      refresh_peers(stage);
      tried.clear();
      if (wiring.peers().empty() || waiting_since >= 0) {
        if (waiting_since < 0) {
          waiting_since = now;
          std::printf("swarm: stage %d has no live peer; the pipeline waits for one to join\n",
                      stage);
          std::fflush(stdout);
        }
        if (stop_requested()) throw std::runtime_error("stopped by signal");
        sleep_seconds(0.2);
      }
      continue;
    }
    if (waiting_since >= 0) {
      std::printf("swarm: stage %d has a peer again after %.1f s\n", stage, now - waiting_since);
      std::fflush(stdout);
      waiting_since = -1;
    }
    const double start = steady_seconds();
    const std::string& endpoint = endpoints_.at(choice->peer);
    std::optional<RpcMessage> reply;
    std::string declined;
    try {
      reply = client_.call(endpoint, request, config_.swarm.request_timeout);
    } catch (const RpcError& e) {
      // A peer that moved to another stage (or is moving) declines; any other error is a bug.
      const std::string what = e.what();
      const std::size_t at = what.find(swarm::kDeclined);
      if (at == std::string::npos) throw;
      declined = what.substr(at + std::string(swarm::kDeclined).size());
    }
    if (reply) {
      wiring.finished(*choice, steady_seconds() - start);
      return std::move(*reply);
    }
    if (!declined.empty())
      std::printf("swarm: peer %lld of stage %d declined '%s' (%s); sending it to another\n",
                  static_cast<long long>(choice->peer), stage, request.method.c_str(),
                  declined.c_str());
    else
      std::printf(
          "swarm: peer %lld of stage %d did not answer '%s' within %g s; sending it to "
          "another\n",
          static_cast<long long>(choice->peer), stage, request.method.c_str(),
          config_.swarm.request_timeout);
    std::fflush(stdout);
    wiring.failed(*choice, steady_seconds());
    client_.disconnect(endpoint);
    tried.push_back(choice->peer);
  }
}

std::vector<std::vector<float>> SwarmDriver::forward_through(std::vector<float> first_output,
                                                             int batch, std::int64_t g) {
  const int S = stage_.stages();
  const SwarmCompression q = config_.swarm.compression;
  std::vector<std::vector<float>> inputs;  // inputs[k − 1]: stage k's input
  inputs.push_back(std::move(first_output));
  for (int k = 1; k < S - 1; ++k) {
    const RpcMessage reply =
        call(k, StageWork::forward, batch,
             swarm::stage_request(swarm::kForward, k, batch, g, q, inputs.back()));
    inputs.push_back(swarm::reply_floats(reply, stage_.boundary_floats(batch)));
  }
  return inputs;
}

double SwarmDriver::train_micro_batch(std::int64_t g) {
  const int B = config_.train.micro_batch, T = config_.model.seq_len, S = stage_.stages();
  const SwarmCompression q = config_.swarm.compression;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * T), targets(tokens.size());
  for (int b = 0; b < B; ++b)
    data_.sample(static_cast<std::uint64_t>(g * B + b), tokens.data() + b * T,
                 targets.data() + b * T);
  const std::vector<std::vector<float>> inputs =
      forward_through(stage_.forward(tokens.data(), nullptr, B), B, g);
  const RpcMessage last =
      call(S - 1, StageWork::backward, B,
           swarm::stage_request(swarm::kLoss, S - 1, B, g, q, inputs.back(), {}, targets));
  const double loss_sum = swarm::reply_loss_sum(last);
  std::vector<float> grad = swarm::reply_floats(last, stage_.boundary_floats(B));
  for (int k = S - 2; k >= 1; --k) {
    const RpcMessage reply =
        call(k, StageWork::backward, B,
             swarm::stage_request(swarm::kBackward, k, B, g, q,
                                  inputs.at(static_cast<std::size_t>(k - 1)), grad));
    grad = swarm::reply_floats(reply, stage_.boundary_floats(B));
  }
  // The first stage's own backward, counted into its rounds as a server counts its.
  StageRounds::Claim claim;
  while ((claim = rounds_.claim(g, B)) == StageRounds::Claim::full) finish_round();
  stage_.backward(tokens.data(), nullptr, grad.data(), B, claim == StageRounds::Claim::add);
  return loss_sum;
}

std::int64_t SwarmDriver::sent_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [method, traffic] : client_.traffic())
    bytes += traffic.request_bytes + traffic.reply_bytes;
  return bytes;
}

std::int64_t SwarmDriver::training_bytes() const { return sent_bytes() - evaluation_bytes_; }

double SwarmDriver::split_loss(const TokenSource& split) {
  const int T = config_.model.seq_len, S = stage_.stages();
  const SwarmCompression q = config_.swarm.compression;
  double sum = 0;
  std::int64_t count = 0;
  for (const std::vector<std::uint64_t>& windows :
       eval_batches(split, config_.train.eval_tokens, T, config_.train.micro_batch, 0, 1)) {
    const int B = static_cast<int>(windows.size());
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * T), targets(tokens.size());
    for (int b = 0; b < B; ++b)
      eval_window(split, windows[static_cast<std::size_t>(b)], T, tokens.data() + b * T,
                  targets.data() + b * T);
    const std::vector<std::vector<float>> inputs =
        forward_through(stage_.forward(tokens.data(), nullptr, B), B, -1);
    const RpcMessage last =
        call(S - 1, StageWork::forward, B,
             swarm::stage_request(swarm::kEvaluate, S - 1, B, -1, q, inputs.back(), {}, targets));
    sum += swarm::reply_loss_sum(last);
    count += static_cast<std::int64_t>(B) * T;
  }
  if (count == 0) fail("the validation split has too few tokens for one window of ", T + 1);
  return sum / static_cast<double>(count);
}

double SwarmDriver::validation_loss() {
  const std::int64_t before = sent_bytes();
  double loss = 0;
  if (data_.val()) {
    loss = split_loss(*data_.val());
  } else {
    const std::vector<double> weights = data_.evaluation_weights();
    for (std::size_t i = 0; i < data_.sources().size(); ++i)
      if (weights[i] > 0) loss += weights[i] * split_loss(*data_.sources()[i].val);
  }
  evaluation_bytes_ += sent_bytes() - before;
  return loss;
}

void SwarmDriver::finish_round() {
  using Clock = std::chrono::steady_clock;
  const int B = config_.train.micro_batch, T = config_.model.seq_len;
  const int steps = config_.train.steps;
  const StageStep s = rounds_.finish(stage_);
  checkpoints_.after_step(stage_, s);
  if (s.joined) {
    report_stage_step(config_, 0, s, 0, metrics_);
    return;
  }
  const double step_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - round_start_).count();
  const double tokens = static_cast<double>(round_batches_) * B * T;
  const double loss = round_batches_ > 0 ? round_loss_ / tokens : 0.0;
  const double tokens_per_s = tokens / (step_ms / 1e3);
  metrics_.write(JsonLine()
                     .add("step", s.step)
                     .add("loss", loss)
                     .add("lr", s.lr)
                     .add("grad_norm", s.grad_norm)
                     .add("tokens_per_s", tokens_per_s)
                     .add("step_ms", step_ms)
                     .add("held_samples", s.held)
                     .add("round_samples", s.samples)
                     .add("members", s.members)
                     .add("weights_sum", s.weights_sum)
                     .add("boundary_bytes", training_bytes()));
  if (s.step % config_.train.log_every == 0 || s.step == 1 || s.step == steps || !s.applied ||
      s.samples != swarm_target_batch(config_)) {
    std::printf(
        "step %6lld/%d | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | %.1f ms | %d of %d "
        "samples here, %d drivers%s\n",
        static_cast<long long>(s.step), steps, loss, s.lr, s.grad_norm, tokens_per_s, step_ms,
        s.held, s.samples, s.members, s.applied ? "" : " | skipped (non-finite or no samples)");
    std::fflush(stdout);
  }
  // As the trainer: every eval_every steps and after the last.
  const int every = config_.train.eval_every;
  if (data_.evaluates() && (s.step == steps || (every > 0 && s.step % every == 0))) {
    const double val_loss = validation_loss();
    metrics_.write(JsonLine().add("step", s.step).add("val_loss", val_loss));
    std::printf("eval step %lld | val_loss %.4f\n", static_cast<long long>(s.step), val_loss);
    std::fflush(stdout);
  }
  round_loss_ = 0;
  round_batches_ = 0;
  round_start_ = Clock::now();
}

std::string SwarmDriver::run() {
  for (int k = 1; k < stage_.stages(); ++k) refresh_peers(k);
  refreshed_at_ = steady_seconds();
  round_start_ = std::chrono::steady_clock::now();
  const auto handler = [](const RpcMessage&) -> RpcMessage {
    throw std::runtime_error("the first stage takes no requests (it drives)");
  };
  while (const std::optional<std::int64_t> g = progress_.take()) {
    if (stop_requested()) return "stopped by signal at step " + std::to_string(stage_.steps_done());
    server_.serve_one(0, handler);
    if (steady_seconds() - refreshed_at_ > kRefreshSeconds) {
      for (int k = 1; k < stage_.stages(); ++k) refresh_peers(k);
      refreshed_at_ = steady_seconds();
    }
    round_loss_ += train_micro_batch(*g);
    round_batches_ += 1;
    progress_.completed_one();
    if (rounds_.full()) finish_round();
  }
  // Every micro-batch is taken: the other drivers' last ones come through, then a last round
  // that holds samples (a peer lost some) is averaged over what it has.
  while (!progress_.drained()) {
    if (stop_requested()) return "stopped by signal at step " + std::to_string(stage_.steps_done());
    if (rounds_.full()) finish_round();
    sleep_seconds(0.05);
  }
  if (rounds_.full() || rounds_.pending()) finish_round();
  return "done at step " + std::to_string(stage_.steps_done()) +
         " (the swarm's data has come through)";
}

}  // namespace strata
