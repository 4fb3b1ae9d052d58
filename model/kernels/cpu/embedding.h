// Token + position embedding: out[b, t, :] = wte[tokens[b, t], :] + wpe[t, :].
#pragma once

#include <cstdint>

namespace strata::cpu {

// out (B*T, C); tokens (B*T); wte (Vp, C); wpe (T_max, C). Overwrites out.
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B,
                       int T_, int C);

// dwte and dwpe accumulate (+=). Scatter-add over tokens is done per channel block so threads
// never write the same row concurrently and the order of additions is fixed (reproducible).
template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int T_,
                        int C);

}  // namespace strata::cpu
