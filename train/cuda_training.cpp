// CudaTraining on the CUDA backend (built only with CUDA; cuda_training_absent.cpp otherwise).
// Status: compiled for sm_90a, never run on a GPU (untested); nor has its NCCL path.
#include "train/cuda_training.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "model/core/error.h"
#include "model/gpt_cuda.h"
#include "model/kernels/cuda/accumulate.h"
#include "model/kernels/cuda/adamw.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/cast.h"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/device_context.h"
#include "model/kernels/cuda/grad_norm.h"
#include "parallel/communicator.h"
#include "parallel/nccl_communicator.h"
#include "parallel/process_groups.h"
#include "train/cuda_pipeline_stage.h"

namespace strata {
namespace {

// Page-locked host memory: device-to-host copies into it are truly asynchronous, so the losses of
// every micro-batch are collected without waiting for the device in between.
class PinnedFloats {
 public:
  explicit PinnedFloats(std::size_t count) : count_(count) {
    STRATA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(float)));
  }
  ~PinnedFloats() { STRATA_CUDA_REPORT(cudaFreeHost(data_)); }
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
  float* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  float* data_ = nullptr;
  std::size_t count_;
};

// One NCCL communicator per parallel axis, made (in this order on every rank) from the MPI groups
// of the placement; all null when the placement stages through the host.
struct NcclGroups {
  std::unique_ptr<NcclCommunicator> tp, pp, dp;

  explicit NcclGroups(const ProcessGroups* groups) {
    if (groups == nullptr) return;
    tp = std::make_unique<NcclCommunicator>(groups->tp());
    pp = std::make_unique<NcclCommunicator>(groups->pp());
    dp = std::make_unique<NcclCommunicator>(groups->dp());
  }
};

template <class T>
class CudaTrainingOf final : public CudaTraining {
 public:
  CudaTrainingOf(const Config& config, const GptShape& shape, const CudaPlacement& placement,
                 int device)
      : config_(config),
        ctx_(device),
        nccl_(placement.nccl_groups),
        model_(ctx_, shape, placement.partition, placement.tp, config.train.micro_batch,
               placement.slots, recompute_from_name(config.recompute), nccl_.tp.get()),
        n_(static_cast<long>(model_.layout().total())),
        tied_count_(nccl_.pp && nccl_.pp->size() > 1 &&
                            (placement.partition.has_embedding || placement.partition.has_head)
                        ? static_cast<long>(model_.layout().at("wte").size)
                        : 0),
        buffers_(buffer_bytes(n_, tied_count_)),
        decay_(cuda::decayed_ranges(model_.layout())),
        micro_losses_(static_cast<std::size_t>(config.train.global_batch) * shape.seq_len) {
    master_ = buffers_.allocate<float>(n_);
    grads_ = buffers_.allocate<float>(n_);
    m_ = buffers_.allocate<float>(n_);
    v_ = buffers_.allocate<float>(n_);
    if constexpr (!std::is_same_v<T, float>) weights_ = buffers_.allocate<T>(n_);
    norms_ = buffers_.allocate<double>(kMaxNormRanges);
    if (tied_count_ > 0) tied_theirs_ = buffers_.allocate<float>(tied_count_);
    tokens_.resize(static_cast<std::size_t>(config.train.micro_batch) * shape.seq_len);
    targets_.resize(tokens_.size());
    // Evaluation, and the step of a pipeline stage, run through the executor; a lone stage trains
    // in the model's fused forward-backward pass instead.
    if (placement.pp != nullptr) {
      STRATA_CHECK(placement.program != nullptr, "a pipeline group needs its schedule");
      pp_ = placement.pp;
      program_ = *placement.program;
      stage_ = std::make_unique<CudaPipelineStage<T>>(model_, weights(), grads_);
      executor_ = std::make_unique<PipelineExecutor>(*stage_, *pp_, program_,
                                                     config.train.micro_batch, shape.seq_len);
    }
  }

  void load(const std::vector<float>& params, const std::vector<float>& adam_m,
            const std::vector<float>& adam_v) override {
    STRATA_CHECK(params.size() == static_cast<std::size_t>(n_) && adam_m.size() == params.size() &&
                 adam_v.size() == params.size());
    upload(master_, params);
    upload(m_, adam_m);
    upload(v_, adam_v);
    if constexpr (!std::is_same_v<T, float>) cuda::cast(weights_, master_, n_, ctx_.stream());
    ctx_.synchronize();  // the host vectors may change once this returns
  }

  void store(std::vector<float>& params, std::vector<float>& adam_m,
             std::vector<float>& adam_v) override {
    download(params, master_);
    download(adam_m, m_);
    download(adam_v, v_);
    ctx_.synchronize();
  }

