#include "train/swarm/swarm_driver.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <stdexcept>
#include <thread>

#include "data/loader.h"
#include "model/core/error.h"
#include "parallel/elastic/membership.h"
#include "train/evaluate.h"
#include "train/stop_signal.h"
#include "train/swarm/stage_requests.h"
#include "train/swarm/stage_server.h"

namespace strata {

SwarmDriver::SwarmDriver(const Config& config, SwarmStage& stage, StageRounds& rounds,
                         StageRegistry& registry, RpcServer& server, SwarmProgress& progress,
                         const TrainingData& data, MetricsWriter& metrics,
                         StageCheckpoints& checkpoints)
    : config_(config),
      stage_(stage),
      rounds_(rounds),
      server_(server),
      progress_(progress),
      data_(data),
      metrics_(metrics),
      checkpoints_(checkpoints),
      router_(config, registry, stage.stages()) {}

std::vector<std::vector<float>> SwarmDriver::forward_through(std::vector<float> first_output,
                                                             int batch, std::int64_t g,
                                                             RpcClient& client) {
  const int S = stage_.stages();
  const SwarmCompression q = config_.swarm.compression;
  std::vector<std::vector<float>> inputs;  // inputs[k − 1]: stage k's input
  inputs.push_back(std::move(first_output));
  for (int k = 1; k < S - 1; ++k) {
    const RpcMessage reply = router_.call(
        k, StageWork::forward, batch,
        swarm::stage_request(swarm::kForward, k, batch, g, q, inputs.back()), client, g < 0);
    inputs.push_back(swarm::reply_floats(reply, stage_.boundary_floats(batch)));
  }
  return inputs;
}

bool SwarmDriver::train_micro_batch(RpcClient& client) {
  const int B = config_.train.micro_batch, T = config_.model.seq_len, S = stage_.stages();
  const SwarmCompression q = config_.swarm.compression;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * T), targets(tokens.size());
  std::int64_t g = 0;
  std::vector<float> first_output;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const std::optional<std::int64_t> taken = progress_.take();
    if (!taken) return false;
    g = *taken;
    for (int b = 0; b < B; ++b)
      data_.sample(static_cast<std::uint64_t>(g * B + b), tokens.data() + b * T,
                   targets.data() + b * T);
    first_output = stage_.forward(tokens.data(), nullptr, B);
  }
  // The other stages, without the lock: other lanes' micro-batches are in flight meanwhile.
  const std::vector<std::vector<float>> inputs =
      forward_through(std::move(first_output), B, g, client);
  const RpcMessage last = router_.call(
      S - 1, StageWork::backward, B,
      swarm::stage_request(swarm::kLoss, S - 1, B, g, q, inputs.back(), {}, targets), client);
  const double loss_sum = swarm::reply_loss_sum(last);
  std::vector<float> grad = swarm::reply_floats(last, stage_.boundary_floats(B));
  for (int k = S - 2; k >= 1; --k) {
    const RpcMessage reply =
        router_.call(k, StageWork::backward, B,
                     swarm::stage_request(swarm::kBackward, k, B, g, q,
                                          inputs.at(static_cast<std::size_t>(k - 1)), grad),
                     client);
    grad = swarm::reply_floats(reply, stage_.boundary_floats(B));
  }
  // The first stage's own backward, counted into its rounds as a server counts its.
  const std::lock_guard<std::mutex> lock(mutex_);
  StageRounds::Claim claim;
  while ((claim = rounds_.claim(g, B)) == StageRounds::Claim::full) finish_round(client);
  stage_.backward(tokens.data(), nullptr, grad.data(), B, claim == StageRounds::Claim::add);
  round_loss_ += loss_sum;
  round_batches_ += 1;
  progress_.completed_one();
  if (rounds_.full()) finish_round(client);
  return true;
}

double SwarmDriver::split_loss(const TokenSource& split, RpcClient& client) {
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
        forward_through(stage_.forward(tokens.data(), nullptr, B), B, -1, client);
    const RpcMessage last = router_.call(
        S - 1, StageWork::forward, B,
        swarm::stage_request(swarm::kEvaluate, S - 1, B, -1, q, inputs.back(), {}, targets), client,
        true);
    sum += swarm::reply_loss_sum(last);
    count += static_cast<std::int64_t>(B) * T;
  }
  if (count == 0) fail("the validation split has too few tokens for one window of ", T + 1);
  return sum / static_cast<double>(count);
}

double SwarmDriver::validation_loss(RpcClient& client) {
  if (data_.val()) return split_loss(*data_.val(), client);
  const std::vector<double> weights = data_.evaluation_weights();
  double loss = 0;
  for (std::size_t i = 0; i < data_.sources().size(); ++i)
    if (weights[i] > 0) loss += weights[i] * split_loss(*data_.sources()[i].val, client);
  return loss;
}

void SwarmDriver::finish_round(RpcClient& client) {
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
                     .add("boundary_bytes", router_.training_bytes()));
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
    const double val_loss = validation_loss(client);
    metrics_.write(JsonLine().add("step", s.step).add("val_loss", val_loss));
    std::printf("eval step %lld | val_loss %.4f\n", static_cast<long long>(s.step), val_loss);
    std::fflush(stdout);
  }
  round_loss_ = 0;
  round_batches_ = 0;
  round_start_ = Clock::now();
}

void SwarmDriver::lane(RpcClient& client) {
  try {
    while (!stopping_ && !stop_requested()) {
      {
        // This peer's own server takes no requests; it answers any with an error at once.
        const std::lock_guard<std::mutex> lock(mutex_);
        server_.serve_one(0, [](const RpcMessage&) -> RpcMessage {
          throw std::runtime_error("the first stage takes no requests (it drives)");
        });
      }
      if (!train_micro_batch(client)) return;
    }
  } catch (...) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_) failure_ = std::current_exception();
    stopping_ = true;
  }
}

std::string SwarmDriver::run() {
  round_start_ = std::chrono::steady_clock::now();
  // swarm.in_flight lanes, each a micro-batch at a time: the first on this thread.
  const int lanes = config_.swarm.in_flight;
  std::deque<RpcClient> clients;  // not movable: a deque makes them in place
  for (int i = 0; i < lanes; ++i) clients.emplace_back(server_.secret());
  std::vector<std::thread> threads;
  for (int i = 1; i < lanes; ++i)
    threads.emplace_back([this, &clients, i] { lane(clients[static_cast<std::size_t>(i)]); });
  lane(clients[0]);
  for (std::thread& t : threads) t.join();
  if (failure_) std::rethrow_exception(failure_);
  const auto stopped = [&] {
    return "stopped by signal at step " + std::to_string(stage_.steps_done());
  };
  if (stop_requested()) return stopped();
  // Every micro-batch is taken: the other drivers' last ones come through, then a last round
  // that holds samples (a peer lost some) is averaged over what it has.
  while (!progress_.drained()) {
    if (stop_requested()) return stopped();
    if (rounds_.full()) finish_round(clients[0]);
    sleep_seconds(0.05);
  }
  if (rounds_.full() || rounds_.pending()) finish_round(clients[0]);
  return "done at step " + std::to_string(stage_.steps_done()) +
         " (the swarm's data has come through)";
}

}  // namespace strata
