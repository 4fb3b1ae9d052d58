#include "train/swarm/swarm_stage.h"

#include <cmath>
#include <numeric>
#include <stdexcept>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/reduction_plan.h"
#include "train/optimizer/lr_schedule.h"
#include "train/optimizer/optimizer.h"
#include "train/swarm/stage_requests.h"

namespace strata {

int swarm_target_batch(const Config& config) {
  return config.swarm.target_batch > 0 ? config.swarm.target_batch : config.train.global_batch;
}

ModelPartition swarm_stage_partition(const Config& config, int stage) {
  const std::vector<int>& layers = config.swarm.stages;
  ModelPartition p;
  p.layer_begin = std::accumulate(layers.begin(), layers.begin() + stage, 0);
  p.layer_end = p.layer_begin + layers.at(static_cast<std::size_t>(stage));
  p.has_embedding = stage == 0;
  p.has_head = stage == static_cast<int>(layers.size()) - 1;
  return p;
}

SwarmStage::SwarmStage(const Config& config, int stage, Device device, MpiCommunicator& world)
    : config_(config),
      stage_(stage),
      loss_scale_(static_cast<float>(config.train.micro_batch) /
                  static_cast<float>(swarm_target_batch(config))),
      groups_(Mesh(1, 0, 1, 1, 1, config.parallel.gpus_per_node), world),
      program_(make_pipeline_schedule(PipelineSchedule::one_f_one_b, 1, 1)),
      partition_(swarm_stage_partition(config, stage)) {
  const GptShape shape = gpt_shape_of(config.model);
  BackendPlacement placement;
  placement.partition = partition_;
  placement.groups = &groups_;
  placement.program = &program_;
  ReductionPlacement reduction;
  reduction.partition = partition_;
  reduction.tied_embeddings = false;  // a swarm's model is untied (config rule)
  placement.plan =
      make_reduction_plan(ParameterLayout::for_partition(shape, partition_), reduction);
  backend_ = make_training_backend(device, config, shape, placement);
}

std::size_t SwarmStage::boundary_floats(int batch) const {
  return static_cast<std::size_t>(batch) * config_.model.seq_len * config_.model.d_model;
}

void SwarmStage::initialize() {
  std::vector<StateBuffer> buffers = backend_->state();
  StateBuffer& params = buffers.at(0);
  initialize_gpt_parameters(backend_->layout(), gpt_shape_of(config_.model), config_.run.seed,
                            params.values.data(), params.range);
  backend_->set_state(buffers);
  backend_->zero_gradients();
}

std::vector<float> SwarmStage::forward(const std::int32_t* tokens, const float* input, int batch) {
  PipelineStage& stage = backend_->stage();
  stage.forward(0, tokens, input, nullptr, batch);
  std::vector<float> output(boundary_floats(batch));
  stage.copy_output(0, output.data());
  return output;
}

std::vector<float> SwarmStage::backward(const std::int32_t* tokens, const float* input,
                                        const float* output_grad, int batch, bool add) {
  STRATA_CHECK(!last(), "the last stage's backward starts from its loss (SwarmStage::loss)");
  if (!add) {
    kept_.resize(backend_->plan().gradient_range.size());
    backend_->copy_gradients(kept_.data());
  }
  PipelineStage& stage = backend_->stage();
  stage.forward(0, tokens, input, nullptr, batch);
  stage.backward(0, output_grad, loss_scale_);
  std::vector<float> input_grad;
  if (!first()) {
    input_grad.resize(boundary_floats(batch));
    stage.copy_input_grad(0, input_grad.data());
  }
  if (!add) backend_->set_gradients(kept_.data());
  return input_grad;
}

double SwarmStage::loss(const float* input, const std::int32_t* targets, int batch,
                        std::vector<float>* input_grad, bool add) {
  STRATA_CHECK(last(), "only the last stage computes the loss");
  PipelineStage& stage = backend_->stage();
  stage.forward(0, nullptr, input, targets, batch);
  std::vector<float> losses(static_cast<std::size_t>(batch) * config_.model.seq_len);
  stage.copy_losses(0, losses.data());
  const double sum = std::accumulate(losses.begin(), losses.end(), 0.0);
  if (input_grad) {
    if (!add) {
      kept_.resize(backend_->plan().gradient_range.size());
      backend_->copy_gradients(kept_.data());
    }
    stage.backward(0, nullptr, loss_scale_);
    input_grad->resize(boundary_floats(batch));
    stage.copy_input_grad(0, input_grad->data());
    if (!add) backend_->set_gradients(kept_.data());
  }
  return sum;
}

double SwarmStage::weights_sum() {
  const std::vector<StateBuffer> state = backend_->state();
  const std::vector<float>& weights = state.front().values;
  return std::accumulate(weights.begin(), weights.end(), 0.0);
}

StageStep SwarmStage::step(double scale) {
  StageStep s;
  s.lr = learning_rate(config_.optimizer, static_cast<int>(steps_done_), config_.train.steps);
  s.grad_norm = scale * std::sqrt(backend_->gradient_sum_of_squares());
  s.applied = std::isfinite(s.grad_norm);
  steps_done_ += 1;
  s.step = steps_done_;
  if (s.applied) {
    optimizer_steps_ += 1;
    backend_->apply_optimizer(OptimizerStep{
        s.lr, scale * clip_factor(s.grad_norm, config_.optimizer.grad_clip), optimizer_steps_});
  }
  backend_->zero_gradients();
  return s;
}

}  // namespace strata
