// CudaTraining on the CUDA backend (built only with CUDA; cuda_training_absent.cpp otherwise).
#include "train/backend/cuda_training.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <type_traits>

#include "model/chunk_parameters.h"
#include "model/core/error.h"
#include "model/gpt_cuda.h"
#include "model/kernels/cuda/adamw.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/cast.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_buffer.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/cuda/grad_norm.h"
#include "model/kernels/cuda/matmul.h"
#include "parallel/comm/communicator.h"
#include "parallel/mesh/host_reduction.h"
#include "parallel/mesh/process_groups.h"
#include "parallel/mesh/reduction_interpreter.h"
#include "train/backend/backend_state.h"
#include "train/backend/cuda_host_optimizer.h"
#include "train/backend/cuda_nccl_groups.h"
#include "train/backend/cuda_nccl_sharding.h"
#include "train/backend/cuda_pipeline_stage.h"
#include "train/backend/cuda_staged_sharding.h"
#include "train/optimizer/optimizer.h"

namespace strata {
namespace {

template <class T>
class CudaTrainingOf final : public TrainingBackend {
 public:
  CudaTrainingOf(const Config& config, const GptShape& shape, const BackendPlacement& placement,
                 int device)
      : config_(config),
        plan_(placement.plan),
        groups_(placement.groups->reductions()),
        ctx_(device),
        nccl_(placement),
        layout_(ParameterLayout::for_partition(shape, placement.partition)),
        n_params_(static_cast<long>(plan_.parameter_range.size())),
        n_grads_(static_cast<long>(plan_.gradient_range.size())),
        owned_(plan_.owned),
        scratch_count_(static_cast<long>(
            std::max(reduction_scratch_floats(plan_.gradients, *placement.groups),
                     reduction_scratch_floats(plan_.parameters, *placement.groups)))),
        host_optimizer_(config.optimizer.offload == OptimizerOffload::none
                            ? nullptr
                            : std::make_unique<HostOffloadedOptimizer>(
                                  make_optimizer(layout_, owned_, config.optimizer,
                                                 optimizer_groups(plan_, *placement.groups)),
                                  owned_.size())),
        moments_on_device_(host_optimizer_ == nullptr ? static_cast<long>(owned_.size()) : 0),
        buffers_(buffer_bytes(n_params_, n_grads_, moments_on_device_, scratch_count_)),
        decay_(restrict_to(layout_.decayed_ranges(), owned_)),
        micro_losses_(static_cast<std::size_t>(config.train.global_batch) * shape.seq_len),
        fp8_groups_{&placement.groups->tp(), &placement.groups->dp_cp()} {
    STRATA_CHECK(plan_.buffer_size >= layout_.total() && owned_.end <= plan_.buffer_size,
                 "the reduction plan does not fit this partition's layout");
    master_ = buffers_.allocate<float>(n_params_);
    grads_ = buffers_.allocate<float>(n_grads_);
    m_ = buffers_.allocate<float>(moments_on_device_);
    v_ = buffers_.allocate<float>(moments_on_device_);
    // cudaMalloc leaves memory as it finds it: the state starts at zero, as the CPU backend's
    // vectors do (bench train writes only the weights; AdamW's moments must start at zero).
    for (float* buffer : {master_, m_, v_}) {
      const std::size_t count =
          static_cast<std::size_t>(buffer == master_ ? n_params_ : moments_on_device_);
      if (count > 0)
        STRATA_CUDA_CHECK(cudaMemsetAsync(buffer, 0, count * sizeof(float), ctx_.stream()));
    }
    if constexpr (!std::is_same_v<T, float>) weights_ = buffers_.allocate<T>(n_params_);
    norms_ = buffers_.allocate<double>(kMaxNormRanges);
    if (scratch_count_ > 0) scratch_ = buffers_.allocate<float>(scratch_count_);
    tokens_.resize(static_cast<std::size_t>(config.train.micro_batch) * shape.seq_len);
    targets_.resize(tokens_.size());
    // Evaluation, and the step of a pipeline stage, run through the executor; a lone stage trains
    // in the model's fused forward-backward pass instead.
    pp_ = &placement.groups->pp();
    parameters_ = make_parameter_access(config.parallel.zero, *placement.groups);
    // One model per chunk of the partition (one without virtual stages), each reaching the
    // rank's segments through its ChunkParameters.
    const ModelPartition& partition = placement.partition;
    STRATA_CHECK(static_cast<int>(placement.slots.size()) == partition.chunks(), "slots for ",
                 placement.slots.size(), " chunks, the partition has ", partition.chunks());
    ChunkSegments segments = chunk_segments(shape, partition);
    parameters_->set_readers(segments.readers);
    std::vector<PipelineStage*> stages;
    for (int c = 0; c < partition.chunks(); ++c) {
      const std::size_t i = static_cast<std::size_t>(c);
      // Zero-bubble schedules run the backward in two halves: the slots keep a weight stash. A
      // lone stage (pp 1) still trains through the fused forward_backward, bitwise what the
      // halves add, so its stash goes unused (the planner counts it all the same).
      models_.push_back(std::make_unique<cuda::CudaGpt<T>>(
          ctx_, shape, partition.chunk(c), &placement.groups->tp(), config.train.micro_batch,
          placement.slots[i], config.recompute, nccl_.tp.get(),
          pipeline_schedule_splits_backward(config.parallel.pipeline_schedule),
          placement.groups->ep(),
          cuda::CudaContextGroup{placement.groups->cp(), nccl_.cp.get(), config.parallel.cp_comm},
          config.precision.fp8));
      chunk_parameters_.push_back(std::make_unique<ChunkParameters<T, float>>(
          *parameters_, std::move(segments.rank_index[i])));
      stages_.push_back(
          std::make_unique<CudaPipelineStage<T>>(*models_.back(), *chunk_parameters_.back()));
      stages.push_back(stages_.back().get());
    }
    executor_ = std::make_unique<PipelineExecutor>(
        stages, placement.layout, *pp_, *placement.program, config.train.micro_batch,
        partition.context.local_length(shape.seq_len), placement.nonblocking_sends);
  }

