#include "parallel/pipeline/pipeline_executor.h"

#include <chrono>

#include "model/core/error.h"

namespace strata {

PipelineExecutor::PipelineExecutor(std::vector<PipelineStage*> chunks, const PipelineLayout& layout,
                                   Communicator& pp, const PipelineProgram& program, int B, int T,
                                   bool nonblocking_sends)
    : pp_(pp),
      ops_(program.at(static_cast<std::size_t>(pp.rank()))),
      B_(B),
      T_(T),
      tokens_(static_cast<std::size_t>(B) * T),
      targets_(tokens_.size()),
      nonblocking_sends_(nonblocking_sends) {
  STRATA_CHECK(static_cast<int>(chunks.size()) == layout.chunks, "pipeline stage ", pp.rank(), ": ",
               chunks.size(), " chunks for a layout of ", layout.chunks);
  // Paired exchanges under rendezvous name no chunk on the far side; programs of several chunks
  // are written with single transfers that need queued sends.
  STRATA_CHECK(layout.chunks == 1 || nonblocking_sends,
               "a program of several chunks per rank runs with queued sends");
  const int stages = pp.size(), virtual_stages = stages * layout.chunks;
  const auto neighbour = [&](int virtual_stage) {
    if (virtual_stage < 0 || virtual_stage >= virtual_stages) return Neighbour{};
    const StageChunk at = pipeline_stage_chunk(layout, stages, virtual_stage);
    return Neighbour{at.stage, at.chunk};
  };
  for (int c = 0; c < layout.chunks; ++c) {
    Chunk chunk;
    chunk.stage = chunks[static_cast<std::size_t>(c)];
    const int here = pipeline_virtual_stage(layout, stages, pp.rank(), c);
    chunk.previous = neighbour(here - 1);
    chunk.next = neighbour(here + 1);
    for (int slot = chunk.stage->slots() - 1; slot >= 0; --slot) chunk.free_slots.push_back(slot);
    chunks_.push_back(std::move(chunk));
  }
  for (const PipelineOp& op : ops_)
    if (op.chunk < 0 || op.chunk >= layout.chunks)
      fail("pipeline stage ", pp.rank(), ": ", to_string(op), " names a chunk of ", layout.chunks);
}

std::vector<float>& PipelineExecutor::buffer(Buffers& buffers, Key key, int batch) {
  std::vector<float>& b = buffers[key];
  b.resize(chunk(key.first).stage->boundary_size(batch));
  return b;
}

int PipelineExecutor::message_tag(int receiving_chunk, int mb, bool gradient) const {
  const int chunks = static_cast<int>(chunks_.size());
  const int tag = 2 * (mb * chunks + receiving_chunk) + (gradient ? 1 : 0);
  STRATA_CHECK(tag < Communicator::kMaxMessageTag, "pipeline: micro-batch ", mb, " of chunk ",
               receiving_chunk, " exceeds the message tags");
  return tag;
}

void PipelineExecutor::send(Buffers& buffers, Key key, const Neighbour& to, bool gradient) {
  const auto it = buffers.find(key);
  STRATA_CHECK(it != buffers.end(), "stage ", rank(), ": send of micro-batch ", key.second,
               " (chunk ", key.first, ") before it was computed");
  if (nonblocking_sends_) {
    InFlight sent{std::move(it->second), nullptr};  // the moved vector keeps its storage
    sent.send = pp_.start_send(sent.data.data(), sent.data.size(), to.rank,
                               message_tag(to.chunk, key.second, gradient));
    in_flight_.push_back(std::move(sent));
  } else {
    pp_.send(it->second.data(), it->second.size(), to.rank);
  }
  buffers.erase(it);
}

void PipelineExecutor::receive(Buffers& buffers, Key key, const Neighbour& from, bool gradient) {
  std::vector<float>& b = buffer(buffers, key, B_);
  if (nonblocking_sends_)
    pp_.recv_tagged(b.data(), b.size(), from.rank, message_tag(key.first, key.second, gradient));
  else
    pp_.recv(b.data(), b.size(), from.rank);
}

void PipelineExecutor::run_forward(Key key, const MicroBatchSource& source, int batch,
                                   double* loss_sum) {
  Chunk& c = chunk(key.first);
  STRATA_CHECK(!c.free_slots.empty(), "pipeline stage ", rank(), " chunk ", key.first,
               " has no free activation slot");
  const int slot = c.free_slots.back();
  c.free_slots.pop_back();
  slot_of_[key] = slot;
  source(key.second, tokens_.data(), targets_.data());
  const float* input = nullptr;
  if (!c.first()) {
    const auto it = x_.find(key);
    STRATA_CHECK(it != x_.end(), "stage ", rank(), ": forward of micro-batch ", key.second,
                 " (chunk ", key.first, ") before its input arrived");
    input = it->second.data();
  }
  const double loss = c.stage->forward(slot, tokens_.data(), input, targets_.data(), batch);
  x_.erase(key);  // the stage keeps its own copy in the slot
  if (c.last()) {
    *loss_sum += loss;
    return;
  }
  std::vector<float>& y = buffer(y_, key, batch);
  c.stage->copy_output(slot, y.data());
  if (is_local(c.next)) {  // the next virtual stage is here: its input, in place
    x_[{c.next.chunk, key.second}] = std::move(y);
    y_.erase(key);
  }
}

void PipelineExecutor::run_backward(Key key, float loss_scale, bool input_only) {
  Chunk& c = chunk(key.first);
  const auto it = slot_of_.find(key);
  STRATA_CHECK(it != slot_of_.end() && !weight_pending_.contains(key), "backward of micro-batch ",
               key.second, " (chunk ", key.first, ") before its forward");
  const int slot = it->second;
  const float* output_grad = nullptr;
  if (!c.last()) {
    const auto dy = dy_.find(key);
    STRATA_CHECK(dy != dy_.end(), "stage ", rank(), ": backward of micro-batch ", key.second,
                 " (chunk ", key.first, ") before its output gradient arrived");
    output_grad = dy->second.data();
  }
  if (input_only)
    c.stage->backward_input(slot, output_grad, loss_scale);
  else
    c.stage->backward(slot, output_grad, loss_scale);
  dy_.erase(key);
  if (!c.first()) {
    std::vector<float>& dx = buffer(dx_, key, B_);
    c.stage->copy_input_grad(slot, dx.data());
    if (is_local(c.previous)) {  // the previous virtual stage is here: its output gradient
      dy_[{c.previous.chunk, key.second}] = std::move(dx);
      dx_.erase(key);
    }
  }
  if (input_only) {  // the slot stays taken until W
    weight_pending_.insert(key);
    return;
  }
  slot_of_.erase(it);
  c.free_slots.push_back(slot);
}

void PipelineExecutor::run_weight_backward(Key key) {
  STRATA_CHECK(weight_pending_.erase(key) == 1, "stage ", rank(), ": W of micro-batch ", key.second,
               " (chunk ", key.first, ") before its B");
  const auto it = slot_of_.find(key);
  Chunk& c = chunk(key.first);
  c.stage->backward_weight(it->second);
  c.free_slots.push_back(it->second);
  slot_of_.erase(it);
}

void PipelineExecutor::run_transfer(const PipelineOp& op) {
  const Key key{op.chunk, op.micro_batch}, received{op.chunk, op.recv_micro_batch};
  const Chunk& c = chunk(op.chunk);
  switch (op.kind) {
    case PipelineOpKind::recv_activation:
      receive(x_, key, c.previous, false);
      break;
    case PipelineOpKind::send_activation:
      send(y_, key, c.next, false);
      break;
    case PipelineOpKind::recv_grad:
      receive(dy_, key, c.next, true);
      break;
    case PipelineOpKind::send_grad:
      send(dx_, key, c.previous, true);
      break;
    case PipelineOpKind::send_activation_recv_grad:
      if (nonblocking_sends_) {  // the queued model's exchange: send, then receive
        send(y_, key, c.next, false);
        receive(dy_, received, c.next, true);
      } else {
        std::vector<float>& dy = buffer(dy_, received, B_);
        const std::vector<float>& y = y_.at(key);
        pp_.send_recv(y.data(), y.size(), c.next.rank, dy.data(), dy.size(), c.next.rank);
        y_.erase(key);
      }
      break;
    case PipelineOpKind::send_grad_recv_activation:
      if (nonblocking_sends_) {
        send(dx_, key, c.previous, true);
        receive(x_, received, c.previous, false);
      } else {
        std::vector<float>& x = buffer(x_, received, B_);
        const std::vector<float>& dx = dx_.at(key);
        pp_.send_recv(dx.data(), dx.size(), c.previous.rank, x.data(), x.size(), c.previous.rank);
        dx_.erase(key);
      }
      break;
    case PipelineOpKind::forward:
    case PipelineOpKind::backward:
    case PipelineOpKind::backward_input:
    case PipelineOpKind::backward_weight:
      break;
  }
}

double PipelineExecutor::train_step(float loss_scale, const MicroBatchSource& source) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point step_start = Clock::now();
  double transfer_seconds = 0;  // inside transfers, waiting for a neighbour included
  double loss_sum = 0;
  for (const PipelineOp& op : ops_) {
    const Key key{op.chunk, op.micro_batch};
    switch (op.kind) {
      case PipelineOpKind::forward:
        run_forward(key, source, B_, &loss_sum);
        break;
      case PipelineOpKind::backward:
      case PipelineOpKind::backward_input:
        run_backward(key, loss_scale, op.kind == PipelineOpKind::backward_input);
        break;
      case PipelineOpKind::backward_weight:
        run_weight_backward(key);
        break;
      default: {
        const Clock::time_point op_start = Clock::now();
        run_transfer(op);
        transfer_seconds += std::chrono::duration<double>(Clock::now() - op_start).count();
      }
    }
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
               "pipeline stage ", rank(), " ended its step with buffers still in flight");
  return loss_sum;
}

