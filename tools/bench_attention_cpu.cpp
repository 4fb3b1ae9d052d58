// `bench attention --device cpu`: the CPU backend's causal attention
// (model/kernels/cpu/attention.h) on random qkv, forward and backward timed apart, in fp32 with
// this process's threads. FLOPs are counted as for the GPU (tools/bench_attention.cpp: the causal
// half of the two forward matmuls, 2·B·NH·T²·hs, and 2.5× that for the backward), so the TFLOP/s
// compare across devices. The line also gives the attention scratch the two passes grew
// (`scratch_bytes`: the kernel's own working memory, beyond its inputs and outputs), the part of
// attention's memory that depends on how the kernel is blocked. --dtype rounds the backward's
// recomputed probabilities as that dtype's training run does (the storage stays fp32: the CPU
// backend emulates bf16 and fp16).
//
// Each figure is the median of --repeats calls after one untimed call.
#include <omp.h>

#include <cstdio>
#include <random>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/blas.h"
#include "tools/bench.h"

namespace strata::bench {
namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

template <class Run>
double median_ms(int repeats, const Run& run) {
  run();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    run();
    times.push_back(seconds_since(start) * 1e3);
  }
  return median(times);
}

}  // namespace

void bench_attention_cpu(int B, int T_, int NH, int hs, cpu::ComputeDtype probs, int repeats) {
  const int C = NH * hs, C3 = 3 * C;
  const std::size_t rows = static_cast<std::size_t>(B) * T_;
  const std::vector<float> qkv = random_floats(rows * C3, 1);
  const std::vector<float> dout = random_floats(rows * C, 2);
  std::vector<float> out(rows * C), lse(rows * NH), dqkv(rows * C3), scratch;
  const double forward_ms = median_ms(repeats, [&] {
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), B, T_, C, NH, NH, scratch);
  });
  const std::size_t forward_scratch = scratch.capacity() * sizeof(float);
  scratch = {};
  const double backward_ms = median_ms(repeats, [&] {
    cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T_, C,
                            NH, NH, probs, scratch);
  });
  const std::size_t backward_scratch = scratch.capacity() * sizeof(float);

  const double forward_flops = 2.0 * B * NH * static_cast<double>(T_) * T_ * hs;
  JsonLine json;
  json.add("bench", "attention")
      .add("device", "cpu")
      .add("dtype", cpu::compute_dtype_name(probs))
      .add("batch", B)
      .add("seq_len", T_)
      .add("heads", NH)
      .add("head_size", hs)
      .add("threads", omp_get_max_threads())
      .add("forward_ms", forward_ms, "%.3f")
      .add("backward_ms", backward_ms, "%.3f")
      .add("forward_tflops", forward_flops / forward_ms * 1e-9, "%.4f")
      .add("backward_tflops", 2.5 * forward_flops / backward_ms * 1e-9, "%.4f")
      .add("forward_scratch_bytes", forward_scratch)
      .add("backward_scratch_bytes", backward_scratch);
  add_blas_library(json);
  std::printf("%s\n", json.str().c_str());
}

}  // namespace strata::bench
