#include "model/kernels/cuda/rope.h"

#include "model/kernels/cuda/elementwise.cuh"

namespace strata::cuda {
namespace {

// The shared memory of θ_i is a few hundred bytes for real heads; this caps hs at 12288.
constexpr int kMaxFrequencyBytes = 48 << 10;

// Item = (row, group of kN consecutive pairs); its kN cos/sin turn that group in every head of the
// row. `sign` is 1 (forward) or −1 (backward).
template <int kN, class T>
__global__ void __launch_bounds__(kMapThreads)
    rope_kernel(T* data, const RopeLayout layout, float sign) {
  extern __shared__ double frequency[];  // (hs/2)
  const int half = layout.head_size / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    frequency[i] = rope_frequency(i, layout.head_size, layout.theta);
  __syncthreads();

  const int groups = half / kN;
  const long items = static_cast<long>(layout.B) * layout.T * groups;
  const long stride = static_cast<long>(gridDim.x) * blockDim.x;
  for (long item = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; item < items;
       item += stride) {
    const long row = item / groups;
    const int first_pair = static_cast<int>(item - row * groups) * kN;
    const long t = row % layout.T;
    const int position = static_cast<int>(t) + layout.position_offset;
    float cosine[kN], sine[kN];
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      rope_cos_sin(position, frequency[first_pair + k], cosine[k], sine[k]);
      sine[k] *= sign;
    }
    T* head =
        data + rope_row(layout, row / layout.T, t) * layout.row_stride + layout.column + first_pair;
#pragma unroll 4
    for (int h = 0; h < layout.heads; ++h, head += layout.head_size) {
      Vec<T, kN> x0 = load_vec<kN>(head);
      Vec<T, kN> x1 = load_vec<kN>(head + half);
#pragma unroll
      for (int k = 0; k < kN; ++k) {
        float a = to_float(x0.v[k]), b = to_float(x1.v[k]);
        rope_rotate_pair(a, b, cosine[k], sine[k]);
        x0.v[k] = from_float<T>(a);
        x1.v[k] = from_float<T>(b);
      }
      store_vec(head, x0);
      store_vec(head + half, x1);
    }
  }
}

template <class T>
void rope_turn(T* data, const RopeLayout& layout, float sign, cudaStream_t stream) {
  check_rope_layout(layout);
  const int half = layout.head_size / 2;
  STRATA_CHECK(static_cast<long>(half) * sizeof(double) <= kMaxFrequencyBytes, "rope: head size ",
               layout.head_size, " is beyond the CUDA kernel's ", 2 * kMaxFrequencyBytes / 8);
  const long rows = static_cast<long>(layout.B) * layout.T;
  if (rows == 0 || layout.heads == 0) return;
  const std::size_t shared = static_cast<std::size_t>(half) * sizeof(double);
  constexpr int kN = kVec16<T>;
  if (half % kN == 0 && layout.column % kN == 0 && layout.row_stride % kN == 0 &&
      is_aligned(data, 16)) {
    rope_kernel<kN>
        <<<map_blocks(rows * (half / kN)), kMapThreads, shared, stream>>>(data, layout, sign);
  } else {
    rope_kernel<1><<<map_blocks(rows * half), kMapThreads, shared, stream>>>(data, layout, sign);
  }
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void rope_forward(T* qkv, const RopeLayout& layout, cudaStream_t stream) {
  rope_turn(qkv, layout, 1.0f, stream);
}

template <class T>
void rope_backward(T* dqkv, const RopeLayout& layout, cudaStream_t stream) {
  rope_turn(dqkv, layout, -1.0f, stream);
}

#define STRATA_INSTANTIATE(T)                                         \
  template void rope_forward<T>(T*, const RopeLayout&, cudaStream_t); \
  template void rope_backward<T>(T*, const RopeLayout&, cudaStream_t);
STRATA_INSTANTIATE(float)
STRATA_INSTANTIATE(__nv_bfloat16)
STRATA_INSTANTIATE(__half)
#undef STRATA_INSTANTIATE

}  // namespace strata::cuda
