#include "model/kernels/cuda/adamw.h"

#include "model/kernels/adamw_element.h"

#include <cmath>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {

DeviceRanges::DeviceRanges(const std::vector<ElementRange>& ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i)
    STRATA_CHECK(
        ranges[i].begin <= ranges[i].end && (i == 0 || ranges[i - 1].end <= ranges[i].begin),
        "decay ranges must be sorted and disjoint");
  // A synchronous upload: kernels on non-blocking streams would not wait for a pageable copy.
  if (!ranges.empty()) ranges_ = DeviceBuffer<ElementRange>(ranges);
}

namespace {

// Index of the first range ending after `index` (count if none): the only range that can hold it.
__device__ int range_at_or_after(const ElementRange* ranges, int count, std::size_t index) {
  int lo = 0, hi = count;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ranges[mid].end <= index)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

// Thread per kN consecutive elements (grid-stride); the range lookup is a binary search per
// vector, then a step forward per element (a vector rarely crosses a tensor boundary).
template <class T, int kN>
__global__ void __launch_bounds__(kMapThreads)
    adamw_kernel(float* master, T* copy, const float* grads, float* m, float* v, long n,
                 long first_index, const ElementRange* ranges, int range_count, AdamWConstants h,
                 float weight_decay, const float* device_scale) {
  if (device_scale != nullptr) {
    const float s = *device_scale;
    if (!isfinite(s)) return;  // skipped step (non-finite gradients)
    h.grad_scale *= s;
  }
  const long stride = static_cast<long>(gridDim.x) * blockDim.x * kN;
  for (long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kN; i < n;
       i += stride) {
    const int count = static_cast<int>(n - i < kN ? n - i : kN);
    auto index = static_cast<std::size_t>(first_index + i);
    int r = range_at_or_after(ranges, range_count, index);
    if (count == kN) {
      Vec<float, kN> p = load_vec<kN>(master + i), mi = load_vec<kN>(m + i),
                     vi = load_vec<kN>(v + i);
      const Vec<float, kN> g = load_vec<kN>(grads + i);
      Vec<T, kN> c;
#pragma unroll
      for (int k = 0; k < kN; ++k, ++index) {
        while (r < range_count && ranges[r].end <= index) ++r;
        const bool decayed = r < range_count && ranges[r].begin <= index;
        adamw_element(p.v[k], mi.v[k], vi.v[k], g.v[k], decayed ? weight_decay : 0.0f, h);
        c.v[k] = from_float<T>(p.v[k]);
      }
      store_vec(master + i, p);
      store_vec(m + i, mi);
      store_vec(v + i, vi);
      if (copy != nullptr) store_vec(copy + i, c);
    } else {
      for (int k = 0; k < count; ++k, ++index) {
        while (r < range_count && ranges[r].end <= index) ++r;
        const bool decayed = r < range_count && ranges[r].begin <= index;
        adamw_element(master[i + k], m[i + k], v[i + k], grads[i + k],
                      decayed ? weight_decay : 0.0f, h);
        if (copy != nullptr) copy[i + k] = from_float<T>(master[i + k]);
      }
    }
  }
}

}  // namespace

template <class T>
void adamw_update(float* master, T* weights_copy, const float* grads, float* m, float* v, long n,
                  long first_index, const DeviceRanges& decay, const cpu::AdamWHyper& hyper,
                  const float* device_scale, cudaStream_t stream) {
  STRATA_CHECK(n >= 0 && first_index >= 0 && hyper.step >= 1);
  if (n == 0) return;
  // The bias corrections by the CPU kernel's own expressions (float pow), so fp32 results agree
  // bit for bit where the device rounds the same way.
  const AdamWConstants h =
      adamw_constants(hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.grad_scale, hyper.step);
  const float weight_decay = hyper.weight_decay;
  constexpr int kN = 4;
  const bool vector = is_aligned(master, 16) && is_aligned(grads, 16) && is_aligned(m, 16) &&
                      is_aligned(v, 16) && is_aligned(weights_copy, sizeof(T) * kN);
  if (vector) {
    adamw_kernel<T, kN><<<map_blocks((n + kN - 1) / kN), kMapThreads, 0, stream>>>(
        master, weights_copy, grads, m, v, n, first_index, decay.data(), decay.size(), h,
        weight_decay, device_scale);
  } else {
    adamw_kernel<T, 1><<<map_blocks(n), kMapThreads, 0, stream>>>(
        master, weights_copy, grads, m, v, n, first_index, decay.data(), decay.size(), h,
        weight_decay, device_scale);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

#define STRATA_INSTANTIATE(T)                                                              \
  template void adamw_update<T>(float*, T*, const float*, float*, float*, long, long,      \
                                const DeviceRanges&, const cpu::AdamWHyper&, const float*, \
                                cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
