// Status: compiled for sm_90a, never run on a GPU (untested).
#include "model/kernels/cuda/adamw.h"

#include <cmath>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {

std::vector<ElementRange> decayed_ranges(const ParameterLayout& layout) {
  std::vector<ElementRange> ranges;
  for (const TensorView& t : layout.tensors()) {
    if (!t.decay || t.size == 0) continue;
    const long begin = static_cast<long>(t.offset), end = begin + static_cast<long>(t.size);
    if (!ranges.empty() && ranges.back().end == begin)
      ranges.back().end = end;
    else
      ranges.push_back(ElementRange{begin, end});
  }
  return ranges;
}

DeviceRanges::DeviceRanges(const std::vector<ElementRange>& ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i)
    STRATA_CHECK(
        ranges[i].begin <= ranges[i].end && (i == 0 || ranges[i - 1].end <= ranges[i].begin),
        "decay ranges must be sorted and disjoint");
  // A synchronous upload: kernels on non-blocking streams would not wait for a pageable copy.
  if (!ranges.empty()) ranges_ = DeviceBuffer<ElementRange>(ranges);
}

namespace {

struct AdamWConstants {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float bias1, bias2;  // 1 − β^t
};

// Index of the first range ending after `index` (count if none): the only range that can hold it.
__device__ int range_at_or_after(const ElementRange* ranges, int count, long index) {
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

// The update of one element, in the CPU kernel's order of operations.
__device__ __forceinline__ void adamw_element(float& p, float& m, float& v, float grad,
                                              float weight_decay, const AdamWConstants& h) {
  const float g = grad * h.grad_scale;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float update = (m / h.bias1) / (sqrtf(v / h.bias2) + h.eps);
  p -= h.lr * (update + weight_decay * p);
}

// Thread per kN consecutive elements (grid-stride); the range lookup is a binary search per
// vector, then a step forward per element (a vector rarely crosses a tensor boundary).
template <class T, int kN>
__global__ void __launch_bounds__(kMapThreads)
    adamw_kernel(float* master, T* copy, const float* grads, float* m, float* v, long n,
                 long first_index, const ElementRange* ranges, int range_count, AdamWConstants h,
                 const float* device_scale) {
  if (device_scale != nullptr) {
    const float s = *device_scale;
    if (!isfinite(s)) return;  // skipped step (non-finite gradients)
    h.grad_scale *= s;
  }
  const long stride = static_cast<long>(gridDim.x) * blockDim.x * kN;
  for (long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kN; i < n;
       i += stride) {
    const int count = static_cast<int>(n - i < kN ? n - i : kN);
    long index = first_index + i;
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
        adamw_element(p.v[k], mi.v[k], vi.v[k], g.v[k], decayed ? h.weight_decay : 0.0f, h);
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
                      decayed ? h.weight_decay : 0.0f, h);
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
  // The CPU kernel's expressions (float pow), so fp32 results agree bit for bit where the
  // device rounds the same way.
  const AdamWConstants h{hyper.lr,
                         hyper.beta1,
                         hyper.beta2,
                         hyper.eps,
                         hyper.weight_decay,
                         hyper.grad_scale,
                         1.0f - std::pow(hyper.beta1, static_cast<float>(hyper.step)),
                         1.0f - std::pow(hyper.beta2, static_cast<float>(hyper.step))};
  constexpr int kN = 4;
  const bool vector = is_aligned(master, 16) && is_aligned(grads, 16) && is_aligned(m, 16) &&
                      is_aligned(v, 16) && is_aligned(weights_copy, sizeof(T) * kN);
  if (vector) {
    adamw_kernel<T, kN><<<map_blocks((n + kN - 1) / kN), kMapThreads, 0, stream>>>(
        master, weights_copy, grads, m, v, n, first_index, decay.data(), decay.size(), h,
        device_scale);
  } else {
    adamw_kernel<T, 1><<<map_blocks(n), kMapThreads, 0, stream>>>(master, weights_copy, grads, m, v,
                                                                  n, first_index, decay.data(),
                                                                  decay.size(), h, device_scale);
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
