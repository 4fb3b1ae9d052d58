// The device side of Fp8CastOutput (fp8_cast.h), for kernels that cast what they write to FP8
// (include from .cu files only): each thread casts its values as it stores them and keeps their
// largest magnitude; each warp then joins the tensor's amax with one atomicMax on the float's bits
// (non-negative floats, +infinity included, order as their bits do as unsigned integers).
#pragma once

#include "model/kernels/cuda/fp8_cast.h"
#include "model/kernels/fp8.h"

namespace strata::cuda {

class Fp8Caster {
 public:
  __device__ explicit Fp8Caster(const Fp8CastOutput& out)
      : out_(out), scale_(out.codes != nullptr ? *out.scale : 1.0f) {}

  // Value i of the tensor, as stored.
  __device__ void cast(long i, float value) {
    if (out_.codes == nullptr) return;
    out_.codes[i] = fp8_quantize(value, scale_, out_.format);
    largest_ = fp8_amax_step(largest_, value);
  }

  // Every lane of a full warp, once, after its last cast.
  __device__ void join_amax() {
    if (out_.codes == nullptr) return;
    for (int offset = 16; offset > 0; offset /= 2)
      largest_ = fmaxf(largest_, __shfl_xor_sync(0xffffffffu, largest_, offset));
    if (threadIdx.x % 32 == 0)
      atomicMax(reinterpret_cast<unsigned*>(out_.amax), __float_as_uint(largest_));
  }

 private:
  Fp8CastOutput out_;
  float scale_;
  float largest_ = 0.0f;
};

}  // namespace strata::cuda