  std::string name() const override {
    std::string name = nccl_.dp ? "cuda (nccl)" : "cuda";
    if (host_optimizer_ != nullptr) name += ", optimizer on the host";
    return name;
  }
  const ParameterLayout& layout() const override { return layout_; }
  const ReductionPlan& plan() const override { return plan_; }

  // The state's device arrays, in the order of state_buffers (train/backend/backend_state.h).
  std::vector<float*> state_arrays() const { return {master_, m_, v_}; }

  std::vector<StateBuffer> state() override {
    if (host_optimizer_ != nullptr) {
      std::vector<StateBuffer> buffers =
          state_buffers(plan_.parameter_range, host_optimizer_->optimizer().save());
      buffers.front().values.resize(buffers.front().range.size());
      download(buffers.front().values, master_);
      ctx_.synchronize();
      if (auto fp8 = fp8_history_buffer(fp8_states(), layout_)) buffers.push_back(std::move(*fp8));
      return buffers;
    }
    std::vector<StateBuffer> buffers = state_buffers(plan_.parameter_range, owned_, kAdamWMoments);
    const std::vector<float*> arrays = state_arrays();
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      buffers[i].values.resize(buffers[i].range.size());
      download(buffers[i].values, arrays[i]);
    }
    ctx_.synchronize();
    if (auto fp8 = fp8_history_buffer(fp8_states(), layout_)) buffers.push_back(std::move(*fp8));
    return buffers;
  }

  // The chunks' FP8 scaling states (null entries without FP8).
  std::vector<Fp8State*> fp8_states() {
    std::vector<Fp8State*> states;
    for (const auto& model : models_) states.push_back(model->fp8_state());
    return states;
  }

  void set_state(const std::vector<StateBuffer>& buffers) override {
    if (host_optimizer_ != nullptr) {
      set_offloaded_state(buffers);
      return;
    }
    const std::vector<StateBuffer> held =
        state_buffers(plan_.parameter_range, owned_, kAdamWMoments);
    const std::vector<float*> arrays = state_arrays();
    for (const StateBuffer& b : buffers) {
      if (b.name == kFp8HistoryBuffer) {
        set_fp8_histories(fp8_states(), b);
        continue;
      }
      upload(arrays[match_state_buffer(held, b, "CUDA")], b.values);
    }
    if constexpr (!std::is_same_v<T, float>)
      cuda::cast(weights_, master_, n_params_, ctx_.stream());
    ctx_.synchronize();  // the host vectors may change once this returns
  }

