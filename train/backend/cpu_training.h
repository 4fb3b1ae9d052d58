// The training backend on the CPU (train/backend/training_backend.h): this rank's part of the model
// (a Gpt<float> per chunk of its ModelPartition, each reaching the rank's segments through
// ChunkParameters) with the fp32 master weights, the gradients and a compute-dtype
// copy of the weights (bf16/fp16 emulated by rounding, docs/ARCHITECTURE.md §6) in flat buffers
// over the reduction plan's ranges (the whole padded layout, or under ZeRO 2/3 the owned shard of
// the gradients, and under ZeRO 3 of the weights), the model reaching them through
// ShardedParameters, the optimizer (optimizer.name) on the plan's owned range, and the pipeline
// executor that runs every step's micro-batches through this stage.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/chunk_parameters.h"
#include "parallel/mesh/host_reduction.h"
#include "parallel/zero/sharded_parameters.h"
#include "train/backend/cpu_pipeline_stage.h"
#include "train/backend/training_backend.h"

namespace strata {

class CpuTraining final : public TrainingBackend {
 public:
  // placement.groups and placement.program must outlive this object.
  CpuTraining(const Config& config, const GptShape& shape, const BackendPlacement& placement);

  std::string name() const override { return "cpu"; }
  const ParameterLayout& layout() const override { return layout_; }
  const ReductionPlan& plan() const override { return plan_; }

  std::vector<StateBuffer> state() override;
  void set_state(const std::vector<StateBuffer>& buffers) override;
  void read_master_weights(ElementRange range, float* out) override;
  void write_master_weights(ElementRange range, const float* in) override;

  double accumulate_gradients(int micro_batches, float loss_scale,
                              const MicroBatchSource& source) override;
  void zero_gradients() override;
  PipelineStage& stage() override;
  void copy_gradients(float* out) override;
  void set_gradients(const float* in) override;
  void reduce_gradients() override;
  double gradient_sum_of_squares() override;
  void apply_optimizer(const OptimizerStep& step) override;
  PipelineExecutor& evaluator() override;
  PipelineExecutor::Timing pipeline_timing() const override { return executor_->timing(); }

  std::size_t activation_bytes() const override;
  std::size_t activation_bytes_per_layer() const override;
  MemoryAccount memory() const override;
  std::vector<double> take_moe_totals() override;

 private:
  // The weights the model reads: the masters in fp32, else their rounded copy.
  const float* compute_weights() const;
  void refresh_compute_weights();
  // Each chunk's stage reaches parameters_ through its view.
  void bind_stages();
  // The chunks' FP8 scaling states (null entries without FP8).
  std::vector<Fp8State*> fp8_states();

  ReductionPlan plan_;
  ReductionGroups groups_;
  std::size_t scratch_floats_;  // the largest reduction scratch (memory accounting)
  ParameterLayout layout_;      // the rank's: every chunk's tensors
  cpu::ComputeDtype compute_;
  // Over plan_.parameter_range, plan_.gradient_range and parameter_range (weights_: empty in fp32).
  std::vector<float> params_, grads_, weights_;
  std::unique_ptr<Optimizer> optimizer_;
  ShardedParameters parameters_;
  // Per chunk (one without virtual stages): its model, its view of parameters_, its stage.
  std::vector<Gpt<float>> models_;
  std::vector<ChunkParameters<float>> chunk_parameters_;
  std::vector<CpuPipelineStage> stages_;
  std::unique_ptr<PipelineExecutor> executor_;
  // The groups a step's FP8 amaxes are reduced over: the ranks holding the same blocks.
  std::vector<Collectives*> fp8_groups_;
};

}  // namespace strata
