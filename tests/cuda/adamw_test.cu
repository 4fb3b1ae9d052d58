// Fused AdamW against model/kernels/cpu/adamw.h applied tensor by tensor with the layout's decay
// flags, as train/optimizer/optimizer.cpp does; also a ZeRO-style shard, the device-side gradient
// scale and the skipped step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/kernels/cpu/adamw.h"
#include "model/kernels/cuda/adamw.h"
#include "model/parameter_layout.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaAdamW : public ::testing::Test {};
TYPED_TEST_SUITE(CudaAdamW, ComputeDtypes, DtypeName);

ParameterLayout tiny_layout() {
  GptShape shape;
  shape.n_layer = 2;
  shape.n_head = 2;
  shape.d_model = 16;
  shape.seq_len = 8;
  shape.vocab_size = 40;
  return ParameterLayout::for_gpt(shape);
}

cpu::AdamWHyper hyper_for(int step, float weight_decay, float grad_scale) {
  return cpu::AdamWHyper{1e-2f, 0.9f, 0.95f, 1e-8f, weight_decay, step, grad_scale};
}

// The CPU optimizer's loop restricted to elements [begin, end) of the layout.
void cpu_step(const ParameterLayout& layout, std::vector<float>& p, const std::vector<float>& g,
              std::vector<float>& m, std::vector<float>& v, long begin, long end, int step,
              float weight_decay, float grad_scale) {
  for (const TensorView& t : layout.tensors()) {
    const long lo = std::max<long>(begin, static_cast<long>(t.offset));
    const long hi = std::min<long>(end, static_cast<long>(t.offset + t.size));
    if (lo >= hi) continue;
    cpu::adamw_update(p.data() + lo, g.data() + lo, m.data() + lo, v.data() + lo, hi - lo,
                      hyper_for(step, t.decay ? weight_decay : 0.0f, grad_scale));
  }
}

TEST(CudaAdamWRanges, DecayedRangesCoverExactlyTheDecayedTensors) {
  const ParameterLayout layout = tiny_layout();
  const std::vector<ElementRange> ranges = layout.decayed_ranges();
  for (std::size_t i = 1; i < ranges.size(); ++i) EXPECT_LT(ranges[i - 1].end, ranges[i].begin);
  for (const TensorView& t : layout.tensors())
    for (std::size_t i : {t.offset, t.offset + t.size - 1}) {
      const bool inside = std::any_of(ranges.begin(), ranges.end(), [&](const ElementRange& r) {
        return r.begin <= i && i < r.end;
      });
      EXPECT_EQ(inside, t.decay) << t.name;
    }
}

// Three steps on the whole buffer and on a shard that starts and ends inside tensors.
TYPED_TEST(CudaAdamW, MatchesCpuOptimizerOnWholeBufferAndShard) {
  using T = TypeParam;
  auto rng = test_rng();
  const ParameterLayout layout = tiny_layout();
  const long total = static_cast<long>(layout.total());
  const DeviceRanges decay(layout.decayed_ranges());
  const float weight_decay = 0.1f, grad_scale = 0.7f;
  for (const auto& [begin, end] :
       {std::pair<long, long>{0, total}, std::pair<long, long>{total / 3 + 1, 2 * total / 3 + 5}}) {
    const long n = end - begin;
    std::vector<float> p = random_floats(total, rng), m(total, 0.0f), v(total, 0.0f);
    DeviceBuffer<float> d_p(std::vector<float>(p.begin() + begin, p.begin() + end)),
        d_m(std::vector<float>(n, 0.0f)), d_v(std::vector<float>(n, 0.0f)), d_g(n);
    DeviceBuffer<T> d_copy(n);
    for (int step = 1; step <= 3; ++step) {
      const std::vector<float> g = random_floats(total, rng, -2.0f, 2.0f);
      cpu_step(layout, p, g, m, v, begin, end, step, weight_decay, grad_scale);
      d_g.upload(std::vector<float>(g.begin() + begin, g.begin() + end));
      adamw_update<T>(d_p.get(), d_copy.get(), d_g.get(), d_m.get(), d_v.get(), n, begin, decay,
                      hyper_for(step, weight_decay, grad_scale), nullptr, nullptr);
    }
    const std::vector<float> want_p(p.begin() + begin, p.begin() + end);
    const std::vector<float> got_p = d_p.download();
    EXPECT_LT(relative_error(got_p, want_p), kFp32Tolerance) << begin;
    EXPECT_LT(
        relative_error(d_m.download(), std::vector<float>(m.begin() + begin, m.begin() + end)),
        kFp32Tolerance);
    EXPECT_LT(
        relative_error(d_v.download(), std::vector<float>(v.begin() + begin, v.begin() + end)),
        kFp32Tolerance);
    EXPECT_EQ(to_floats(d_copy.download()), rounded<T>(got_p));  // the copy is the rounded master
  }
}

TYPED_TEST(CudaAdamW, DeviceScaleMultipliesGradientsAndNonFiniteSkipsTheStep) {
  using T = TypeParam;
  auto rng = test_rng();
  const long n = 1003;  // not a multiple of the vector width
  const DeviceRanges decay({ElementRange{100, 600}});
  const std::vector<float> p = random_floats(n, rng), g = random_floats(n, rng);
  DeviceBuffer<float> d_g(g), scale(std::vector<float>{0.25f});
  DeviceBuffer<float> host_scaled_p(p), host_scaled_m(std::vector<float>(n, 0.0f)),
      host_scaled_v(std::vector<float>(n, 0.0f));
  DeviceBuffer<float> device_scaled_p(p), device_scaled_m(std::vector<float>(n, 0.0f)),
      device_scaled_v(std::vector<float>(n, 0.0f));
  adamw_update<T>(host_scaled_p.get(), nullptr, d_g.get(), host_scaled_m.get(), host_scaled_v.get(),
                  n, 0, decay, hyper_for(1, 0.1f, 0.5f * 0.25f), nullptr, nullptr);
  adamw_update<T>(device_scaled_p.get(), nullptr, d_g.get(), device_scaled_m.get(),
                  device_scaled_v.get(), n, 0, decay, hyper_for(1, 0.1f, 0.5f), scale.get(),
                  nullptr);
  EXPECT_LT(relative_error(device_scaled_p.download(), host_scaled_p.download()), kFp32Tolerance);
  EXPECT_LT(relative_error(device_scaled_m.download(), host_scaled_m.download()), kFp32Tolerance);

  scale.upload(std::vector<float>{NAN});
  const std::vector<float> before = device_scaled_p.download();
  adamw_update<T>(device_scaled_p.get(), nullptr, d_g.get(), device_scaled_m.get(),
                  device_scaled_v.get(), n, 0, decay, hyper_for(2, 0.1f, 0.5f), scale.get(),
                  nullptr);
  EXPECT_EQ(device_scaled_p.download(), before);
}

}  // namespace
}  // namespace strata::cuda
