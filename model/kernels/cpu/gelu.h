// GELU, tanh approximation (GPT-2, DESIGN §5):
//   gelu(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
#pragma once

namespace strata::cpu {

template <class T>
void gelu_forward(T* out, const T* inp, long n);

// dinp = gelu'(inp) · dout (overwritten).
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, long n);

}  // namespace strata::cpu
