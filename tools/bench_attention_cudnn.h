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
// The backward exists in two forms (CudnnBackwardForm), because cudnn_frontend's lowering changed
// over cuDNN 9 and cuDNN matches the pattern as a whole: the legacy form (rowsum(dO ⊙ O) a virtual
// tensor, dO·Vᵀ multiplied by a by-value 1 where dropout's mask would go, the fp32 dQ accumulator
// F16x16-reordered) is tried first; when cuDNN rejects it, the current form (rowsum(dO ⊙ O) a real
// (B, NH, T, 1) fp32 tensor in this object's scratch, no multiply by 1 after dO·Vᵀ, a plain dQ
// accumulator). backward_form() says which one runs.
//
// Timing-minded: plans and variant packs are built up front (the constructor, bind()), and the
// stream is set once, so forward() and backward() enqueue cuDNN's kernels and nothing else (the
// backward also zeroes the dQ accumulator first, as cudnn_frontend did before cuDNN 9.6).
//
// Optional: built only where the build finds cuDNN's headers (STRATA_CUDNN_BENCH,
// tools/CMakeLists.txt), like the rest of the comparison (bench_cudnn_graph.h,
// bench_cudnn_loader.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/kernels/cuda/arena.h"
#include "tools/bench_cudnn_graph.h"

namespace strata::bench {

enum class AttentionIoType { bf16, fp16 };

// The backward graph that cuDNN accepted (see the header comment).
enum class CudnnBackwardForm { legacy, current };
const char* backward_form_name(CudnnBackwardForm form);  // "legacy" | "current"

// The device buffers of one forward + backward, in Strata's layouts. Bound once (bind()); they must
// outlive the CudnnAttention they are bound to.
struct CudnnAttentionBuffers {
  const void* qkv;   // (B, T, 3C), read by both passes
  void* out;         // (B, T, C), written by forward, read by backward
  float* stats;      // (B, NH, T) fp32, written by forward, read by backward
  const void* dout;  // (B, T, C), read by backward
  void* dqkv;        // (B, T, 3C), overwritten by backward
};

class CudnnAttention {
 public:
  // Builds the forward and backward plans for qkv (B, T, 3C) with NH heads and sets `stream` on
  // its cuDNN handle (every pass is enqueued there). Throws CudnnUnsupported when cuDNN has no
  // engine for the forward or for either backward form (GPU, shape, head size).
  CudnnAttention(int B, int T, int C, int NH, AttentionIoType io, cudaStream_t stream);
  // Variant packs point at members (the host scalars): the object stays where it was built.
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds both passes' variant packs for `buffers`; returns the binding's index.
  std::size_t bind(const CudnnAttentionBuffers& buffers);

  // out and stats of `binding` from its qkv; stats = log Σ_s≤t exp(q_t·k_s / √hs) per query row,
  // the same quantity as Strata's lse.
  void forward(std::size_t binding);
  // dqkv of `binding` from its dout and the forward's qkv, out and stats.
  void backward(std::size_t binding);
  // The zeroing backward() starts with, alone (so a reader can see what it costs).
  void zero_dq_accumulator();

  CudnnBackwardForm backward_form() const { return backward_.form; }
  // Why the legacy backward form was rejected; empty when it runs.
  const std::string& backward_fallback_reason() const { return backward_.legacy_failure; }

 private:
  struct BackwardPlan {
    CudnnBackwardForm form;
    ExecutionPlan plan;
    std::string legacy_failure;
  };
  static BackwardPlan build_backward(cudnnHandle_t handle, int B, int T, int C, int NH,
                                     AttentionIoType io);

  std::int64_t B_, T_, C_, NH_, hs_;
  std::size_t element_bytes_;
  // Host scalars the variant packs bind by address (cuDNN passes them to the kernel by value).
  float scale_, mask_fill_, one_ = 1.0f;
  cudaStream_t stream_;
  CudnnHandle handle_;
  ExecutionPlan forward_plan_;
  BackwardPlan backward_;
  // The larger plan workspace, the backward's fp32 dQ accumulator (B, NH, T, hs), and for the
  // current backward form its rowsum(dO ⊙ O) (B, NH, T, 1) fp32.
  std::optional<cuda::DeviceArena> scratch_;
  void* workspace_ = nullptr;
  float* dq_accumulator_ = nullptr;
  float* softmax_sum_ = nullptr;
  // One per bind(), in binding order.
  std::vector<BackendDescriptor> forward_packs_, backward_packs_;
};

}  // namespace strata::bench
