// Fused AdamW over the flat parameter buffers (model/kernels/cpu/adamw.h,
// train/optimizer/optimizer.h): one pass reads the fp32 gradient and updates in place the fp32
// master weights and both fp32 moments, and writes the compute-dtype copy of the weights the
// forward pass reads:
//   g = grad · grad_scale · device_scale      (1/loss_scale and the clip factor folded in)
//   m = β1·m + (1−β1)·g ;  v = β2·v + (1−β2)·g²
//   p −= lr · ( m̂ / (√v̂ + eps) + weight_decay · p ),  m̂ = m / (1−β1^t), v̂ = v / (1−β2^t)
// weight_decay applies only to elements inside the decayed ranges (ParameterLayout::
// decayed_ranges: 2-D weights), exactly as the CPU optimizer sets it. The element arithmetic is
// model/kernels/adamw_element.h, the CPU kernel's own; the bias corrections are computed on the
// host by the same function.
//
// ZeRO: the buffers may be a shard of the flat layout; `first_index` is the layout index of their
// element 0, and the decayed ranges are in layout indices (or in the shard's, with first_index 0).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "model/core/element_range.h"
#include "model/kernels/cpu/adamw.h"
#include "model/kernels/cuda/device_buffer.h"

namespace strata::cuda {

// A device copy of sorted, disjoint ranges, made once (synchronous upload at construction).
class DeviceRanges {
 public:
  explicit DeviceRanges(const std::vector<ElementRange>& ranges);

  const ElementRange* data() const { return ranges_.get(); }
  int size() const { return static_cast<int>(ranges_.size()); }

 private:
  DeviceBuffer<ElementRange> ranges_;
};

// Updates elements [0, n) of master, m, v from grads; writes weights_copy (n) in T when it is not
// null (T = float with a null copy: fp32 training, the master weights are the weights).
// hyper.weight_decay is the decay of the ranges in `decay`; elements outside get none.
// device_scale (nullable) is one device float multiplying the gradients, e.g. from
// gradient_scale_from_norm (grad_norm.h); a non-finite value there means "skip this step": the
// kernel then leaves every buffer untouched, without a host round trip.
template <class T>
void adamw_update(float* master, T* weights_copy, const float* grads, float* m, float* v, long n,
                  long first_index, const DeviceRanges& decay, const cpu::AdamWHyper& hyper,
                  const float* device_scale, cudaStream_t stream);

}  // namespace strata::cuda
