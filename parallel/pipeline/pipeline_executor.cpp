#include "parallel/pipeline/pipeline_executor.h"

#include <chrono>

#include "model/core/error.h"

namespace strata {

PipelineExecutor::PipelineExecutor(PipelineStage& stage, Communicator& pp,
                                   const PipelineProgram& program, int B, int T,
                                   bool nonblocking_sends)
    : stage_(stage),
      pp_(pp),
      ops_(program.at(static_cast<std::size_t>(pp.rank()))),
      B_(B),
      T_(T),
      tokens_(static_cast<std::size_t>(B) * T),
      targets_(tokens_.size()),
      nonblocking_sends_(nonblocking_sends) {
  for (int slot = stage.slots() - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  // Chunks exist as data (pipeline_schedule.h) but this interpreter keeps one chunk's buffers
  // per micro-batch.
  for (const PipelineOp& op : ops_)
    if (op.chunk != 0)
      fail("pipeline stage ", pp.rank(),
           ": the executor runs programs of one chunk per rank (gpipe, 1f1b, zb-h1, zb-h2), not ",
           to_string(op));
}

std::vector<float>& PipelineExecutor::buffer(std::map<int, std::vector<float>>& buffers, int mb,
                                             int batch) {
  std::vector<float>& b = buffers[mb];
  b.resize(stage_.boundary_size(batch));
  return b;
}

namespace {
// The tag of a queued message: its micro-batch and channel (chunks: one per rank so far).
int message_tag(int mb, bool gradient) { return 2 * mb + (gradient ? 1 : 0); }
}  // namespace

void PipelineExecutor::send(std::map<int, std::vector<float>>& buffers, int mb, int peer,
                            bool gradient) {
  const auto it = buffers.find(mb);
  STRATA_CHECK(it != buffers.end(), "stage ", stage(), ": send of micro-batch ", mb,
               " before it was computed");
  if (nonblocking_sends_) {
    InFlight sent{std::move(it->second), nullptr};  // the moved vector keeps its storage
    sent.send = pp_.start_send(sent.data.data(), sent.data.size(), peer, message_tag(mb, gradient));
    in_flight_.push_back(std::move(sent));
  } else {
    pp_.send(it->second.data(), it->second.size(), peer);
  }
  buffers.erase(it);
}

void PipelineExecutor::receive(std::map<int, std::vector<float>>& buffers, int mb, int peer,
                               bool gradient) {
  std::vector<float>& b = buffer(buffers, mb, B_);
  if (nonblocking_sends_)
    pp_.recv_tagged(b.data(), b.size(), peer, message_tag(mb, gradient));
  else
    pp_.recv(b.data(), b.size(), peer);
}

void PipelineExecutor::run_forward(int mb, const MicroBatchSource& source, int batch,
                                   double* loss_sum) {
  STRATA_CHECK(!free_slots_.empty(), "pipeline stage ", stage(), " has no free activation slot");
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  slot_of_[mb] = slot;
  source(mb, tokens_.data(), targets_.data());
  const float* input = nullptr;
  if (!first_stage()) {
    const auto it = x_.find(mb);
    STRATA_CHECK(it != x_.end(), "stage ", stage(), ": forward of micro-batch ", mb,
                 " before its input arrived");
    input = it->second.data();
  }
  const double loss = stage_.forward(slot, tokens_.data(), input, targets_.data(), batch);
  x_.erase(mb);  // the stage keeps its own copy in the slot
  if (last_stage()) {
    *loss_sum += loss;
  } else {
    stage_.copy_output(slot, buffer(y_, mb, batch).data());
  }
}

void PipelineExecutor::run_backward(int mb, float loss_scale, bool input_only) {
  const auto it = slot_of_.find(mb);
  STRATA_CHECK(it != slot_of_.end() && !weight_pending_.contains(mb), "backward of micro-batch ",
               mb, " before its forward");
  const int slot = it->second;
  const float* output_grad = nullptr;
  if (!last_stage()) {
    const auto dy = dy_.find(mb);
    STRATA_CHECK(dy != dy_.end(), "stage ", stage(), ": backward of micro-batch ", mb,
                 " before its output gradient arrived");
    output_grad = dy->second.data();
  }
  if (input_only)
    stage_.backward_input(slot, output_grad, loss_scale);
  else
    stage_.backward(slot, output_grad, loss_scale);
  dy_.erase(mb);
  if (!first_stage()) stage_.copy_input_grad(slot, buffer(dx_, mb, B_).data());
  if (input_only) {  // the slot stays taken until W
    weight_pending_.insert(mb);
    return;
  }
  slot_of_.erase(it);
  free_slots_.push_back(slot);
}

void PipelineExecutor::run_weight_backward(int mb) {
  STRATA_CHECK(weight_pending_.erase(mb) == 1, "stage ", stage(), ": W of micro-batch ", mb,
               " before its B");
  const auto it = slot_of_.find(mb);
  stage_.backward_weight(it->second);
  free_slots_.push_back(it->second);
  slot_of_.erase(it);
}

double PipelineExecutor::train_step(float loss_scale, const MicroBatchSource& source) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point step_start = Clock::now();
  double transfer_seconds = 0;  // inside transfers, waiting for a neighbour included
  double loss_sum = 0;
  const int next = stage() + 1, previous = stage() - 1;
  for (const PipelineOp& op : ops_) {
    const int mb = op.micro_batch;
    const bool transfer = pipeline_op_peer_offset(op.kind) != 0;
    const Clock::time_point op_start = Clock::now();
    switch (op.kind) {
      case PipelineOpKind::forward:
        run_forward(mb, source, B_, &loss_sum);
        break;
      case PipelineOpKind::backward:
      case PipelineOpKind::backward_input:
        run_backward(mb, loss_scale, op.kind == PipelineOpKind::backward_input);
        break;
      case PipelineOpKind::backward_weight:
        run_weight_backward(mb);
        break;
      case PipelineOpKind::recv_activation:
        receive(x_, mb, previous, false);
        break;
      case PipelineOpKind::send_activation:
        send(y_, mb, next, false);
        break;
      case PipelineOpKind::recv_grad:
        receive(dy_, mb, next, true);
        break;
      case PipelineOpKind::send_grad:
        send(dx_, mb, previous, true);
        break;
      case PipelineOpKind::send_activation_recv_grad:
        if (nonblocking_sends_) {  // the queued model's exchange: send, then receive
          send(y_, mb, next, false);
          receive(dy_, op.recv_micro_batch, next, true);
        } else {
          std::vector<float>& dy = buffer(dy_, op.recv_micro_batch, B_);
          pp_.send_recv(y_.at(mb).data(), y_.at(mb).size(), next, dy.data(), dy.size(), next);
          y_.erase(mb);
        }
        break;
      case PipelineOpKind::send_grad_recv_activation:
        if (nonblocking_sends_) {
          send(dx_, mb, previous, true);
          receive(x_, op.recv_micro_batch, previous, false);
        } else {
          std::vector<float>& x = buffer(x_, op.recv_micro_batch, B_);
          pp_.send_recv(dx_.at(mb).data(), dx_.at(mb).size(), previous, x.data(), x.size(),
                        previous);
          dx_.erase(mb);
        }
        break;
    }
    if (transfer)
      transfer_seconds += std::chrono::duration<double>(Clock::now() - op_start).count();
  }
  const Clock::time_point drain_start = Clock::now();
  for (InFlight& sent : in_flight_) sent.send->wait();
  in_flight_.clear();
  transfer_seconds += std::chrono::duration<double>(Clock::now() - drain_start).count();
  if (steps_run_++ > 0) {
    timing_.steps += 1;
    timing_.seconds += std::chrono::duration<double>(Clock::now() - step_start).count();
    timing_.transfer_seconds += transfer_seconds;
  }
  STRATA_CHECK(slot_of_.empty() && x_.empty() && y_.empty() && dy_.empty() && dx_.empty(),
               "pipeline stage ", stage(), " ended its step with buffers still in flight");
  return loss_sum;
}

void PipelineExecutor::forward_only(const std::vector<int>& batch_sizes,
                                    const MicroBatchSource& source,
                                    const std::function<void(int, const float*, int)>& on_losses) {
  // A chain: each stage receives, computes, sends; blocking transfers cannot deadlock here.
  for (int mb = 0; mb < static_cast<int>(batch_sizes.size()); ++mb) {
    const int batch = batch_sizes[mb];
    if (!first_stage()) {
      std::vector<float>& x = buffer(x_, mb, batch);
      pp_.recv(x.data(), x.size(), stage() - 1);
    }
    double unused = 0;
    run_forward(mb, source, batch, &unused);
    const int slot = slot_of_.at(mb);
    if (last_stage()) {
      losses_.resize(static_cast<std::size_t>(batch) * T_);
      stage_.copy_losses(slot, losses_.data());
      on_losses(mb, losses_.data(), batch * T_);
    } else {
      pp_.send(y_.at(mb).data(), y_.at(mb).size(), stage() + 1);
      y_.erase(mb);
    }
    slot_of_.erase(mb);
    free_slots_.push_back(slot);
  }
}

}  // namespace strata