  void read_master_weights(ElementRange range, float* out) override {
    std::fill_n(out, range.size(), 0.0f);
    const WindowPart part = window_part(range, plan_.parameter_range);
    if (part.count == 0) return;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(out + part.window_at, master_ + part.held_at,
                                      part.count * sizeof(float), cudaMemcpyDeviceToHost,
                                      ctx_.stream()));
    ctx_.synchronize();
  }

  void write_master_weights(ElementRange range, const float* in) override {
    const WindowPart part = window_part(range, plan_.parameter_range);
    if (part.count == 0) return;
    const std::size_t at = part.held_at;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(master_ + at, in + part.window_at, part.count * sizeof(float),
                                      cudaMemcpyHostToDevice, ctx_.stream()));
    if constexpr (!std::is_same_v<T, float>)
      cuda::cast(weights_ + at, master_ + at, static_cast<long>(part.count), ctx_.stream());
    ctx_.synchronize();  // `in` may change once this returns
  }

  double accumulate_gradients(int micro_batches, float loss_scale,
                              const MicroBatchSource& source) override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(grads_, 0, n_grads_ * sizeof(float), ctx_.stream()));
    parameters_->bind(weights(), grads_, micro_batches);
    for (const auto& model : models_) model->begin_fp8_step();
    if (pp_->size() > 1) {
      const double loss = executor_->train_step(loss_scale, source);
      parameters_->finish_step();
      return loss;
    }
    cuda::CudaGpt<T>& model = *models_.front();  // a lone stage: one chunk
    const int B = config_.train.micro_batch, T_ = model.sequence_rows();
    const std::size_t rows = static_cast<std::size_t>(B) * T_;
    STRATA_CHECK(static_cast<std::size_t>(micro_batches) * rows <= micro_losses_.size());
    for (int mb = 0; mb < micro_batches; ++mb) {
      source(mb, tokens_.data(), targets_.data());
      model.forward_backward(*parameters_, tokens_.data(), targets_.data(), B, T_, loss_scale);
      STRATA_CUDA_CHECK(cudaMemcpyAsync(micro_losses_.data() + mb * rows, model.losses(),
                                        rows * sizeof(float), cudaMemcpyDeviceToHost,
                                        ctx_.stream()));
    }
    ctx_.synchronize();
    parameters_->finish_step();
    // Each micro-batch's mean loss, summed: as the CPU executor reports it.
    double loss_sum = 0;
    for (int mb = 0; mb < micro_batches; ++mb) {
      double sum = 0;
      for (std::size_t i = 0; i < rows; ++i) sum += micro_losses_.data()[mb * rows + i];
      loss_sum += sum / static_cast<double>(rows);
    }
    return loss_sum;
  }

  void reduce_gradients() override { run_on_device(plan_.gradients, grads_, plan_.gradient_range); }

  double gradient_sum_of_squares() override {
    // Adjacent ranges merge into one reduction; each reduction writes its own device double.
    std::vector<ElementRange> ranges;
    for (const ElementRange& r : plan_.norm_ranges) append_merged(ranges, r);
    STRATA_CHECK(ranges.size() <= kMaxNormRanges, "more than ", kMaxNormRanges,
                 " separate gradient ranges in the norm");
    if (ranges.empty()) return 0;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      cuda::ArenaScope scope(buffers_);
      cuda::sum_of_squares(norms_ + i, grads_ + (ranges[i].begin - plan_.gradient_range.begin),
                           static_cast<long>(ranges[i].size()), buffers_, ctx_.stream());
    }
    std::vector<double> sums(ranges.size());
    STRATA_CUDA_CHECK(cudaMemcpyAsync(sums.data(), norms_, sums.size() * sizeof(double),
                                      cudaMemcpyDeviceToHost, ctx_.stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    double sum = 0;
    for (double x : sums) sum += x;
    return sum;
  }

  void apply_optimizer(const OptimizerStep& step) override {
    // The step is applied: its FP8 amaxes join the delayed recipe's histories.
    for (const auto& model : models_) {
      model->hand_over_fp8_step();
      if (Fp8State* fp8 = model->fp8_state()) fp8->end_step(fp8_groups_);
    }
    if (host_optimizer_ != nullptr)
      update_on_host(step);
    else
      update_on_device(step);
    if (plan_.parameters.empty()) return;
    run_on_device(plan_.parameters, master_, plan_.parameter_range);
    if constexpr (!std::is_same_v<T, float>)
      cuda::cast(weights_, master_, n_params_, ctx_.stream());
  }

  // The fused AdamW kernel over the owned range's master weights, moments and compute copy.
  void update_on_device(const OptimizerStep& step) {
    const OptimizerConfig& o = config_.optimizer;
    const cpu::AdamWHyper hyper{static_cast<float>(step.lr),        static_cast<float>(o.beta1),
                                static_cast<float>(o.beta2),        static_cast<float>(o.eps),
                                static_cast<float>(o.weight_decay), step.count,
                                static_cast<float>(step.grad_scale)};
    const std::size_t at = owned_.begin - plan_.parameter_range.begin;
    T* copy = nullptr;
    if constexpr (!std::is_same_v<T, float>) copy = weights_ + at;
    cuda::adamw_update<T>(master_ + at, copy, grads_ + (owned_.begin - plan_.gradient_range.begin),
                          m_, v_, static_cast<long>(owned_.size()), 0, decay_, hyper, nullptr,
                          ctx_.stream());
  }

  // optimizer.offload host or disk: the update on the host (cuda_host_optimizer.h), then the
  // compute copy of the weights that came back.
  void update_on_host(const OptimizerStep& step) {
    const std::size_t at = owned_.begin - plan_.parameter_range.begin;
    host_optimizer_->update(master_ + at, grads_ + (owned_.begin - plan_.gradient_range.begin),
                            step, ctx_.stream());
    if constexpr (!std::is_same_v<T, float>)
      cuda::cast(weights_ + at, master_ + at, static_cast<long>(owned_.size()), ctx_.stream());
  }

  // set_state with the optimizer on the host: "model" to the device, the rest to the optimizer
  // (as the CPU backend's set_state).
  void set_offloaded_state(const std::vector<StateBuffer>& buffers) {
    const std::vector<StateBuffer> held =
        state_buffers(plan_.parameter_range, host_optimizer_->optimizer().shapes());
    std::vector<StateBuffer> optimizer;
    for (const StateBuffer& b : buffers) {
      if (b.name == kFp8HistoryBuffer) {
        set_fp8_histories(fp8_states(), b);
        continue;
      }
      if (match_state_buffer(held, b, "CUDA") == 0) {
        upload(master_, b.values);
        continue;
      }
      optimizer.push_back(b);
      optimizer.back().name = b.name.substr(kOptimizerPrefix.size());
    }
    host_optimizer_->optimizer().load(optimizer);
    if constexpr (!std::is_same_v<T, float>)
      cuda::cast(weights_, master_, n_params_, ctx_.stream());
    ctx_.synchronize();  // the host vectors may change once this returns
  }

  void zero_gradients() override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(grads_, 0, n_grads_ * sizeof(float), ctx_.stream()));
  }

  PipelineStage& stage() override {
    STRATA_CHECK(stages_.size() == 1, "a driven stage is one chunk, this rank holds ",
                 stages_.size());
    parameters_->bind(weights(), grads_, 1);
    return *stages_.front();
  }

  void copy_gradients(float* out) override {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(out, grads_, n_grads_ * sizeof(float), cudaMemcpyDeviceToHost,
                                      ctx_.stream()));
    ctx_.synchronize();
  }

  void set_gradients(const float* in) override {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(grads_, in, n_grads_ * sizeof(float), cudaMemcpyHostToDevice,
                                      ctx_.stream()));
    ctx_.synchronize();
  }

  PipelineExecutor& evaluator() override {
    parameters_->bind(weights(), nullptr, 0);
    return *executor_;
  }

  PipelineExecutor::Timing pipeline_timing() const override { return executor_->timing(); }

  void synchronize() override { ctx_.synchronize(); }

  std::vector<double> take_moe_totals() override {
    std::vector<double> totals;
    for (const auto& model : models_) model->take_moe_totals(totals);
    return totals;
  }

  std::size_t activation_bytes() const override {
    std::size_t bytes = 0;
    for (const auto& model : models_) bytes += model->activation_bytes();
    return bytes;
  }
  // Every chunk's blocks keep the same per layer over their own slots; a rank's layer keeps the
  // most of them.
  std::size_t activation_bytes_per_layer() const override {
    std::size_t most = 0;
    for (const auto& model : models_) most = std::max(most, model->activation_bytes_per_layer());
    return most;
  }
  MemoryAccount memory() const override {
    MemoryAccount m;
    m.master_weights = static_cast<std::size_t>(n_params_) * sizeof(float);
    if constexpr (!std::is_same_v<T, float>)
      m.compute_weights = static_cast<std::size_t>(n_params_) * sizeof(T);
    m.gradients = static_cast<std::size_t>(n_grads_) * sizeof(float);
    m.secondary_weights = parameters_->secondary_bytes();  // on the host: hpZ stages through it
    m.gathered_weights = parameters_->peak_gathered_bytes();
    m.gradient_buckets = parameters_->peak_bucket_bytes();
    // With the optimizer on the host its state holds no device memory.
    m.optimizer_state = static_cast<std::size_t>(moments_on_device_) * 2 * sizeof(float);
    m.activations = activation_bytes();
    m.communication = static_cast<std::size_t>(scratch_count_) * sizeof(float);
    return m;
  }
  std::size_t device_bytes() const override {
    std::size_t models = 0;
    for (const auto& model : models_) models += model->device_bytes();
    return models + buffers_.capacity() + ctx_.workspace_bytes();
  }

 private:
  // Separate ranges one gradient norm may sum (tensor parallelism splits the counted tensors).
  static constexpr std::size_t kMaxNormRanges = 4096;

  // Master weights (params) and gradients (grads), both moments (moments), the compute copy, the
  // norm results, the norm scratch (up to 1024 doubles), and the reductions' scratch: each
  // rounded up to the arena's alignment.
  static std::size_t buffer_bytes(long params, long grads, long moments, long scratch) {
    const std::size_t align = cuda::DeviceArena::kDefaultAlignment;
    auto rounded = [&](std::size_t bytes) { return (bytes + align - 1) / align * align; };
    const std::size_t weights_copy = std::is_same_v<T, float> ? 0 : rounded(params * sizeof(T));
    return rounded(params * sizeof(float)) + rounded(grads * sizeof(float)) +
           2 * rounded(moments * sizeof(float)) + weights_copy +
           rounded(kMaxNormRanges * sizeof(double)) + rounded(1024 * sizeof(double)) +
           rounded(scratch * sizeof(float)) + align;
  }
  // How the model reaches its weights and gradients: segments moved over NCCL when the run has
  // it and no ZeRO++ switch (those run through the host), else through the host.
  std::unique_ptr<DeviceParameterAccess<T>> make_parameter_access(const ZeroConfig& zero,
                                                                  const ProcessGroups& groups) {
    const ShardingOptions options = sharding_options(zero);
    const bool zero_plus_plus =
        options.quantized_weights || options.hierarchical_partition || options.quantized_gradients;
    STRATA_CHECK(!zero_plus_plus || !plan_.gradients_by_segment || !nccl_.dp,
                 "ZeRO++ on CUDA runs through the host, not NCCL");
    if (nccl_.dp)
      return std::make_unique<NcclShardedParameters<T>>(layout_.segments(), plan_, nccl_.sharding(),
                                                        nccl_.ep.get(), nccl_.dp_prefetch.get(),
                                                        options.when, ctx_);
    return std::make_unique<StagedShardedParameters<T>>(layout_.segments(), plan_,
                                                        groups.sharding(), options, ctx_);
  }
  // The weights the model reads: the masters in fp32, else their compute-dtype copy.
  const T* weights() const {
    if constexpr (std::is_same_v<T, float>)
      return master_;
    else
      return weights_;
  }
  void upload(float* device, const std::vector<float>& host) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float),
                                      cudaMemcpyHostToDevice, ctx_.stream()));
  }
  void download(std::vector<float>& host, const float* device) {
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, ctx_.stream()));
  }

  // Runs plan operations on a device buffer holding the elements `held` of the plan's buffer:
  // queued on the compute stream over NCCL, or through host memory by the CPU backend's code
  // (parallel/mesh/host_reduction.h).
  void run_on_device(const std::vector<RangeReduction>& ops, float* buffer, ElementRange held) {
    if (ops.empty()) return;
    if (!nccl_.dp) {
      host_buffer_.resize(held.size());
      download(host_buffer_, buffer);
      ctx_.synchronize();
      run_reductions(ops, host_buffer_.data(), groups_, held.begin);
      upload(buffer, host_buffer_);
      ctx_.synchronize();  // the host vector may change once this returns
      return;
    }
    NcclTransport transport{nccl_, scratch_, ctx_.stream()};
    interpret_reductions(ops, buffer, held.begin, transport);
  }

  Config config_;
  ReductionPlan plan_;
  ReductionGroups groups_;
  cuda::DeviceContext ctx_;  // before NCCL and the model: makes the device current
  NcclGroups nccl_;
  ParameterLayout layout_;  // the rank's: every chunk's tensors
  long n_params_;           // the master weights held: the buffer, or the owned shard (ZeRO 3)
  long n_grads_;            // the gradients held: the buffer, or the owned shard (ZeRO 2, 3)
  ElementRange owned_;
  long scratch_count_;
  // optimizer.offload host or disk: the optimizer on the host (update_on_host); null otherwise.
  std::unique_ptr<HostOffloadedOptimizer> host_optimizer_;
  long moments_on_device_;  // AdamW's m and v elements on the device: owned, or 0 when offloaded
  cuda::DeviceArena buffers_;
  cuda::DeviceRanges decay_;  // the decayed elements of the owned range, relative to its start
  // Page-locked: device-to-host copies into it are truly asynchronous, so the losses of every
  // micro-batch are collected without waiting for the device in between.
  cuda::PinnedBuffer<float> micro_losses_;
  float *master_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  T* weights_ = nullptr;            // null in fp32: the masters are the weights
  double* norms_ = nullptr;         // (kMaxNormRanges) one sum of squares per range
  float* scratch_ = nullptr;        // (scratch_count_) what a reduction receives
  std::vector<float> host_buffer_;  // a buffer on the host, when reductions stage through it
  std::vector<std::int32_t> tokens_, targets_;
  std::unique_ptr<DeviceParameterAccess<T>> parameters_;
  // Per chunk of the partition: its model, its view of parameters_, its pipeline stage.
  std::vector<std::unique_ptr<cuda::CudaGpt<T>>> models_;
  // The groups a step's FP8 amaxes are reduced over: the ranks holding the same blocks.
  std::vector<Collectives*> fp8_groups_;
  std::vector<std::unique_ptr<ChunkParameters<T, float>>> chunk_parameters_;
  std::vector<std::unique_ptr<CudaPipelineStage<T>>> stages_;
  Communicator* pp_ = nullptr;
  std::unique_ptr<PipelineExecutor> executor_;
};

}  // namespace

