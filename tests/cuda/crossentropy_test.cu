// Softmax cross-entropy over vocabulary shards against model/kernels/cpu/vocab_parallel.h: the
// three-phase shard contract with the cross-shard combination done on the host (as the
// tensor-parallel group would), the losses alone, the fused finish + backward, and the
// single-shard kernels (statistics for a later backward, and forward + backward in one launch).
// The reference keeps fp32 (or double) probabilities; the kernels round the gradient once.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "model/kernels/cpu/vocab_parallel.h"
#include "model/kernels/cuda/crossentropy.h"
#include "tests/cuda/cuda_test_support.h"

namespace strata::cuda {
namespace {

using namespace testing;

template <class T>
class CudaCrossEntropy : public ::testing::Test {};
TYPED_TEST_SUITE(CudaCrossEntropy, ComputeDtypes, DtypeName);

std::vector<std::int32_t> random_targets(int N, int V, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> dist(0, V - 1);
  std::vector<std::int32_t> t(N);
  for (auto& x : t) x = dist(rng);
  return t;
}

// Columns [r·Vl, (r+1)·Vl) of (N, Vp) logits.
std::vector<float> shard_of(const std::vector<float>& logits, int N, int Vp, int r, int Vl) {
  std::vector<float> shard(static_cast<std::size_t>(N) * Vl);
  for (int n = 0; n < N; ++n)
    std::copy_n(logits.begin() + static_cast<long>(n) * Vp + static_cast<long>(r) * Vl, Vl,
                shard.begin() + static_cast<long>(n) * Vl);
  return shard;
}

// Four shards of a padded vocabulary; the last holds only padding (V = 700 < 3·256).
TYPED_TEST(CudaCrossEntropy, ShardPhasesCombineLikeCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  const int N = 37, V = 700, Vp = 1024, shards = 4, Vl = Vp / shards;
  const std::vector<float> logits =
      rounded<T>(random_floats(static_cast<std::size_t>(N) * Vp, rng, -4.0f, 4.0f));
  const std::vector<std::int32_t> targets = random_targets(N, V, rng);
  const std::vector<float> dlosses = random_floats(N, rng, 0.5f, 1.5f);
  DeviceBuffer<std::int32_t> d_targets(targets);
  DeviceBuffer<float> d_dlosses(dlosses);

  std::vector<float> max(N, -INFINITY);
  std::vector<std::unique_ptr<DeviceBuffer<T>>> d_logits;
  for (int r = 0; r < shards; ++r) {
    const std::vector<float> shard = shard_of(logits, N, Vp, r, Vl);
    d_logits.push_back(std::make_unique<DeviceBuffer<T>>(to_dtype<T>(shard)));
    DeviceBuffer<float> d_max(N);
    crossentropy_shard_max(d_max.get(), d_logits[r]->get(), r * Vl, V, N, Vl, nullptr);
    std::vector<float> cpu_max(N);
    cpu::crossentropy_shard_max(cpu_max.data(), shard.data(), r * Vl, V, N, Vl);
    const std::vector<float> got = d_max.download();
    EXPECT_EQ(got, cpu_max) << "shard " << r;  // a maximum is exact
    for (int n = 0; n < N; ++n) max[n] = std::max(max[n], got[n]);
  }
  DeviceBuffer<float> d_max(max);
  std::vector<float> sums(N, 0.0f), target_logit(N, 0.0f), want_sums(N, 0.0f), want_target(N, 0.0f);
  for (int r = 0; r < shards; ++r) {
    DeviceBuffer<float> d_sum(N), d_target(N);
    crossentropy_shard_sums(d_sum.get(), d_target.get(), d_logits[r]->get(), d_targets.get(),
                            d_max.get(), r * Vl, V, N, Vl, nullptr);
    const std::vector<float> shard = shard_of(logits, N, Vp, r, Vl);
    std::vector<float> s(N), t(N);
    cpu::crossentropy_shard_sums(s.data(), t.data(), shard.data(), targets.data(), max.data(),
                                 r * Vl, V, N, Vl);
    const std::vector<float> got_sum = d_sum.download(), got_target = d_target.download();
    for (int n = 0; n < N; ++n) {
      sums[n] += got_sum[n];
      target_logit[n] += got_target[n];
      want_sums[n] += s[n];
      want_target[n] += t[n];
    }
  }
  EXPECT_LT(relative_error(sums, want_sums), kFp32Tolerance);
  EXPECT_EQ(target_logit, want_target);
  DeviceBuffer<float> d_sums(want_sums), d_target(want_target);
  for (int r = 0; r < shards; ++r) {
    const std::vector<float> shard = shard_of(logits, N, Vp, r, Vl);
    std::vector<float> want_losses(N), probs(shard.size()), dlogits(shard.size());
    cpu::crossentropy_shard_finish(want_losses.data(), probs.data(), shard.data(), max.data(),
                                   want_sums.data(), want_target.data(), r * Vl, V, N, Vl);
    cpu::crossentropy_shard_backward(dlogits.data(), probs.data(), targets.data(), dlosses.data(),
                                     r * Vl, V, N, Vl);
    // The losses alone (a forward whose backward comes later).
    DeviceBuffer<float> d_losses(N), d_losses_fused(N);
    crossentropy_losses(d_losses.get(), d_max.get(), d_sums.get(), d_target.get(), N, nullptr);
    EXPECT_LT(relative_error(d_losses.download(), want_losses), kFp32Tolerance) << r;
    // The fused finish + backward.
    DeviceBuffer<T> d_fused(to_dtype<T>(shard));
    crossentropy_shard_finish_backward(d_losses_fused.get(), d_fused.get(), d_fused.get(),
                                       d_targets.get(), d_dlosses.get(), d_max.get(), d_sums.get(),
                                       d_target.get(), r * Vl, V, N, Vl, nullptr);
    EXPECT_LT(relative_error(to_floats(d_fused.download()), dlogits), tolerance<T>()) << r;
    EXPECT_LT(relative_error(d_losses_fused.download(), want_losses), kFp32Tolerance) << r;
  }
}

// One shard: the online-softmax kernels against the three phases of the CPU reference.
TYPED_TEST(CudaCrossEntropy, FusedSingleShardMatchesCpu) {
  using T = TypeParam;
  auto rng = test_rng();
  struct Case {
    int N, V, Vp;
  };
  for (const Case c :
       {Case{1, 10, 16}, Case{37, 1000, 1024}, Case{5, 50257, 50304}, Case{3, 97, 101}}) {
    const std::size_t size = static_cast<std::size_t>(c.N) * c.Vp;
    const std::vector<float> logits = rounded<T>(random_floats(size, rng, -8.0f, 8.0f));
    const std::vector<std::int32_t> targets = random_targets(c.N, c.V, rng);
    const std::vector<float> dlosses(c.N, 1.0f / c.N);
    // The reference in double: over 50257 columns the CPU's sequential fp32 Σ exp is itself
    // ~5e-5 off (the kernel's tree sum is closer), more than the fp32 tolerance.
    const std::vector<double> logits64(logits.begin(), logits.end()),
        dlosses64(dlosses.begin(), dlosses.end());
    std::vector<double> max(c.N), sums(c.N), target_logit(c.N), losses64(c.N), probs64(size),
        dlogits64(size);
    cpu::crossentropy_shard_max(max.data(), logits64.data(), 0, c.V, c.N, c.Vp);
    cpu::crossentropy_shard_sums(sums.data(), target_logit.data(), logits64.data(), targets.data(),
                                 max.data(), 0, c.V, c.N, c.Vp);
    cpu::crossentropy_shard_finish(losses64.data(), probs64.data(), logits64.data(), max.data(),
                                   sums.data(), target_logit.data(), 0, c.V, c.N, c.Vp);
    cpu::crossentropy_shard_backward(dlogits64.data(), probs64.data(), targets.data(),
                                     dlosses64.data(), 0, c.V, c.N, c.Vp);
    const std::vector<float> losses(losses64.begin(), losses64.end()),
        probs(probs64.begin(), probs64.end()), dlogits(dlogits64.begin(), dlogits64.end());

    DeviceBuffer<std::int32_t> d_targets(targets);
    DeviceBuffer<float> d_dlosses(dlosses), d_losses(c.N), d_losses2(c.N), d_losses3(c.N),
        d_max(c.N), d_sums(c.N), d_target(c.N);
    DeviceBuffer<T> d_logits(to_dtype<T>(logits)), d_grad(to_dtype<T>(logits));
    // Statistics now, the gradient later from them (a pipeline's last stage).
    softmax_crossentropy_stats(d_losses.get(), d_max.get(), d_sums.get(), d_target.get(),
                               d_logits.get(), d_targets.get(), c.N, c.V, c.Vp, nullptr);
    EXPECT_LT(relative_error(d_losses.download(), losses), kFp32Tolerance) << c.Vp;
    const std::vector<float> want_max(max.begin(), max.end()), want_sums(sums.begin(), sums.end()),
        want_target(target_logit.begin(), target_logit.end());
    EXPECT_EQ(d_max.download(), want_max) << c.Vp;  // a maximum is exact
    EXPECT_EQ(d_target.download(), want_target) << c.Vp;
    // The online sum is relative to the running maximum: the same value up to rounding.
    EXPECT_LT(relative_error(d_sums.download(), want_sums), kFp32Tolerance) << c.Vp;
    EXPECT_EQ(to_floats(d_logits.download()), to_floats(to_dtype<T>(logits)));  // only read
    crossentropy_shard_finish_backward(d_losses3.get(), d_logits.get(), d_logits.get(),
                                       d_targets.get(), d_dlosses.get(), d_max.get(), d_sums.get(),
                                       d_target.get(), 0, c.V, c.N, c.Vp, nullptr);
    EXPECT_EQ(d_losses3.download(), d_losses.download()) << c.Vp;  // the same formula
    EXPECT_LT(relative_error(to_floats(d_logits.download()), dlogits), tolerance<T>()) << c.Vp;
    // Forward and backward in one launch.
    softmax_crossentropy_forward_backward(d_losses2.get(), d_grad.get(), d_grad.get(),
                                          d_targets.get(), d_dlosses.get(), c.N, c.V, c.Vp,
                                          nullptr);
    EXPECT_LT(relative_error(d_losses2.download(), losses), kFp32Tolerance) << c.Vp;
    EXPECT_LT(relative_error(to_floats(d_grad.download()), dlogits), tolerance<T>()) << c.Vp;
  }
}

}  // namespace
}  // namespace strata::cuda
