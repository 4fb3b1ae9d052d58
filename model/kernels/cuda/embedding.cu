#include "model/kernels/cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/dtype.cuh"

namespace strata::cuda {
namespace {

constexpr int kThreads = 128;  // channels (or channel vectors) per block

template <class T, int kN>
__global__ void __launch_bounds__(kThreads)
    embedding_shard_forward_kernel(T* out, const std::int32_t* tokens, const T* wte_shard,
                                   int vocab_begin, int Vl, int C) {
  const long row = blockIdx.x;
  const int local = tokens[row] - vocab_begin;
  const bool in_shard = local >= 0 && local < Vl;
  Vec<T, kN> zero;
#pragma unroll
  for (int k = 0; k < kN; ++k) zero.v[k] = from_float<T>(0.0f);
  for (int c = threadIdx.x * kN; c < C; c += kThreads * kN) {
    const Vec<T, kN> v =
        in_shard ? load_vec<kN>(wte_shard + static_cast<long>(local) * C + c) : zero;
    store_vec(out + row * C + c, v);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    position_embedding_forward_kernel(T* x, const T* wpe, long row_begin, int T_, int C) {
  const long row = blockIdx.x;
  const T* position = wpe + ((row_begin + row) % T_) * C;
  for (int c = threadIdx.x; c < C; c += kThreads)
    x[row * C + c] = from_float<T>(to_float(x[row * C + c]) + to_float(position[c]));
}

// Sort keys: the local row of the token, or Vl (sorted last, then skipped) outside the shard.
__global__ void shard_keys_kernel(unsigned* keys, std::int32_t* rows, const std::int32_t* tokens,
                                  int vocab_begin, int Vl, int N) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const int local = tokens[n] - vocab_begin;
  keys[n] = (local >= 0 && local < Vl) ? static_cast<unsigned>(local) : static_cast<unsigned>(Vl);
  rows[n] = n;
}

// Block (i, channel block): if sorted position i starts a run of equal keys, sums that token's
// rows (in increasing row order: the sort is stable) into its gradient row.
template <class T>
__global__ void __launch_bounds__(kThreads)
    embedding_segment_sum_kernel(float* dwte_shard, const T* dout, const unsigned* sorted_keys,
                                 const std::int32_t* sorted_rows, int Vl, int N, int C) {
  const int i = blockIdx.x;
  const unsigned key = sorted_keys[i];
  if (key >= static_cast<unsigned>(Vl) || (i > 0 && sorted_keys[i - 1] == key)) return;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= C) return;
  float* grad = dwte_shard + static_cast<long>(key) * C + c;
  float acc = *grad;
  for (int j = i; j < N && sorted_keys[j] == key; ++j)
    acc += to_float(dout[static_cast<long>(sorted_rows[j]) * C + c]);
  *grad = acc;
}

// Thread (position p, channel c) sums rows r ≡ p − row_begin (mod T_) in increasing order.
template <class T>
__global__ void __launch_bounds__(kThreads)
    position_embedding_backward_kernel(float* dwpe, const T* dx, long row_begin, int rows, int T_,
                                       int C) {
  const int p = blockIdx.x;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  if (c >= C) return;
  const long first = ((p - row_begin % T_) % T_ + T_) % T_;
  if (first >= rows) return;
  float* grad = dwpe + static_cast<long>(p) * C + c;
  float acc = *grad;
  for (long r = first; r < rows; r += T_) acc += to_float(dx[r * C + c]);
  *grad = acc;
}

}  // namespace

template <class T>
void embedding_shard_forward(T* out, const std::int32_t* tokens, const T* wte_shard,
                             int vocab_begin, int Vl, int N, int C, cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0 && Vl >= 0);
  if (N == 0) return;
  constexpr int kN = kVec16<T>;
  if (C % kN == 0 && is_aligned(out, 16) && is_aligned(wte_shard, 16)) {
    embedding_shard_forward_kernel<T, kN>
        <<<N, kThreads, 0, stream>>>(out, tokens, wte_shard, vocab_begin, Vl, C);
  } else {
    embedding_shard_forward_kernel<T, 1>
        <<<N, kThreads, 0, stream>>>(out, tokens, wte_shard, vocab_begin, Vl, C);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void position_embedding_forward(T* x, const T* wpe, long row_begin, int rows, int T_, int C,
                                cudaStream_t stream) {
  STRATA_CHECK(rows >= 0 && T_ > 0 && C > 0 && row_begin >= 0);
  if (rows == 0) return;
  position_embedding_forward_kernel<T><<<rows, kThreads, 0, stream>>>(x, wpe, row_begin, T_, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void embedding_shard_backward(float* dwte_shard, const T* dout, const std::int32_t* tokens,
                              int vocab_begin, int Vl, int N, int C, DeviceArena& arena,
                              cudaStream_t stream) {
  STRATA_CHECK(N >= 0 && C > 0 && Vl >= 0);
  if (N == 0 || Vl == 0) return;
  ArenaScope scope(arena);
  auto* keys = arena.allocate<unsigned>(static_cast<std::size_t>(N));
  auto* sorted_keys = arena.allocate<unsigned>(static_cast<std::size_t>(N));
  auto* rows = arena.allocate<std::int32_t>(static_cast<std::size_t>(N));
  auto* sorted_rows = arena.allocate<std::int32_t>(static_cast<std::size_t>(N));
  shard_keys_kernel<<<(N + 255) / 256, 256, 0, stream>>>(keys, rows, tokens, vocab_begin, Vl, N);
  STRATA_CUDA_CHECK_LAUNCH();
  // Only the bits that can be set in a key in [0, Vl] take part in the sort.
  int end_bit = 1;
  while ((1L << end_bit) <= Vl) ++end_bit;
  std::size_t temp_bytes = 0;
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, keys, sorted_keys, rows,
                                                    sorted_rows, N, 0, end_bit, stream));
  void* temp = arena.allocate(temp_bytes);
  STRATA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, sorted_keys, rows,
                                                    sorted_rows, N, 0, end_bit, stream));
  const dim3 grid(static_cast<unsigned>(N), static_cast<unsigned>((C + kThreads - 1) / kThreads));
  embedding_segment_sum_kernel<T>
      <<<grid, kThreads, 0, stream>>>(dwte_shard, dout, sorted_keys, sorted_rows, Vl, N, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

template <class T>
void position_embedding_backward(float* dwpe, const T* dx, long row_begin, int rows, int T_, int C,
                                 cudaStream_t stream) {
  STRATA_CHECK(rows >= 0 && T_ > 0 && C > 0 && row_begin >= 0);
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>(T_), static_cast<unsigned>((C + kThreads - 1) / kThreads));
  position_embedding_backward_kernel<T>
      <<<grid, kThreads, 0, stream>>>(dwpe, dx, row_begin, rows, T_, C);
  STRATA_CUDA_CHECK_LAUNCH();
}

#define STRATA_INSTANTIATE(T)                                                                     \
  template void embedding_shard_forward<T>(T*, const std::int32_t*, const T*, int, int, int, int, \
                                           cudaStream_t);                                         \
  template void position_embedding_forward<T>(T*, const T*, long, int, int, int, cudaStream_t);   \
  template void embedding_shard_backward<T>(float*, const T*, const std::int32_t*, int, int, int, \
                                            int, DeviceArena&, cudaStream_t);                     \
  template void position_embedding_backward<T>(float*, const T*, long, int, int, int, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