std::unique_ptr<TrainingBackend> make_cuda_training(const Config& config, const GptShape& shape,
                                                    const BackendPlacement& placement, int device) {
  const int count = cuda_device_count();
  if (count == 0) fail("device cuda: no usable CUDA device");
  if (device < 0 || device >= count)
    fail("device cuda: device ", device, " requested but ", count, " present");
  if (const Fp8Settings& fp8 = config.precision.fp8; fp8.enabled()) {
    // FP8 tensor cores: Ada and Hopper (compute capability 8.9) and later.
    cudaDeviceProp properties{};
    STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
    if (properties.major * 10 + properties.minor < 89)
      fail("precision.fp8: GPU ", device, " (", properties.name, ") has compute capability ",
           properties.major, ".", properties.minor,
           "; FP8 tensor cores need 8.9 or later (device: cpu emulates FP8)");
    // The rowwise recipe's per-row scales are cuBLASLt's outer-vector scales (cuBLAS 12.9 on),
    // built for Hopper.
    if (fp8.scaling == Fp8Scaling::rowwise && properties.major < 9)
      fail("precision.fp8: rowwise on GPU ", device, " (", properties.name,
           ") of compute capability ", properties.major, ".", properties.minor,
           ": cuBLASLt scales FP8 GEMMs per row from 9.0 (Hopper) on; use tensorwise or delayed");
    if (fp8.scaling == Fp8Scaling::rowwise && !cuda::fp8_row_scales_available())
      fail(
          "precision.fp8: rowwise needs cuBLAS 12.9 or later, for its per-row scales (this "
          "build's or the loaded cuBLASLt is older); use tensorwise or delayed");
  }
  if (config.precision.compute == cpu::ComputeDtype::bf16)
    return std::make_unique<CudaTrainingOf<__nv_bfloat16>>(config, shape, placement, device);
  if (config.precision.compute == cpu::ComputeDtype::fp16)
    return std::make_unique<CudaTrainingOf<__half>>(config, shape, placement, device);
  return std::make_unique<CudaTrainingOf<float>>(config, shape, placement, device);
}

}  // namespace strata
