// Kernels of the mixture-of-experts MLP (moe.h). The router's per-token arithmetic is
// model/kernels/moe_routing.h, called here by one thread per token (lane 0 of the token's warp in
// the forward pass, after the warp has summed the logits): E is small (experts per block, tens),
// so a token's softmax, top-k and gates are a few hundred operations and never the bottleneck;
// what matters is reading x once per expert, coalesced, which the warp does.
#include "model/kernels/cuda/moe.h"

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"
#include "model/kernels/cuda/elementwise.cuh"
#include "model/kernels/cuda/reduce.cuh"
#include "model/kernels/moe_routing.h"

namespace strata::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kRouterSumThreads = 1024;
constexpr int kTokenThreads = 128;

unsigned warp_blocks(long warps) {
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// The index of this thread's warp over the grid (one token or one row per warp).
__device__ __forceinline__ long global_warp() {
  return static_cast<long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}

template <class T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    router_forward_kernel(float* probs, float* lse, int* choices, float* gates, float* logits,
                          const T* x, const T* router, int N, int C, int E, int k) {
  const long t = global_warp();
  if (t >= N) return;  // the whole warp: t is the same for its lanes
  const int lane = threadIdx.x % 32;
  const T* xt = x + t * C;
  float* lt = logits + t * E;
  for (int e = 0; e < E; ++e) {
    const T* we = router + static_cast<long>(e) * C;
    float partial = 0;
    for (int c = lane; c < C; c += 32) partial += to_float(xt[c]) * to_float(we[c]);
    const float logit = group_sum(partial);
    if (lane == 0) lt[e] = logit;
  }
  if (lane != 0) return;
  float* pt = probs + t * E;
  lse[t] = moe_softmax(lt, E, pt);
  moe_top_k(pt, E, k, choices + t * k);
  moe_gates(pt, choices + t * k, k, gates + t * k);
}

__global__ void __launch_bounds__(kRouterSumThreads)
    router_sums_kernel(double* sums, const float* probs, const float* lse, int N, int E) {
  __shared__ double shared[32];
  for (int e = 0; e <= E; ++e) {  // e == E: the squared logsumexps
    double partial = 0;
    for (int t = threadIdx.x; t < N; t += blockDim.x) {
      if (e < E) {
        partial += probs[static_cast<long>(t) * E + e];
      } else {
        const double l = lse[t];
        partial += l * l;
      }
    }
    const double total = block_reduce(partial, shared, 0.0, SumOp{});
    if (threadIdx.x == 0) sums[e] = total;
  }
}

template <class T>
__global__ void __launch_bounds__(kMapThreads)
    gather_rows_kernel(T* xe, int* row, const T* x, const int* assignments, int A, int k, int C) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  const long total = static_cast<long>(A) * C;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const long r = i / C;
    const long c = i % C;
    const int assignment = assignments[r];
    xe[i] = x[static_cast<long>(assignment / k) * C + c];
    if (c == 0) row[assignment] = static_cast<int>(r);
  }
}

template <class T>
__global__ void __launch_bounds__(kMapThreads)
    combine_rows_kernel(T* y, const T* out, const float* gates, const int* row, int N, int k,
                        int C) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  const long total = static_cast<long>(N) * C;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const long t = i / C;
    const long c = i % C;
    float sum = 0;
    for (int j = 0; j < k; ++j) {
      const int r = row[t * k + j];
      if (r >= 0) sum += gates[t * k + j] * to_float(out[static_cast<long>(r) * C + c]);
    }
    y[i] = from_float<T>(sum);
  }
}

template <class T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gate_grads_kernel(float* dgates, T* dout, const T* dy, const T* out, const float* gates,
                      const int* assignments, int A, int k, int C) {
  const long r = global_warp();
  if (r >= A) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const int assignment = assignments[r];
  const float gate = gates[assignment];
  const T* dyt = dy + static_cast<long>(assignment / k) * C;
  const T* out_r = out + r * C;
  T* dout_r = dout + r * C;
  float partial = 0;
  for (int c = lane; c < C; c += 32) {
    const float g = to_float(dyt[c]);
    partial += g * to_float(out_r[c]);
    dout_r[c] = from_float<T>(gate * g);
  }
  const float dot = group_sum(partial);
  if (lane == 0) dgates[assignment] = dot;
}

__global__ void __launch_bounds__(kTokenThreads)
    router_grads_kernel(float* dlogits, float* dp, const float* probs, const float* lse,
                        const int* choices, const float* gates, const float* dgates,
                        const float* chosen_share, float aux_scale, float z_scale, int N, int E,
                        int k) {
  const long t = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= N) return;
  moe_router_backward(probs + t * E, lse[t], choices + t * k, gates + t * k, dgates + t * k, k, E,
                      chosen_share, aux_scale, z_scale, dp + t * E, dlogits + t * E);
}

