// Fused softmax + cross-entropy over the vocabulary (natural log).
//   logits (N, Vp), only the first V columns are real tokens; padded columns get probability 0.
#pragma once

#include <cstdint>

namespace strata::cpu {

// losses (N) = −log softmax(logits[n, :V])[targets[n]]; probs (N, Vp) may alias logits.
template <class T>
void softmax_crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets,
                                  int N, int V, int Vp);

// dlogits (N, Vp) = (probs − onehot(target)) · dlosses[n]; padded columns 0. May alias probs.
template <class T>
void softmax_crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                                   const T* dlosses, int N, int V, int Vp);

}  // namespace strata::cpu
