#include "model/kernels/cuda/crossentropy.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/reduce.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 512;  // one block per row; a 50304-column row is ~12 vectors per thread

// Columns [0, live) of a shard are real vocabulary ids (global id < V).
int live_columns(int vocab_begin, int V, int Vl) { return std::clamp(V - vocab_begin, 0, Vl); }

// Calls f(column, logit) for every column of `row` below `live`, kN columns per access.
template <int kN, class T, class F>
__device__ __forceinline__ void for_each_live(const T* row, int live, int Vl, F f) {
  for (int c = threadIdx.x * kN; c < Vl && c < live; c += kThreads * kN) {
    const Vec<T, kN> x = load_vec<kN>(row + c);
#pragma unroll
    for (int k = 0; k < kN; ++k)
      if (c + k < live) f(c + k, to_float(x.v[k]));
  }
}

// Writes dlogits = (softmax − onehot(target)) · dloss for a whole row (padded columns 0), with the
// probability in fp32, rounded once to T. Each thread reads its columns before writing them, so
// out may alias row.
template <int kN, class T>
__device__ __forceinline__ void write_gradient_row(T* out, const T* row, int live, int Vl,
                                                   float max, float inv_sum, int target_local,
                                                   float dloss) {
  for (int c = threadIdx.x * kN; c < Vl; c += kThreads * kN) {
    const Vec<T, kN> x = load_vec<kN>(row + c);
    Vec<T, kN> y;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int col = c + k;
      float value = 0.0f;
      if (col < live) {
        const float p = expf(to_float(x.v[k]) - max) * inv_sum;
        value = p * dloss - (col == target_local ? dloss : 0.0f);
      }
      y.v[k] = from_float<T>(value);
    }
    store_vec(out + c, y);
  }
}

template <class T, int kN>
__global__ void __launch_bounds__(kThreads)
    shard_max_kernel(float* row_max, const T* logits, int live, int Vl) {
  __shared__ float shared[32];
  const T* row = logits + static_cast<long>(blockIdx.x) * Vl;
  float m = -INFINITY;
  for_each_live<kN>(row, live, Vl, [&](int, float x) { m = fmaxf(m, x); });
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <class T, int kN>
__global__ void __launch_bounds__(kThreads)
    shard_sums_kernel(float* sum_exp, float* target_logit, const T* logits,
                      const std::int32_t* targets, const float* row_max, int vocab_begin, int live,
                      int Vl) {
  __shared__ float shared[32];
  const int n = blockIdx.x;
  const T* row = logits + static_cast<long>(n) * Vl;
  const float max = row_max[n];
  float sum = 0.0f;
  for_each_live<kN>(row, live, Vl, [&](int, float x) { sum += expf(x - max); });
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    const int local = targets[n] - vocab_begin;
    sum_exp[n] = sum;
    target_logit[n] = (local >= 0 && local < live) ? to_float(row[local]) : 0.0f;
  }
}

template <class T, int kN>
__global__ void __launch_bounds__(kThreads)
    shard_finish_backward_kernel(float* losses, T* dlogits, const T* logits,
                                 const std::int32_t* targets, const float* dlosses,
                                 const float* row_max, const float* sum_exp,
                                 const float* target_logit, int vocab_begin, int live, int Vl) {
  const int n = blockIdx.x;
  const float max = row_max[n], sum = sum_exp[n];
  const long offset = static_cast<long>(n) * Vl;
  write_gradient_row<kN>(dlogits + offset, logits + offset, live, Vl, max, 1.0f / sum,
                         targets[n] - vocab_begin, dlosses[n]);
  // From the logits, not a rounded probability: exact even when that underflows.
  if (threadIdx.x == 0) losses[n] = logf(sum) - (target_logit[n] - max);
}

__global__ void losses_kernel(float* losses, const float* row_max, const float* sum_exp,
                              const float* target_logit, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < N) losses[n] = logf(sum_exp[n]) - (target_logit[n] - row_max[n]);
}

// Online softmax statistics (m, s): s = Σ exp(x − m) over the values seen, m their maximum.
struct RowStats {
  float max = -INFINITY;
  float sum = 0.0f;
};

__device__ __forceinline__ RowStats merge(RowStats a, RowStats b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return RowStats{};
  return RowStats{m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// Block-wide merge in a fixed order; every thread gets the result.
__device__ RowStats block_merge(RowStats x, float* shared_max, float* shared_sum) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int offset = 16; offset > 0; offset /= 2)
    x = merge(x, RowStats{__shfl_xor_sync(kFullMask, x.max, offset),
                          __shfl_xor_sync(kFullMask, x.sum, offset)});
  __syncthreads();
  if (lane == 0) {
    shared_max[warp] = x.max;
    shared_sum[warp] = x.sum;
  }
  __syncthreads();
  RowStats total;
  for (int w = 0; w < warps; ++w) total = merge(total, RowStats{shared_max[w], shared_sum[w]});
  return total;
}

