#include "model/kernels/cuda/attention_merge.h"

#include "model/kernels/attention_merge.h"
#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {
namespace {

template <class T>
__global__ void __launch_bounds__(kMapThreads)
    attention_merge_kernel(T* out, float* lse, const T* part, const float* part_lse,
                           const AttentionMergeShape s) {
  const long rows = static_cast<long>(s.B) * s.NH * s.Tq;
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long item = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; item < rows;
       item += stride) {
    const int t = static_cast<int>(item % s.Tq);
    const int h = static_cast<int>(item / s.Tq % s.NH);
    const int b = static_cast<int>(item / (static_cast<long>(s.Tq) * s.NH));
    const long stat = b * s.stat_batch + h * s.stat_head + t;
    const AttentionMergeWeights<float> w = attention_merge_weights(lse[stat], part_lse[stat]);
    const long at = b * s.out_batch + t * s.out_row + static_cast<long>(h) * s.hs;
    for (int d = 0; d < s.hs; ++d)
      out[at + d] = from_float<T>(to_float(out[at + d]) * w.own + to_float(part[at + d]) * w.part);
    lse[stat] = w.lse;
  }
}

}  // namespace

template <class T>
void attention_merge(T* out, float* lse, const T* part, const float* part_lse,
                     const AttentionMergeShape& shape, cudaStream_t stream) {
  const long rows = static_cast<long>(shape.B) * shape.NH * shape.Tq;
  if (rows == 0) return;
  attention_merge_kernel<<<map_blocks(rows), kMapThreads, 0, stream>>>(out, lse, part, part_lse,
                                                                       shape);
  STRATA_CUDA_CHECK_LAUNCH();
}

template void attention_merge<float>(float*, float*, const float*, const float*,
                                     const AttentionMergeShape&, cudaStream_t);
template void attention_merge<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*,
                                             const float*, const AttentionMergeShape&,
                                             cudaStream_t);
template void attention_merge<__half>(__half*, float*, const __half*, const float*,
                                      const AttentionMergeShape&, cudaStream_t);

}  // namespace strata::cuda