  double accumulate_gradients(int micro_batches, float loss_scale,
                              const MicroBatchSource& source) override {
    STRATA_CUDA_CHECK(cudaMemsetAsync(grads_, 0, n_ * sizeof(float), ctx_.stream()));
    if (pp_ != nullptr && pp_->size() > 1) return executor_->train_step(loss_scale, source);
    const int B = config_.train.micro_batch, T_ = model_.shape().seq_len;
    const std::size_t rows = static_cast<std::size_t>(B) * T_;
    STRATA_CHECK(static_cast<std::size_t>(micro_batches) * rows <= micro_losses_.size());
    for (int mb = 0; mb < micro_batches; ++mb) {
      source(mb, tokens_.data(), targets_.data());
      model_.forward_backward(weights(), grads_, tokens_.data(), targets_.data(), B, T_,
                              loss_scale);
      STRATA_CUDA_CHECK(cudaMemcpyAsync(micro_losses_.data() + mb * rows, model_.losses(),
                                        rows * sizeof(float), cudaMemcpyDeviceToHost,
                                        ctx_.stream()));
    }
    ctx_.synchronize();
    // Each micro-batch's mean loss, summed: as the CPU executor reports it.
    double loss_sum = 0;
    for (int mb = 0; mb < micro_batches; ++mb) {
      double sum = 0;
      for (std::size_t i = 0; i < rows; ++i) sum += micro_losses_.data()[mb * rows + i];
      loss_sum += sum / static_cast<double>(rows);
    }
    return loss_sum;
  }

  void synchronize_gradients(const GradientSyncPlan& plan, const ProcessGroups& groups) override {
    if (!nccl_.dp) {  // through the host, by the CPU backend's code
      download(host_grads_, grads_);
      ctx_.synchronize();
      strata::synchronize_gradients(plan, host_grads_.data(), groups);
      upload(grads_, host_grads_);
      ctx_.synchronize();  // the host vector may change once this returns
      return;
    }
    // The same three reductions on the device, queued on the compute stream.
    cudaStream_t stream = ctx_.stream();
    for (const auto& [offset, count] : plan.tp_sums)
      nccl_.tp->all_reduce_sum(grads_ + offset, count, stream);
    nccl_.dp->all_reduce_sum(grads_, plan.dp_count, stream);
    if (plan.tied_peer >= 0) {  // after the dp sum: see gradient_sync.h
      STRATA_CHECK(static_cast<long>(plan.tied_count) == tied_count_,
                   "the tied embedding's gradient does not match its exchange buffer");
      float* mine = grads_ + plan.tied_offset;
      nccl_.pp->exchange(mine, tied_theirs_, plan.tied_count, plan.tied_peer, stream);
      cuda::add_into(mine, tied_theirs_, tied_count_, stream);  // a + b = b + a: both ends agree
    }
  }

  double sum_of_squares(const std::vector<std::pair<std::size_t, std::size_t>>& ranges) override {
    // Adjacent ranges merge into one reduction; each reduction writes its own device double.
    std::vector<std::pair<std::size_t, std::size_t>> merged;
    for (const auto& [first, count] : ranges) {
      STRATA_CHECK(first + count <= static_cast<std::size_t>(n_), "gradient range out of bounds");
      if (count == 0) continue;
      if (!merged.empty() && merged.back().first + merged.back().second == first)
        merged.back().second += count;
      else
        merged.emplace_back(first, count);
    }
    STRATA_CHECK(merged.size() <= kMaxNormRanges, "more than ", kMaxNormRanges,
                 " separate gradient ranges in the norm");
    if (merged.empty()) return 0;
    for (std::size_t i = 0; i < merged.size(); ++i) {
      cuda::ArenaScope scope(buffers_);
      cuda::sum_of_squares(norms_ + i, grads_ + merged[i].first,
                           static_cast<long>(merged[i].second), buffers_, ctx_.stream());
    }
    std::vector<double> sums(merged.size());
    STRATA_CUDA_CHECK(cudaMemcpyAsync(sums.data(), norms_, sums.size() * sizeof(double),
                                      cudaMemcpyDeviceToHost, ctx_.stream()));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    double sum = 0;
    for (double x : sums) sum += x;
    return sum;
  }

  void update(double lr, double grad_scale, int step) override {
    const OptimizerConfig& o = config_.optimizer;
    const cpu::AdamWHyper hyper{static_cast<float>(lr),
                                static_cast<float>(o.beta1),
                                static_cast<float>(o.beta2),
                                static_cast<float>(o.eps),
                                static_cast<float>(o.weight_decay),
                                step,
                                static_cast<float>(grad_scale)};
    cuda::adamw_update<T>(master_, weights_, grads_, m_, v_, n_, 0, decay_, hyper, nullptr,
                          ctx_.stream());
  }

