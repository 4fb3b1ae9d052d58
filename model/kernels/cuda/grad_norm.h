// Global gradient norm and overflow detection, on the device without a host round trip:
//  - sum_of_squares: Σ x² accumulated in double (as cpu::sum_of_squares), deterministic two-pass
//    reduction (a fixed grid of per-block partial sums whose size depends only on n, then one block
//    adding them in order) into a device scalar. Ranks holding shards add their scalars
//    (all-reduce).
//  - any_nonfinite: an int flag set to 1 when an inf or NaN is present (fp16 loss scaling).
//  - gradient_scale_from_norm: the factor AdamW multiplies gradients by (adamw.h device_scale):
//    1/loss_scale times the clip factor of train/optimizer/optimizer.h clip_factor, NaN when the
//    norm is not finite (AdamW then skips the step).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "model/kernels/cuda/arena.h"

namespace strata::cuda {

// *sum (device double) = Σ values[i]², overwritten. Scratch: up to 1024 doubles from `arena`.
void sum_of_squares(double* sum, const float* values, long n, DeviceArena& arena,
                    cudaStream_t stream);

// *flag (device int) = 1 if any of values (n) is inf or NaN. accumulate == false first sets it
// to 0; true leaves an earlier 1 in place (several buffers, one flag).
// T: float, __nv_bfloat16, __half.
template <class T>
void any_nonfinite(int* flag, const T* values, long n, bool accumulate, cudaStream_t stream);

// *scale = inv_loss_scale · clip, with norm = √(*sum_of_squares) · inv_loss_scale the norm of the
// unscaled gradients and clip = max_norm / norm when max_norm > 0 and norm > max_norm, else 1.
// NaN when the norm is inf or NaN. One thread; reads and writes device memory only.
void gradient_scale_from_norm(float* scale, const double* sum_of_squares, float inv_loss_scale,
                              float max_norm, cudaStream_t stream);

}  // namespace strata::cuda
