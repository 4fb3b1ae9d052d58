// attention.h's entry points: argument checks, the backward's row sums, and the choice between the
// register and the tile kernels (attention_kernels.h).
#include "model/kernels/cuda/attention.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "model/core/error.h"
#include "model/kernels/cuda/attention_kernels.h"
#include "model/kernels/cuda/attention_tile.cuh"
#include "model/kernels/cuda/check.h"
#include "model/kernels/cuda/reduce.cuh"

namespace strata::cuda {
namespace {

// delta[b, h, t] = Σ_d dout[b, t, h·hs + d]·out[b, t, h·hs + d], one warp per (b, t, h) row.
template <class T>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* out, int T_, int C,
                                       int NH, long rows) {
  const long w = static_cast<long>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (w >= rows) return;  // whole warps exit together
  const int hs = C / NH;
  const int h = static_cast<int>(w % NH);
  const long bt = w / NH;  // b·T_ + t
  const long offset = bt * C + static_cast<long>(h) * hs;
  float sum = 0.0f;
  for (int d = threadIdx.x % 32; d < hs; d += 32)
    sum += to_float(dout[offset + d]) * to_float(out[offset + d]);
  sum = group_sum(sum);
  if (threadIdx.x % 32 == 0) {
    const long b = bt / T_, t = bt % T_;
    delta[(b * NH + h) * T_ + t] = sum;
  }
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
  if constexpr (std::is_same_v<T, float>) {
    flash::forward_tiles(out, lse, qkv, B, T_, C, NH, KV, stream);
  } else {
    if (use_registers<T>())
      flash::forward_registers(out, lse, qkv, B, T_, C, NH, KV, stream);
    else
      flash::forward_tiles(out, lse, qkv, B, T_, C, NH, KV, stream);
  }
}

template <class T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int T_, int C, int NH, int KV, DeviceArena& arena, cudaStream_t stream) {
  check_shape(B, T_, C, NH, KV);
  STRATA_CHECK(is_aligned(dqkv, 16) && is_aligned(dout, 16) && is_aligned(qkv, 16),
               "attention tensors must be 16-byte aligned");
  if (B == 0 || T_ == 0) return;
  ArenaScope scope(arena);
  const long rows = static_cast<long>(B) * T_ * NH;
  float* delta = arena.allocate<float>(static_cast<std::size_t>(rows));
  constexpr int kWarpsPerBlock = 8;
  attention_delta_kernel<T><<<static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                              kWarpsPerBlock * 32, 0, stream>>>(delta, dout, out, T_, C, NH, rows);
  STRATA_CUDA_CHECK_LAUNCH();
  if constexpr (std::is_same_v<T, float>) {
    flash::backward_tiles(dqkv, dout, qkv, lse, delta, B, T_, C, NH, KV, stream);
  } else {
    if (use_registers<T>())
      flash::backward_registers(dqkv, dout, qkv, lse, delta, B, T_, C, NH, KV, stream);
    else
      flash::backward_tiles(dqkv, dout, qkv, lse, delta, B, T_, C, NH, KV, stream);
  }
}

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
