// FP8 casts on the device (docs/ARCHITECTURE.md §6 "FP8"): an FP8 GEMM operand's amaxes, scales
// and codes, every value through kernels/fp8.h's functions (fp8_amax_step, fp8_scale,
// fp8_quantize), so the codes are bitwise those the CPU's emulation casts
// (model/ops/cpu_ops_fp8.cpp). x (rows, cols) row-major in T (float, bf16 or fp16).
//   tensor   one amax and scale for all of x (tensorwise, delayed)
//   rows     one per row (the GEMM sums along x's columns: rowwise)
//   columns  one per column (the GEMM sums along x's rows: rowwise's weight gradient)
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/kernels/fp8.h"

namespace strata::cuda {

// The FP8 cast a kernel that writes a tensor does in the same pass when the cast's scale is known
// before the values (the delayed recipe's history; the fused casts of the norms and GELU):
// codes[i] = fp8_quantize(value i as stored in T, *scale, format) and amax[0] = max(amax[0],
// max |value|), bit for bit fp8_cast's codes and fp8_amaxes' amax of the stored tensor (amax[0]
// ≥ 0 on entry). codes null: no cast. Device side: fp8_cast_output.cuh.
struct Fp8CastOutput {
  std::uint8_t* codes = nullptr;
  const float* scale = nullptr;
  float* amax = nullptr;
  Fp8Format format = Fp8Format::e4m3;
};

// amax (1, rows or cols floats) = the largest |x| of the tensor, of each row or of each column,
// +infinity where a value is not finite. Overwrites amax.
template <class T>
void fp8_amaxes(float* amax, const T* x, int rows, int cols, Fp8Axis axis, cudaStream_t stream);

// scale[i] = fp8_scale(amax[i], format) and inverse[i] = 1 / scale[i] (exact: powers of two), the
// GEMM's dequantisation factor, for i < count.
void fp8_scales(float* scale, float* inverse, const float* amax, int count, Fp8Format format,
                cudaStream_t stream);

// The same for one amax the host knows (the delayed recipe's history): scale[0], inverse[0].
void fp8_scale_of(float* scale, float* inverse, float amax, Fp8Format format, cudaStream_t stream);

// kept[0] = max(kept[0], amax[0]): a step's largest amax of an operand (the delayed recipe).
void fp8_keep_largest(float* kept, const float* amax, cudaStream_t stream);

// codes (rows, cols) = fp8_quantize(x · scale) with the tensor's, the row's or the column's
// scale; `transpose`: codes (cols, rows) instead, x's transpose, the K-major copy an FP8 GEMM over
// x's rows needs (matmul.h fp8_matmul).
template <class T>
void fp8_cast(std::uint8_t* codes, const T* x, const float* scale, int rows, int cols, Fp8Axis axis,
              bool transpose, Fp8Format format, cudaStream_t stream);

}  // namespace strata::cuda
