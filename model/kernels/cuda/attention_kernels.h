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
// Arguments as in attention.h; head size C / NH supported (head_size_has_kernel), B, T_ > 0,
// NH % KV == 0. Every kernel takes the qkv row stride C3 = C + 2·KV·hs and finds its heads with
// QkvColumns (attention_tile.cuh).
#pragma once

#include <cuda_runtime_api.h>

namespace strata::cuda::flash {

template <class T>
void forward_tiles(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                   cudaStream_t stream);
template <class T>
void backward_tiles(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                    int B, int T_, int C, int NH, int KV, cudaStream_t stream);

template <class T>
void forward_registers(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                       cudaStream_t stream);
template <class T>
void backward_registers(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* delta,
                        int B, int T_, int C, int NH, int KV, cudaStream_t stream);

}  // namespace strata::cuda::flash
