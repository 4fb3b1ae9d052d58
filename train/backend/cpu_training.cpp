#include "train/backend/cpu_training.h"

#include "train/backend/backend_state.h"

#include <algorithm>

#include "model/core/error.h"
#include "model/kernels/cpu/adamw.h"
#include "model/kernels/cpu/precision.h"
#include "parallel/mesh/host_reduction.h"

namespace strata {

CpuTraining::CpuTraining(const Config& config, const GptShape& shape,
                         const BackendPlacement& placement)
    : plan_(placement.plan),
      groups_(placement.groups->reductions()),
      scratch_floats_(std::max(reduction_scratch_floats(plan_.gradients, *placement.groups),
                               reduction_scratch_floats(plan_.parameters, *placement.groups))),
      layout_(ParameterLayout::for_partition(shape, placement.partition)),
      compute_(config.precision.compute),
      params_(plan_.parameter_range.size(), 0.0f),
      grads_(plan_.gradient_range.size(), 0.0f),
      optimizer_(make_optimizer(layout_, plan_.owned, config.optimizer,
                                optimizer_groups(plan_, *placement.groups))),
      parameters_(layout_.segments(), plan_, placement.groups->sharding(),
                  sharding_options(config.parallel.zero)),
      fp8_groups_{&placement.groups->tp(), &placement.groups->dp_cp()} {
  STRATA_CHECK(plan_.buffer_size >= layout_.total(), "the plan's buffer is too small");
  const ModelPartition& partition = placement.partition;
  const int chunks = partition.chunks();
  STRATA_CHECK(static_cast<int>(placement.slots.size()) == chunks, "slots for ",
               placement.slots.size(), " chunks, the partition has ", chunks);
  ChunkSegments segments = chunk_segments(shape, partition);
  parameters_.set_readers(segments.readers);
  // Reserved: the stages and views point at the models and views before them.
  models_.reserve(static_cast<std::size_t>(chunks));
  chunk_parameters_.reserve(models_.capacity());
  stages_.reserve(models_.capacity());
  std::vector<PipelineStage*> stages;
  for (int c = 0; c < chunks; ++c) {
    const std::size_t i = static_cast<std::size_t>(c);
    models_.emplace_back(shape, partition.chunk(c), &placement.groups->tp(),
                         config.train.micro_batch, placement.slots[i], gpt_options_of(config),
                         placement.groups->ep(), placement.groups->cp());
    chunk_parameters_.emplace_back(parameters_, std::move(segments.rank_index[i]));
    stages_.emplace_back(models_.back());
    stages.push_back(&stages_.back());
  }
  executor_ = std::make_unique<PipelineExecutor>(stages, placement.layout, placement.groups->pp(),
                                                 *placement.program, config.train.micro_batch,
                                                 partition.context.local_length(shape.seq_len),
                                                 placement.nonblocking_sends);
  refresh_compute_weights();
}

std::vector<double> CpuTraining::take_moe_totals() {
  std::vector<double> totals;
  for (Gpt<float>& model : models_) model.take_moe_totals(totals);
  return totals;
}

std::size_t CpuTraining::activation_bytes() const {
  std::size_t bytes = 0;
  for (const Gpt<float>& model : models_) bytes += model.activation_bytes();
  return bytes;
}

// Every chunk's blocks keep the same per layer (one shape, one recompute policy) over their own
// slots; a rank's layer keeps the most of them.
std::size_t CpuTraining::activation_bytes_per_layer() const {
  std::size_t most = 0;
  for (const Gpt<float>& model : models_) most = std::max(most, model.activation_bytes_per_layer());
  return most;
}

std::vector<Fp8State*> CpuTraining::fp8_states() {
  std::vector<Fp8State*> states;
  for (Gpt<float>& model : models_) states.push_back(model.fp8_state());
  return states;
}

std::vector<StateBuffer> CpuTraining::state() {
  std::vector<StateBuffer> buffers = state_buffers(plan_.parameter_range, optimizer_->save());
  buffers.front().values = params_;
  if (auto fp8 = fp8_history_buffer(fp8_states(), layout_)) buffers.push_back(std::move(*fp8));
  return buffers;
}

void CpuTraining::set_state(const std::vector<StateBuffer>& buffers) {
  const std::vector<StateBuffer> held = state_buffers(plan_.parameter_range, optimizer_->shapes());
  std::vector<StateBuffer> optimizer;
  for (const StateBuffer& b : buffers) {
    if (b.name == kFp8HistoryBuffer) {
      set_fp8_histories(fp8_states(), b);
      continue;
    }
    if (match_state_buffer(held, b, "CPU") == 0) {
      params_ = b.values;
      continue;
    }
    optimizer.push_back(b);
    optimizer.back().name = b.name.substr(kOptimizerPrefix.size());
  }
  optimizer_->load(optimizer);
  refresh_compute_weights();
}

void CpuTraining::read_master_weights(ElementRange range, float* out) {
  std::fill_n(out, range.size(), 0.0f);
  const WindowPart part = window_part(range, plan_.parameter_range);
  std::copy_n(params_.data() + part.held_at, part.count, out + part.window_at);
}

void CpuTraining::write_master_weights(ElementRange range, const float* in) {
  const WindowPart part = window_part(range, plan_.parameter_range);
  if (part.count == 0) return;
  std::copy_n(in + part.window_at, part.count, params_.data() + part.held_at);
  refresh_compute_weights();
}

const float* CpuTraining::compute_weights() const {
  return weights_.empty() ? params_.data() : weights_.data();
}

void CpuTraining::refresh_compute_weights() {
  if (compute_ == cpu::ComputeDtype::fp32) return;
  weights_ = params_;
  cpu::round_to_dtype(weights_.data(), static_cast<long>(weights_.size()), compute_);
}

double CpuTraining::accumulate_gradients(int micro_batches, float loss_scale,
                                         const MicroBatchSource& source) {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  parameters_.bind(compute_weights(), grads_.data(), micro_batches);
  bind_stages();
  for (Fp8State* fp8 : fp8_states())
    if (fp8 != nullptr) fp8->begin_step();
  const double loss = executor_->train_step(loss_scale, source);
  STRATA_CHECK(!parameters_.has_pending_gradients(),
               "a gradient bucket was not reduced: the schedule ran fewer backward passes than ",
               micro_batches);
  return loss;
}

void CpuTraining::zero_gradients() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

PipelineStage& CpuTraining::stage() {
  STRATA_CHECK(stages_.size() == 1, "a driven stage is one chunk, this rank holds ",
               stages_.size());
  parameters_.bind(compute_weights(), grads_.data(), 1);
  bind_stages();
  return stages_.front();
}

void CpuTraining::copy_gradients(float* out) { std::copy(grads_.begin(), grads_.end(), out); }

void CpuTraining::set_gradients(const float* in) { std::copy_n(in, grads_.size(), grads_.begin()); }

void CpuTraining::reduce_gradients() {
  run_reductions(plan_.gradients, grads_.data(), groups_, plan_.gradient_range.begin);
}

double CpuTraining::gradient_sum_of_squares() {
  double sum = 0;
  for (const ElementRange& r : plan_.norm_ranges)
    sum += cpu::sum_of_squares(grads_.data() + (r.begin - plan_.gradient_range.begin),
                               static_cast<long>(r.size()));
  return sum;
}

void CpuTraining::apply_optimizer(const OptimizerStep& step) {
  // The step is applied: its FP8 amaxes join the histories (a skipped step's never do).
  for (Fp8State* fp8 : fp8_states())
    if (fp8 != nullptr) fp8->end_step(fp8_groups_);
  const ElementRange owned = optimizer_->range();
  optimizer_->update(params_.data() + (owned.begin - plan_.parameter_range.begin),
                     grads_.data() + (owned.begin - plan_.gradient_range.begin), step);
  run_reductions(plan_.parameters, params_.data(), groups_, plan_.parameter_range.begin);
  refresh_compute_weights();
}

MemoryAccount CpuTraining::memory() const {
  MemoryAccount m;
  m.master_weights = params_.size() * sizeof(float);
  m.compute_weights = weights_.size() * sizeof(float);  // bf16/fp16 emulated in fp32 storage
  m.gradients = grads_.size() * sizeof(float);
  m.optimizer_state = optimizer_->state_bytes();
  m.activations = activation_bytes();
  m.secondary_weights = parameters_.secondary_bytes();
  m.gathered_weights = parameters_.peak_gathered_bytes();
  m.gradient_buckets = parameters_.peak_bucket_bytes();
  m.communication = scratch_floats_ * sizeof(float);
  return m;
}

PipelineExecutor& CpuTraining::evaluator() {
  parameters_.bind(compute_weights(), nullptr, 0);
  bind_stages();
  return *executor_;
}

void CpuTraining::bind_stages() {
  for (std::size_t c = 0; c < stages_.size(); ++c) stages_[c].bind(&chunk_parameters_[c]);
}

}  // namespace strata
