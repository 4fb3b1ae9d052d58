// attention.h's entry points: argument checks, the backward's row sums, and the choice between the
// register and the tile kernels (attention_kernels.h).
#include "model/kernels/cuda/attention.h"

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "model/core/error.h"
#include "model/kernels/cuda/attention_kernels.h"
#include "model/kernels/cuda/attention_tile.cuh"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/reduce.cuh"

namespace strata::cuda {
namespace {

// delta[b, h, t] = Σ_d dout[b, t, h·hs + d]·out[b, t, h·hs + d] over the pair's query rows (out's
// strides; delta in the statistics'), one warp per (b, t, h) row.
template <class T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out,
                                       AttentionPair pair, long rows) {
  const long w = static_cast<long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (w >= rows) return;  // whole warps exit together
  const int NH = pair.NH, hs = pair.hs;
  const int h = static_cast<int>(w % NH);
  const long bt = w / NH;  // b·Tq + t
  const long b = bt / pair.Tq, t = bt % pair.Tq;
  const long offset = b * pair.out_batch + t * pair.out_row + static_cast<long>(h) * hs;
  float sum = 0.0f;
  for (int d = threadIdx.x % 32; d < hs; d += 32)
    sum += to_float(dout[offset + d]) * to_float(out[offset + d]);
  sum = group_sum(sum);
  if (threadIdx.x % 32 == 0) delta[b * pair.stat_batch + h * pair.stat_head + t] = sum;
}

template <class T>
void launch_delta(float* delta, const T* dout, const T* out, const AttentionPair& pair,
                  cudaStream_t stream) {
  const long rows = static_cast<long>(pair.B) * pair.Tq * pair.NH;
  constexpr int kWarpsPerBlock = 8;
  attention_delta_kernel<T><<<static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                              kWarpsPerBlock * 32, 0, stream>>>(delta, dout, out, pair, rows);
  STRATA_CUDA_CHECK_LAUNCH();
}

// The kernels STRATA_ATTENTION_KERNELS names (`tiles` or `registers`; unset: registers), read
// once; set_attention_kernels overrides it.
AttentionKernels kernels_from_environment() {
  const char* name = std::getenv("STRATA_ATTENTION_KERNELS");
  if (name == nullptr || std::strcmp(name, "registers") == 0) return AttentionKernels::registers;
  if (std::strcmp(name, "tiles") == 0) return AttentionKernels::tiles;
  fail("STRATA_ATTENTION_KERNELS is '", name, "': expected 'registers' or 'tiles'");
}

std::atomic<AttentionKernels>& chosen_kernels() {
  static std::atomic<AttentionKernels> chosen{kernels_from_environment()};
  return chosen;
}

template <class T>
bool use_registers() {
  return !std::is_same_v<T, float> && chosen_kernels().load() == AttentionKernels::registers;
}

void check_shape(int B, int T_, int C, int NH, int KV) {
  STRATA_CHECK(B >= 0 && T_ >= 0 && NH > 0 && C % NH == 0);
  STRATA_CHECK(KV > 0 && NH % KV == 0, "attention: ", NH, " query heads over ", KV,
               " key/value heads");
  const int hs = C / NH;
  if (!attention_head_size_supported(hs))
    fail("attention: head size ", hs, " is not supported by the CUDA kernel (",
         flash::kHeadSizeStep, " to ", flash::kMaxHeadSize, " in steps of ", flash::kHeadSizeStep,
         ")");
  STRATA_CHECK(B <= 65535 && NH <= 65535, "attention: batch ", B, " or heads ", NH,
               " beyond the grid's 65535");
}

// A chunk pair's geometry and the 16-byte alignment its tensors' rows need (the kernels' vector
// loads): base pointers in `pointers`, every row and sequence stride a multiple of 16 bytes.
template <class T>
void check_pair(const AttentionPair& p, std::initializer_list<const void*> pointers) {
  check_shape(p.B, p.Tq, p.NH * p.hs, p.NH, p.KV);
  STRATA_CHECK(p.Tk >= 0 && p.causal_offset >= 0 && p.causal_offset <= (1L << 30),
               "attention pair: Tk ", p.Tk, ", causal offset ", p.causal_offset,
               " (the CUDA kernels take offsets from 0: every query sees a key)");
  STRATA_CHECK(p.Tq == 0 || p.Tk > 0, "attention pair: queries without keys");
  // The kernels add rows, offsets and a tile in int.
  STRATA_CHECK(p.Tq + p.causal_offset + 256 <= INT_MAX && p.Tk + 256L <= INT_MAX,
               "attention pair: ", p.Tq, " rows at offset ", p.causal_offset, " against ", p.Tk,
               " keys pass the kernels' int positions");
  constexpr long kVector = 16 / static_cast<long>(sizeof(T));
  for (long stride : {p.q_row, p.q_batch, p.out_row, p.out_batch, p.kv_row, p.kv_batch})
    STRATA_CHECK(stride % kVector == 0, "attention pair: a stride of ", stride,
                 " elements is not a multiple of 16 bytes");
  for (const void* pointer : pointers)
    STRATA_CHECK(is_aligned(pointer, 16), "attention tensors must be 16-byte aligned");
}

template <class T>
void run_forward(const flash::ForwardTensors<T>& tensors, const AttentionPair& pair,
                 cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    flash::forward_tiles(tensors, pair, stream);
  } else {
    if (use_registers<T>())
      flash::forward_registers(tensors, pair, stream);
    else
      flash::forward_tiles(tensors, pair, stream);
  }
}

