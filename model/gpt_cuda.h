// GPT-2 (DESIGN §5) on one CUDA device: the whole model (one pipeline stage, no tensor
// parallelism), forward and backward with the kernels of model/kernels/cuda, the same op order as
// the CPU model (model/gpt.h) so that fp32 runs agree with it to rounding:
//   x = wte[tokens] + wpe                                      (N, C), N = B·T
//   per block:  ln1 = LN(x) → qkv = ln1·Wqkvᵀ + b → atty = flash_attention(qkv)
//               x2 = x + atty·Wprojᵀ + b  and  ln2 = LN(x2)      (one fused kernel)
//               fch = ln2·Wfcᵀ + b, h = gelu(fch)                (one GEMM with GELU epilogue)
//               out = x2 + h·Wprojᵀ + b
//   lnf = LN(x_L) → logits = lnf·wteᵀ (N, Vp) → softmax cross-entropy on the V real columns
//
// Dtypes: T (float, __nv_bfloat16, __half) is the compute dtype of the weights copy the model
// reads, of every activation and every activation gradient; parameter gradients, LayerNorm
// statistics, attention logsumexps and losses are fp32 (DESIGN §6). The flat buffers (weights in
// T, gradients in fp32) follow ParameterLayout::for_gpt, so offsets are the CPU model's.
//
// Memory: every activation lives in one device arena sized at construction for max_batch
// sequences of seq_len (no allocation during a step); kernels take their scratch from a second
// arena. Attention keeps no (T, T) matrix, only the logsumexp of each query row. Recompute
// (activation checkpointing) as in the CPU model: `selective` keeps ln1 and recomputes qkv and
// the attention output (one GEMM and the attention forward) in the block's backward; `full` keeps
// only each block's input and reruns the block's forward into a one-layer workspace. Recomputation
// runs the forward's own code on the same inputs, so gradients are bitwise unchanged.
//
// Everything is queued on the context's compute stream. Tokens travel through a page-locked
// staging buffer: the host waits only until the previous micro-batch's tokens have left it (by
// then that micro-batch's kernels are all queued), and for the reads the caller asks for.
//
// Status: compiled for sm_90a, never run on a GPU (untested).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "model/gpt.h"
#include "model/gpt_shape.h"
#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/device_context.h"
#include "model/parameter_layout.h"

namespace strata::cuda {

class BufferCarver;  // gpt_cuda.cu

template <class T>
class CudaGpt {
 public:
  // Throws when the head size has no attention kernel (attention_head_size_supported).
  CudaGpt(DeviceContext& ctx, const GptShape& shape, int max_batch, Recompute recompute);
  ~CudaGpt();
  CudaGpt(const CudaGpt&) = delete;
  CudaGpt& operator=(const CudaGpt&) = delete;

  const GptShape& shape() const { return shape_; }
  const ParameterLayout& layout() const { return layout_; }
  Recompute recompute() const { return recompute_; }
  DeviceContext& context() const { return ctx_; }

  // Training, one micro-batch: forward, loss and backward in one pass (the cross-entropy gradient
  // is fused into its forward). weights (layout().total(), T, device); grads (fp32, device)
  // += d(loss_scale · mean loss)/d(params). tokens, targets (B, T_) on the host, ids < vocab_size
  // (checked). The B·T_ per-position losses stay on the device: losses().
  void forward_backward(const T* weights, float* grads, const std::int32_t* tokens,
                        const std::int32_t* targets, int B, int T_, float loss_scale);

  // Evaluation: forward only, per-position losses into losses(). targets may be null: logits
  // only (logits() then holds (B·T_, Vp) in T).
  void forward(const T* weights, const std::int32_t* tokens, const std::int32_t* targets, int B,
               int T_);

  // Device pointers valid until the next call: per-position losses (B·T_, fp32) of the last pass
  // if it had targets; logits (B·T_, Vp) of the last pass if it was a forward without targets;
  // null otherwise.
  const float* losses() const { return losses_; }
  const T* logits() const { return logits_; }
  // Σ losses of the last pass (copies B·T_ floats to the host and synchronises the stream).
  double loss_sum() const;

  // Device bytes of the activations kept between forward and backward (all layers, the head's
  // logits, the recompute workspace), and of one block's share of them.
  std::size_t activation_bytes() const { return activation_bytes_; }
  std::size_t activation_bytes_per_layer() const { return layer_bytes_; }
  // Device bytes this model reserved: activations, backward buffers and kernel scratch.
  std::size_t device_bytes() const { return activations_.capacity() + scratch_.capacity(); }

 private:
  struct Layer;    // one block's activation pointers
  struct Buffers;  // every activation and scratch pointer
  static std::size_t carve(Buffers& b, BufferCarver& c, const GptShape& shape, int max_batch,
                           Recompute recompute);
  static std::size_t reservation_bytes(const GptShape& shape, int max_batch, Recompute recompute);
  void upload_tokens(const std::int32_t* tokens, const std::int32_t* targets, long N);
  Layer layer(int l, bool recomputing) const;
  void embed(const T* weights, int B, int T_);
  void block_forward(const Layer& a, const T* weights, int l, int B, int T_);
  void attention_core_forward(const Layer& a, const T* weights, int l, int B, int T_);
  void head_forward(const T* weights, int N);
  void head_backward(const T* weights, float* grads, int N);
  void block_backward(const T* weights, float* grads, int l, int B, int T_);
  void embed_backward(float* grads, int B, int T_);

  DeviceContext& ctx_;
  GptShape shape_;
  ParameterLayout layout_;
  int max_batch_;
  Recompute recompute_;
  DeviceArena activations_;
  DeviceArena scratch_;
  std::unique_ptr<Buffers> buffers_;
  float* losses_ = nullptr;
  T* logits_ = nullptr;
  int last_rows_ = 0;                   // B·T_ of the last pass
  std::int32_t* staging_ = nullptr;     // page-locked (2, max_batch·seq_len): tokens, targets
  cudaEvent_t staging_free_ = nullptr;  // recorded after the copies out of staging_
  std::size_t activation_bytes_ = 0;
  std::size_t layer_bytes_ = 0;
};

extern template class CudaGpt<float>;
extern template class CudaGpt<__nv_bfloat16>;
extern template class CudaGpt<__half>;

}  // namespace strata::cuda