template <class T>
__global__ void __launch_bounds__(kMapThreads)
    input_grads_kernel(T* dx, const float* dlogits, const T* router, const T* dxe, const int* row,
                       int N, int k, int E, int C) {
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  const long total = static_cast<long>(N) * C;
  for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const long t = i / C;
    const long c = i % C;
    float sum = 0;
    if (router != nullptr)
      for (int e = 0; e < E; ++e)
        sum += dlogits[t * E + e] * to_float(router[static_cast<long>(e) * C + c]);
    for (int j = 0; j < k; ++j) {
      const int r = row[t * k + j];
      if (r >= 0) sum += to_float(dxe[static_cast<long>(r) * C + c]);
    }
    dx[i] = from_float<T>(sum);
  }
}

}  // namespace

template <class T>
void moe_router_forward(float* probs, float* lse, int* choices, float* gates, float* logits,
                        const T* x, const T* router, int N, int C, int E, int k,
                        cudaStream_t stream) {
  if (N <= 0) return;
  router_forward_kernel<<<warp_blocks(N), kWarpsPerBlock * 32, 0, stream>>>(
      probs, lse, choices, gates, logits, x, router, N, C, E, k);
  STRATA_CUDA_CHECK_LAUNCH();
}

void moe_router_sums(double* sums, const float* probs, const float* lse, int N, int E,
                     cudaStream_t stream) {
  router_sums_kernel<<<1, kRouterSumThreads, 0, stream>>>(sums, probs, lse, N, E);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void moe_gather_rows(T* xe, int* row, const T* x, const int* assignments, int A, int k, int C,
                     cudaStream_t stream) {
  const long total = static_cast<long>(A) * C;
  if (total <= 0) return;
  gather_rows_kernel<<<map_blocks(total), kMapThreads, 0, stream>>>(xe, row, x, assignments, A, k,
                                                                    C);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void moe_combine_rows(T* y, const T* out, const float* gates, const int* row, int N, int k, int C,
                      cudaStream_t stream) {
  const long total = static_cast<long>(N) * C;
  if (total <= 0) return;
  combine_rows_kernel<<<map_blocks(total), kMapThreads, 0, stream>>>(y, out, gates, row, N, k, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void moe_gate_grads(float* dgates, T* dout, const T* dy, const T* out, const float* gates,
                    const int* assignments, int A, int k, int C, cudaStream_t stream) {
  if (A <= 0) return;
  gate_grads_kernel<<<warp_blocks(A), kWarpsPerBlock * 32, 0, stream>>>(
      dgates, dout, dy, out, gates, assignments, A, k, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

void moe_router_grads(float* dlogits, float* dp, const float* probs, const float* lse,
                      const int* choices, const float* gates, const float* dgates,
                      const float* chosen_share, float aux_scale, float z_scale, int N, int E,
                      int k, cudaStream_t stream) {
  if (N <= 0) return;
  const unsigned blocks = static_cast<unsigned>((N + kTokenThreads - 1) / kTokenThreads);
  router_grads_kernel<<<blocks, kTokenThreads, 0, stream>>>(
      dlogits, dp, probs, lse, choices, gates, dgates, chosen_share, aux_scale, z_scale, N, E, k);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void moe_input_grads(T* dx, const float* dlogits, const T* router, const T* dxe, const int* row,
                     int N, int k, int E, int C, cudaStream_t stream) {
  const long total = static_cast<long>(N) * C;
  if (total <= 0) return;
  input_grads_kernel<<<map_blocks(total), kMapThreads, 0, stream>>>(dx, dlogits, router, dxe, row,
                                                                    N, k, E, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

#define STRATA_INSTANTIATE(T)                                                                    \
  template void moe_router_forward<T>(float*, float*, int*, float*, float*, const T*, const T*,  \
                                      int, int, int, int, cudaStream_t);                         \
  template void moe_gather_rows<T>(T*, int*, const T*, const int*, int, int, int, cudaStream_t); \
  template void moe_combine_rows<T>(T*, const T*, const float*, const int*, int, int, int,       \
                                    cudaStream_t);                                               \
  template void moe_gate_grads<T>(float*, T*, const T*, const T*, const float*, const int*, int, \
                                  int, int, cudaStream_t);                                       \
  template void moe_input_grads<T>(T*, const float*, const T*, const T*, const int*, int, int,   \
                                   int, int, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
