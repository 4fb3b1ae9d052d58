// Dtype conversion of flat device arrays: fp32 → bf16/fp16 (round to nearest even, overflow to
// ±inf, NaN kept; the rounding model/kernels/cpu/precision.h emulates) and back (exact).
//   out (n) = in (n) converted. Vectorised (8 elements per thread) when both pointers are aligned
// to 8 elements, element by element otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace strata::cuda {

// Instantiated for (To, From) = (bf16, float), (float, bf16), (half, float), (float, half).
template <class To, class From>
void cast(To* out, const From* in, long n, cudaStream_t stream);

}  // namespace strata::cuda
