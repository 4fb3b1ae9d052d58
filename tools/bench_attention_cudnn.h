// cuDNN 9's fused flash attention (scaled dot-product attention, causal, scale 1/√hs), forward and
// backward, on Strata's packed layouts, for `bench attention` to time and check Strata's kernel
// against (tools/bench_attention.cpp).
//
// Layouts are Strata's (model/kernels/cuda/attention.h), given to cuDNN as strided views, so no
// copy is timed: qkv (B, T, 3C) as q, k, v of dims (B, NH, T, hs) with strides (T·3C, hs, 3C, 1)
// at columns 0, C and 2C; out and dout (B, T, C) with strides (T·C, hs, C, 1); dqkv like qkv.
//
// The graphs are the composite pattern cudnn_frontend lowers its "sdpa" and "sdpa_backward" nodes
// to (Q·Kᵀ, scale, causal mask from generated row/column indices, softmax with max/sum reductions,
// P·V; the backward recomputes P from the stats), which cuDNN's runtime fuses into one flash kernel
// per pass. bf16 and fp16 only: cuDNN has no fp32 flash attention.
//
// Status: compiled for sm_90a, never run on a GPU (untested).
#pragma once

#if STRATA_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "model/kernels/cuda/arena.h"
#include "tools/bench_cudnn_graph.h"

namespace strata::bench {

enum class AttentionIoType { bf16, fp16 };

class CudnnAttention {
 public:
  // Builds the forward and backward plans for qkv (B, T, 3C) with NH heads. Throws
  // CudnnUnsupported when cuDNN has no engine for either (GPU, shape, head size).
  CudnnAttention(int B, int T, int C, int NH, AttentionIoType io);

  // out (B, T, C); stats (B, NH, T) fp32 = log Σ_s≤t exp(q_t·k_s / √hs) per query row, the same
  // quantity as Strata's lse. Enqueued on `stream`.
  void forward(void* out, float* stats, const void* qkv, cudaStream_t stream);
  // dqkv (B, T, 3C) overwritten, from dout (B, T, C) and the forward's qkv, out and stats.
  void backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* stats,
                cudaStream_t stream);

 private:
  std::int64_t B_, T_, C_, NH_, hs_;
  std::size_t element_bytes_;
  // Host scalars the variant packs bind by address (cuDNN passes them to the kernel by value).
  float scale_, mask_fill_, one_ = 1.0f;
  CudnnHandle handle_;
  BackendDescriptor forward_plan_, backward_plan_;
  // The larger plan workspace, then the backward's fp32 dQ accumulator (B, NH, T, hs).
  std::optional<cuda::DeviceArena> scratch_;
  void* workspace_ = nullptr;
  float* dq_accumulator_ = nullptr;
};

}  // namespace strata::bench
#endif
