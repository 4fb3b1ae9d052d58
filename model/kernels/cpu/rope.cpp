#include "model/kernels/cpu/rope.h"

#include <vector>

namespace strata::cpu {
namespace {

// rope_forward (sign 1) and rope_backward (sign −1): the same angles, the sine's sign flipped.
template <class T>
void rope_turn(T* data, const RopeLayout& layout, T sign) {
  check_rope_layout(layout);
  const int half = layout.head_size / 2;
  std::vector<double> frequency(half);
  for (int i = 0; i < half; ++i) frequency[i] = rope_frequency(i, layout.head_size, layout.theta);
    // One position per iteration: its cos and sin serve the B sequences' rows and all their heads.
#pragma omp parallel
  {
    std::vector<T> cosine(half), sine(half);
#pragma omp for schedule(static)
    for (int t = 0; t < layout.T; ++t) {
      for (int i = 0; i < half; ++i) {
        rope_cos_sin(t + layout.position_offset, frequency[i], cosine[i], sine[i]);
        sine[i] *= sign;
      }
      for (int b = 0; b < layout.B; ++b) {
        T* x = data + rope_row(layout, b, t) * layout.row_stride + layout.column;
        for (int h = 0; h < layout.heads; ++h, x += layout.head_size) {
#pragma omp simd
          for (int i = 0; i < half; ++i) rope_rotate_pair(x[i], x[half + i], cosine[i], sine[i]);
        }
      }
    }
  }
}

}  // namespace

template <class T>
void rope_forward(T* qkv, const RopeLayout& layout) {
  rope_turn(qkv, layout, T(1));
}

template <class T>
void rope_backward(T* dqkv, const RopeLayout& layout) {
  rope_turn(dqkv, layout, T(-1));
}

template void rope_forward<float>(float*, const RopeLayout&);
template void rope_forward<double>(double*, const RopeLayout&);
template void rope_backward<float>(float*, const RopeLayout&);
template void rope_backward<double>(double*, const RopeLayout&);

}  // namespace strata::cpu