  PipelineExecutor& executor() override {
    STRATA_CHECK(executor_ != nullptr, "this device step was made without a pipeline group");
    return *executor_;
  }

  double gradient_norm() override {
    return std::sqrt(sum_of_squares({{std::size_t{0}, static_cast<std::size_t>(n_)}}));
  }

  void synchronize() override { ctx_.synchronize(); }
  std::string device_name() const override {
    cudaDeviceProp properties{};
    STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, ctx_.device()));
    return properties.name;
  }

  std::size_t activation_bytes() const override { return model_.activation_bytes(); }
  std::size_t activation_bytes_per_layer() const override {
    return model_.activation_bytes_per_layer();
  }
  std::size_t device_bytes() const override {
    return model_.device_bytes() + buffers_.capacity() + ctx_.workspace_bytes();
  }

 private:
  // Separate ranges one gradient norm may sum (tensor parallelism splits the counted tensors).
  static constexpr std::size_t kMaxNormRanges = 4096;

  // Master weights, gradients, both moments, the compute copy, the norm results, the norm
  // scratch (up to 1024 doubles), and the other end's tied-embedding gradient (tied_count floats):
  // each rounded up to the arena's alignment.
  static std::size_t buffer_bytes(long n, long tied_count) {
    const std::size_t align = cuda::DeviceArena::kDefaultAlignment;
    auto rounded = [&](std::size_t bytes) { return (bytes + align - 1) / align * align; };
    const std::size_t weights_copy = std::is_same_v<T, float> ? 0 : rounded(n * sizeof(T));
    return 4 * rounded(n * sizeof(float)) + weights_copy +
           rounded(kMaxNormRanges * sizeof(double)) + rounded(1024 * sizeof(double)) +
           rounded(tied_count * sizeof(float)) + align;
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
    host.resize(static_cast<std::size_t>(n_));
    STRATA_CUDA_CHECK(cudaMemcpyAsync(host.data(), device, host.size() * sizeof(float),
                                      cudaMemcpyDeviceToHost, ctx_.stream()));
  }

  Config config_;
  cuda::DeviceContext ctx_;  // first: makes the device current for NCCL and the model
  NcclGroups nccl_;
  cuda::CudaGpt<T> model_;
  long n_;
  long tied_count_;  // elements of the tied-embedding exchange over NCCL (0: none)
  cuda::DeviceArena buffers_;
  cuda::DeviceRanges decay_;
  PinnedFloats micro_losses_;
  float *master_ = nullptr, *grads_ = nullptr, *m_ = nullptr, *v_ = nullptr;
  T* weights_ = nullptr;           // null in fp32: the masters are the weights
  double* norms_ = nullptr;        // (kMaxNormRanges) one sum of squares per range
  float* tied_theirs_ = nullptr;   // (tied_count_) the other pipeline end's wte gradient
  std::vector<float> host_grads_;  // the gradients on the host, when they sync through it
  std::vector<std::int32_t> tokens_, targets_;
  std::unique_ptr<CudaPipelineStage<T>> stage_;
  Communicator* pp_ = nullptr;  // null: a lone stage without a pipeline group
  PipelineProgram program_;
  std::unique_ptr<PipelineExecutor> executor_;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  // No driver or no device is not an error here: the answer is 0.
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

std::string cuda_device_identity(int device) {
  cudaDeviceProp properties{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id;
  for (char byte : properties.uuid.bytes) {
    const auto b = static_cast<unsigned char>(byte);
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

bool cuda_supports_shape(const GptShape& shape) {
  return shape.n_head > 0 && shape.d_model % shape.n_head == 0 &&
         cuda::attention_head_size_supported(shape.head_size());
}

std::unique_ptr<CudaTraining> make_cuda_training(const Config& config, const GptShape& shape,
                                                 int device) {
  CudaPlacement whole;
  whole.partition = ModelPartition::whole(shape);
  return make_cuda_training(config, shape, whole, device);
}

std::unique_ptr<CudaTraining> make_cuda_training(const Config& config, const GptShape& shape,
                                                 const CudaPlacement& placement, int device) {
  const int count = cuda_device_count();
  if (count == 0) fail("device cuda: no usable CUDA device");
  if (device < 0 || device >= count)
    fail("device cuda: device ", device, " requested but ", count, " present");
  if (config.precision.compute == "bf16")
    return std::make_unique<CudaTrainingOf<__nv_bfloat16>>(config, shape, placement, device);
  if (config.precision.compute == "fp16")
    return std::make_unique<CudaTrainingOf<__half>>(config, shape, placement, device);
  return std::make_unique<CudaTrainingOf<float>>(config, shape, placement, device);
}

}  // namespace strata
