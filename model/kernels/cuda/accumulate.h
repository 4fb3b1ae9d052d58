// Flat fp32 arrays on the device. add_into: sum[i] += addend[i], for the gradient of the tied
// embedding, whose two halves (the first pipeline stage's embedding, the last stage's head) are
// exchanged and summed; the CPU backend does the same loop in parallel/mesh/host_reduction.cpp.
// a + b is b + a bitwise, so both ends of the exchange hold the same sum. fill: every element one
// value (the cross-entropy's gradient seed, loss_scale / N per row).
#pragma once

#include <cuda_runtime_api.h>

namespace strata::cuda {

// sum (n) += addend (n), queued on `stream`; the arrays may not overlap unless they are the same.
void add_into(float* sum, const float* addend, long n, cudaStream_t stream);

// out (n) = value, queued on `stream`.
void fill(float* out, float value, long n, cudaStream_t stream);

}  // namespace strata::cuda