void PipelineExecutor::forward_only(const std::vector<int>& batch_sizes,
                                    const MicroBatchSource& source,
                                    const std::function<void(int, const float*, int)>& on_losses) {
  // A chain through the virtual stages: every rank takes its chunks in chunk order, which is
  // virtual-stage order under both placements, so blocking transfers cannot deadlock here.
  for (int mb = 0; mb < static_cast<int>(batch_sizes.size()); ++mb) {
    const int batch = batch_sizes[mb];
    for (int index = 0; index < static_cast<int>(chunks_.size()); ++index) {
      const Key key{index, mb};
      Chunk& c = chunk(index);
      if (!c.first() && !is_local(c.previous)) {
        std::vector<float>& x = buffer(x_, key, batch);
        pp_.recv(x.data(), x.size(), c.previous.rank);
      }
      double unused = 0;
      run_forward(key, source, batch, &unused);
      const int slot = slot_of_.at(key);
      if (c.last()) {
        losses_.resize(static_cast<std::size_t>(batch) * T_);
        c.stage->copy_losses(slot, losses_.data());
        on_losses(mb, losses_.data(), batch * T_);
      } else if (!is_local(c.next)) {
        pp_.send(y_.at(key).data(), y_.at(key).size(), c.next.rank);
        y_.erase(key);
      }
      slot_of_.erase(key);
      c.free_slots.push_back(slot);
    }
  }
}

}  // namespace strata
