// Rotary position embeddings, in place on the rows of a RopeLayout (the math, the pairing and the
// angle's precision: model/kernels/rope.h). In the attention block RoPE turns q and k of the qkv
// activation right after the qkv GEMM:
//   qkv (B, T, 3C): columns [0, 2C) of each row, 2·NH heads of hs = C/NH (rope_qk_layout)
// In place because nothing needs the unturned q and k: the attention forward and backward and the
// KV cache read the turned ones, and RoPE's own backward, being linear, needs no saved input. So no
// second (B, T, 3C) buffer and no copy of v; recomputation reruns the GEMM and then this.
//
// The backward pass turns the gradients dq, dk (in dqkv, the same layout) back, in place:
//   dx = Rᵀ(p)·dy, the turn by −p·θ_i.
// cos and sin are computed in T per (position, pair), once per position for all B sequences and
// all heads; nothing is tabulated. T: float, double. Outputs are not rounded to a compute dtype
// (the ops layer rounds; rounding an already rounded v changes nothing).
#pragma once

#include "model/kernels/rope.h"

namespace strata::cpu {

template <class T>
void rope_forward(T* qkv, const RopeLayout& layout);

template <class T>
void rope_backward(T* dqkv, const RopeLayout& layout);

}  // namespace strata::cpu