template <class T>
void run_backward(const flash::BackwardTensors<T>& tensors, const AttentionPair& pair,
                  cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    flash::backward_tiles(tensors, pair, stream);
  } else {
    if (use_registers<T>())
      flash::backward_registers(tensors, pair, stream);
    else
      flash::backward_tiles(tensors, pair, stream);
  }
}

}  // namespace

bool attention_head_size_supported(int hs) { return flash::head_size_has_kernel(hs); }

void set_attention_kernels(AttentionKernels kernels) { chosen_kernels().store(kernels); }

AttentionKernels attention_kernels() { return chosen_kernels().load(); }

template <class T>
void attention_forward(T* out, float* lse, const T* qkv, int B, int T_, int C, int NH, int KV,
                       cudaStream_t stream) {
  check_shape(B, T_, C, NH, KV);
  STRATA_CHECK(is_aligned(out, 16) && is_aligned(qkv, 16),
               "attention tensors must be 16-byte aligned");
  if (B == 0 || T_ == 0) return;
  const int hs = C / NH;
  const AttentionPair pair = packed_attention_pair(B, T_, NH, KV, hs);
  run_forward<T>({out, lse, qkv, qkv + C, qkv + C + static_cast<long>(KV) * hs}, pair, stream);
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int T_, int C, int NH, int KV, DeviceArena& arena, cudaStream_t stream) {
  check_shape(B, T_, C, NH, KV);
  STRATA_CHECK(is_aligned(dqkv, 16) && is_aligned(dout, 16) && is_aligned(qkv, 16),
               "attention tensors must be 16-byte aligned");
  if (B == 0 || T_ == 0) return;
  ArenaScope scope(arena);
  const int hs = C / NH;
  const AttentionPair pair = packed_attention_pair(B, T_, NH, KV, hs);
  float* delta = arena.allocate<float>(static_cast<std::size_t>(B) * T_ * NH);
  launch_delta(delta, dout, out, pair, stream);
  const long k = C, v = C + static_cast<long>(KV) * hs;  // columns of the k and v heads
  run_backward<T>({dqkv, dqkv + k, dqkv + v, dout, qkv, qkv + k, qkv + v, lse, delta, false}, pair,
                  stream);
}

template <class T>
void attention_pair_forward(T* out, float* lse, const T* q, const T* k, const T* v,
                            const AttentionPair& pair, cudaStream_t stream) {
  check_pair<T>(pair, {out, q, k, v});
  if (pair.B == 0 || pair.Tq == 0) return;
  run_forward<T>({out, lse, q, k, v}, pair, stream);
}

template <class T>
void attention_pair_delta(float* delta, const T* dout, const T* out, const AttentionPair& pair,
                          cudaStream_t stream) {
  check_pair<T>(pair, {dout, out});
  if (pair.B == 0 || pair.Tq == 0) return;
  launch_delta(delta, dout, out, pair, stream);
}

template <class T>
void attention_pair_backward(T* dq, T* dk, T* dv, const T* dout, const float* lse,
                             const float* delta, const T* q, const T* k, const T* v,
                             const AttentionPair& pair, cudaStream_t stream) {
  check_pair<T>(pair, {dq, dk, dv, dout, q, k, v});
  if (pair.B == 0 || pair.Tq == 0) return;
  run_backward<T>({dq, dk, dv, dout, q, k, v, lse, delta, true}, pair, stream);
}

#define STRATA_INSTANTIATE(T)                                                                  \
  template void attention_pair_forward<T>(T*, float*, const T*, const T*, const T*,            \
                                          const AttentionPair&, cudaStream_t);                 \
  template void attention_pair_delta<T>(float*, const T*, const T*, const AttentionPair&,      \
                                        cudaStream_t);                                         \
  template void attention_pair_backward<T>(T*, T*, T*, const T*, const float*, const float*,   \
                                           const T*, const T*, const T*, const AttentionPair&, \
                                           cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

template void attention_forward<float>(float*, float*, const float*, int, int, int, int, int,
                                       cudaStream_t);
template void attention_forward<__nv_bfloat16>(__nv_bfloat16*, float*, const __nv_bfloat16*, int,
                                               int, int, int, int, cudaStream_t);
template void attention_forward<__half>(__half*, float*, const __half*, int, int, int, int, int,
                                        cudaStream_t);
template void attention_backward<float>(float*, const float*, const float*, const float*,
                                        const float*, int, int, int, int, int, DeviceArena&,
                                        cudaStream_t);
template void attention_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                                const __nv_bfloat16*, const __nv_bfloat16*,
                                                const float*, int, int, int, int, int, DeviceArena&,
                                                cudaStream_t);
template void attention_backward<__half>(__half*, const __half*, const __half*, const __half*,
                                         const float*, int, int, int, int, int, DeviceArena&,
                                         cudaStream_t);

}  // namespace strata::cuda
