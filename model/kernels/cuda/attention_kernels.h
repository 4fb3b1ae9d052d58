// The attention kernels behind attention.h's entry points (include from .cu files only). The entry
// points check their arguments, compute the backward's row sums and choose between:
//   tiles:     attention_forward.cu, attention_backward.cu. Score and probability tiles in shared
//              memory, WMMA for bf16/fp16 and FMA for fp32. The only fp32 path.
//   registers: attention_register_forward.cu, attention_register_backward.cu. bf16/fp16 only:
//              each warp keeps its 16 rows' scores, probabilities and accumulators in registers
//              and runs mma.sync m16n8k16 (mma.cuh); K/V (or Q/dout) tiles stream through shared
//              memory with asynchronous copies, double-buffered.
// Both compute the same function with the same rounding points (probabilities and dS rounded to
// the compute dtype before their products, fp32 accumulation); only summation order differs.
// Arguments: the tensors of one call and its chunk pair (model/kernels/attention_pair.h;
// attention.h checks them), head size pair.hs supported (head_size_has_kernel), B, Tq, Tk > 0,
// NH % KV == 0, causal_offset ≥ 0; every kernel finds its rows with PairRows (attention_tile.cuh).
#pragma once

#include <cuda_runtime_api.h>

#include "model/kernels/attention_pair.h"

namespace strata::cuda::flash {

// Forward: out and lse overwritten from q, k, v.
template <class T>
struct ForwardTensors {
  T* out;
  float* lse;
  const T* q;
  const T* k;
  const T* v;
};

// Backward: dq, dk, dv (in q's and kv's strides) from dout, q, k, v, lse and delta (rowsum(dout ⊙
// out)); overwritten, or with `accumulate` added to (in fp32, rounded once).
template <class T>
struct BackwardTensors {
  T* dq;
  T* dk;
  T* dv;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const float* lse;
  const float* delta;
  bool accumulate;
};

template <class T>
void forward_tiles(const ForwardTensors<T>& tensors, const AttentionPair& pair,
                   cudaStream_t stream);
template <class T>
void backward_tiles(const BackwardTensors<T>& tensors, const AttentionPair& pair,
                    cudaStream_t stream);

template <class T>
void forward_registers(const ForwardTensors<T>& tensors, const AttentionPair& pair,
                       cudaStream_t stream);
template <class T>
void backward_registers(const BackwardTensors<T>& tensors, const AttentionPair& pair,
                        cudaStream_t stream);

}  // namespace strata::cuda::flash
