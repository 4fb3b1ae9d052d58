#include "parallel/pipeline/pipeline_executor.h"

#include "model/core/error.h"

namespace strata {

PipelineExecutor::PipelineExecutor(PipelineStage& stage, Communicator& pp,
                                   const PipelineProgram& program, int B, int T)
    : stage_(stage),
      pp_(pp),
      ops_(program.at(static_cast<std::size_t>(pp.rank()))),
      B_(B),
      T_(T),
      tokens_(static_cast<std::size_t>(B) * T),
      targets_(tokens_.size()) {
  for (int slot = stage.slots() - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  // Chunks exist as data (pipeline_schedule.h) but this interpreter keeps one chunk's buffers
  // per micro-batch.
  for (const PipelineOp& op : ops_)
    if (op.chunk != 0)
      fail("pipeline stage ", pp.rank(),
           ": the executor runs programs of one chunk per rank (gpipe, 1f1b, zb-h1), not ",
           to_string(op));
}

std::vector<float>& PipelineExecutor::buffer(std::map<int, std::vector<float>>& buffers, int mb,
                                             int batch) {
  std::vector<float>& b = buffers[mb];
  b.resize(stage_.boundary_size(batch));
  return b;
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
  double loss_sum = 0;
  const int next = stage() + 1, previous = stage() - 1;
  for (const PipelineOp& op : ops_) {
    const int mb = op.micro_batch;
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
      case PipelineOpKind::recv_activation: {
        std::vector<float>& x = buffer(x_, mb, B_);
        pp_.recv(x.data(), x.size(), previous);
        break;
      }
      case PipelineOpKind::send_activation:
        pp_.send(y_.at(mb).data(), y_.at(mb).size(), next);
        y_.erase(mb);
        break;
      case PipelineOpKind::recv_grad: {
        std::vector<float>& dy = buffer(dy_, mb, B_);
        pp_.recv(dy.data(), dy.size(), next);
        break;
      }
      case PipelineOpKind::send_grad:
        pp_.send(dx_.at(mb).data(), dx_.at(mb).size(), previous);
        dx_.erase(mb);
        break;
      case PipelineOpKind::send_activation_recv_grad: {
        std::vector<float>& dy = buffer(dy_, op.recv_micro_batch, B_);
        pp_.send_recv(y_.at(mb).data(), y_.at(mb).size(), next, dy.data(), dy.size(), next);
        y_.erase(mb);
        break;
      }
      case PipelineOpKind::send_grad_recv_activation: {
        std::vector<float>& x = buffer(x_, op.recv_micro_batch, B_);
        pp_.send_recv(dx_.at(mb).data(), dx_.at(mb).size(), previous, x.data(), x.size(), previous);
        dx_.erase(mb);
        break;
      }
    }
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
