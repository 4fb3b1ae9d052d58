// Rotary position embeddings on the GPU, in place on the rows of a RopeLayout, the same functions
// and arguments as model/kernels/cpu/rope.h (in place for the reasons given there; the math, the
// rotate-half pairing and the angle's precision: model/kernels/rope.h).
//   forward:  the 2·NH q and k heads of qkv (B, T, 3C) (rope_qk_layout), x ← R(p)·x
//   backward: the same heads of dqkv (B, T, 3C), dx ← R(p)ᵀ·dx (the turn by −p·θ_i)
// Each thread takes a few consecutive pairs (16 bytes of T from each half of a head) of one row,
// computes their cos and sin once in fp32 from the double-precision reduced angle, and turns them
// in every head of the row. θ_i (double) is computed per block into shared memory (hs/2 doubles).
// Elements are read as T and turned in fp32; the result is rounded to T once.
//
// T: float, __nv_bfloat16, __half. 16-byte accesses when hs/2, column and row_stride are multiples
// of 16 bytes of T and the pointer is 16-byte aligned (the packed qkv with hs a multiple of 16);
// element by element otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "model/kernels/rope.h"

namespace strata::cuda {

template <class T>
void rope_forward(T* qkv, const RopeLayout& layout, cudaStream_t stream);

template <class T>
void rope_backward(T* dqkv, const RopeLayout& layout, cudaStream_t stream);

}  // namespace strata::cuda
