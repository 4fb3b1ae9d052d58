// Causal multi-head self-attention on a packed qkv tensor (DESIGN §5: rows all q, then all k,
// then all v; heads contiguous), scale 1/√(head_size).
//   qkv (B, T, 3C) -> out (B, T, C);  probs (B, NH, T, T) keeps the softmax for the backward pass
// (entries above the diagonal are zero). Each (b, h) pair is two GEMMs and a row softmax.
#pragma once

namespace strata::cpu {

template <class T>
void attention_forward(T* out, T* probs, const T* qkv, int B, int T_, int C, int NH);

// Query rows [t0, T_) of attention_forward for one sequence (B = 1) whose rows [0, t0) were run
// before: incremental decoding, where qkv holds the cached rows followed by the new ones and each
// new row attends causally over all of them. No probabilities are kept (no backward pass).
//   qkv (T_, 3C) -> out (T_ − t0, C)
template <class T>
void attention_forward_rows(T* out, const T* qkv, int t0, int T_, int C, int NH);

// dqkv (B, T, 3C) overwritten. dout (B, T, C).
template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* probs, int B, int T_, int C,
                        int NH);

}  // namespace strata::cpu