// One shard, one pass over the row for its online statistics. kGradient: then the gradient
// pass, in place when dlogits == logits. Not kGradient: the statistics are kept for a later
// crossentropy_shard_finish_backward (row_max, sum_exp, target_logit), and the row is not written.
template <bool kGradient, class T, int kN>
__global__ void __launch_bounds__(kThreads)
    fused_crossentropy_kernel(float* losses, T* dlogits, const T* logits,
                              const std::int32_t* targets, const float* dlosses, float* row_max,
                              float* sum_exp, float* target_logit_out, int V, int Vp) {
  __shared__ float shared_max[32], shared_sum[32];
  const int n = blockIdx.x;
  const long offset = static_cast<long>(n) * Vp;
  const int target = targets[n];
  // Read before the barriers in block_merge: dlogits may alias logits.
  const float target_logit = to_float(logits[offset + target]);
  RowStats stats;
  for_each_live<kN>(logits + offset, V, Vp, [&](int, float x) {
    if (x > stats.max) {
      stats.sum = stats.sum * expf(stats.max - x) + 1.0f;
      stats.max = x;
    } else {
      stats.sum += expf(x - stats.max);
    }
  });
  stats = block_merge(stats, shared_max, shared_sum);
  if constexpr (kGradient) {
    write_gradient_row<kN>(dlogits + offset, logits + offset, V, Vp, stats.max, 1.0f / stats.sum,
                           target, dlosses[n]);
  } else if (threadIdx.x == 0) {
    row_max[n] = stats.max;
    sum_exp[n] = stats.sum;
    target_logit_out[n] = target_logit;
  }
  if (threadIdx.x == 0) losses[n] = logf(stats.sum) - (target_logit - stats.max);
}

// Launches kernel<kN> with 16-byte vectors when the row length and pointers allow, else kN = 1.
template <class T, class Launch>
void launch_vectorized(int row_length, std::initializer_list<const void*> pointers, Launch launch) {
  bool vector = row_length % kVec16<T> == 0;
  for (const void* p : pointers) vector = vector && is_aligned(p, 16);
  if (vector)
    launch(std::integral_constant<int, kVec16<T>>{});
  else
    launch(std::integral_constant<int, 1>{});
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void crossentropy_shard_max(float* row_max, const T* logits, int vocab_begin, int V, int N, int Vl,
                            cudaStream_t stream) {
  if (N <= 0) return;
  const int live = live_columns(vocab_begin, V, Vl);
  launch_vectorized<T>(Vl, {logits}, [&](auto kN) {
    shard_max_kernel<T, kN()><<<N, kThreads, 0, stream>>>(row_max, logits, live, Vl);
  });
}

template <class T>
void crossentropy_shard_sums(float* sum_exp, float* target_logit, const T* logits,
                             const std::int32_t* targets, const float* row_max, int vocab_begin,
                             int V, int N, int Vl, cudaStream_t stream) {
  if (N <= 0) return;
  const int live = live_columns(vocab_begin, V, Vl);
  launch_vectorized<T>(Vl, {logits}, [&](auto kN) {
    shard_sums_kernel<T, kN()><<<N, kThreads, 0, stream>>>(sum_exp, target_logit, logits, targets,
                                                           row_max, vocab_begin, live, Vl);
  });
}

template <class T>
void crossentropy_shard_finish_backward(float* losses, T* dlogits, const T* logits,
                                        const std::int32_t* targets, const float* dlosses,
                                        const float* row_max, const float* sum_exp,
                                        const float* target_logit, int vocab_begin, int V, int N,
                                        int Vl, cudaStream_t stream) {
  if (N <= 0) return;
  const int live = live_columns(vocab_begin, V, Vl);
  launch_vectorized<T>(Vl, {dlogits, logits}, [&](auto kN) {
    shard_finish_backward_kernel<T, kN()>
        <<<N, kThreads, 0, stream>>>(losses, dlogits, logits, targets, dlosses, row_max, sum_exp,
                                     target_logit, vocab_begin, live, Vl);
  });
}

void crossentropy_losses(float* losses, const float* row_max, const float* sum_exp,
                         const float* target_logit, int N, cudaStream_t stream) {
  if (N <= 0) return;
  constexpr int kBlock = 256;
  losses_kernel<<<(N + kBlock - 1) / kBlock, kBlock, 0, stream>>>(losses, row_max, sum_exp,
                                                                  target_logit, N);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void softmax_crossentropy_stats(float* losses, float* row_max, float* sum_exp, float* target_logit,
                                const T* logits, const std::int32_t* targets, int N, int V, int Vp,
                                cudaStream_t stream) {
  if (N <= 0) return;
  STRATA_CHECK(V > 0 && V <= Vp);
  launch_vectorized<T>(Vp, {logits}, [&](auto kN) {
    fused_crossentropy_kernel<false, T, kN()><<<N, kThreads, 0, stream>>>(
        losses, nullptr, logits, targets, nullptr, row_max, sum_exp, target_logit, V, Vp);
  });
}

template <class T>
void softmax_crossentropy_forward_backward(float* losses, T* dlogits, const T* logits,
                                           const std::int32_t* targets, const float* dlosses, int N,
                                           int V, int Vp, cudaStream_t stream) {
  if (N <= 0) return;
  STRATA_CHECK(V > 0 && V <= Vp);
  launch_vectorized<T>(Vp, {dlogits, logits}, [&](auto kN) {
    fused_crossentropy_kernel<true, T, kN()><<<N, kThreads, 0, stream>>>(
        losses, dlogits, logits, targets, dlosses, nullptr, nullptr, nullptr, V, Vp);
  });
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template void crossentropy_shard_max<T>(float*, const T*, int, int, int, int, cudaStream_t);   \
  template void crossentropy_shard_sums<T>(float*, float*, const T*, const std::int32_t*,        \
                                           const float*, int, int, int, int, cudaStream_t);      \
  template void crossentropy_shard_finish_backward<T>(                                           \
      float*, T*, const T*, const std::int32_t*, const float*, const float*, const float*,       \
      const float*, int, int, int, int, cudaStream_t);                                           \
  template void softmax_crossentropy_stats<T>(float*, float*, float*, float*, const T*,          \
                                              const std::int32_t*, int, int, int, cudaStream_t); \
  template void softmax_crossentropy_forward_backward<T>(                                        \
      float*, T*, const T*, const std::int32_t*, const float*, int, int, int, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
