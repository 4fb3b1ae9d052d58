// `bench attention`: Strata's fused causal attention (model/kernels/cuda/attention.h) on the GPU,
// forward and backward timed apart with CUDA events (median of --repeats after 3 warm-up runs),
// on random qkv of a GPT-2 shape. FLOPs count the causal half of the two forward matmuls
// (2·B·NH·T²·hs) and 2.5× that for the backward's five, the convention FlashAttention's papers
// use, so TFLOP/s compare directly with published library figures. Not in builds without CUDA.
//
// Status: compiled for sm_90a, never run on a GPU (untested).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "tools/bench.h"
#include "train/cuda_training.h"

#if STRATA_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <type_traits>

#include "model/kernels/cuda/arena.h"
#include "model/kernels/cuda/attention.h"
#include "model/kernels/cuda/check.h"
#endif

namespace strata::bench {

#if STRATA_HAVE_CUDA
namespace {

template <class T>
T to_dtype(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else
    return __float2half(x);
}

// A device array of `n` random values in [-1, 1] (fixed seed).
template <class T>
T* random_device_array(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<T> host(n);
  for (T& x : host) x = to_dtype<T>(uniform(rng));
  T* device = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), n * sizeof(T)));
  STRATA_CUDA_CHECK(cudaMemcpy(device, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// Median milliseconds of `repeats` runs of `launch` on `stream`, after 3 unrecorded ones.
template <class F>
double median_ms(cudaStream_t stream, int repeats, const F& launch) {
  cudaEvent_t start, stop;
  STRATA_CUDA_CHECK(cudaEventCreate(&start));
  STRATA_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    STRATA_CUDA_CHECK(cudaEventRecord(start, stream));
    launch();
    STRATA_CUDA_CHECK(cudaEventRecord(stop, stream));
    STRATA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  STRATA_CUDA_CHECK(cudaEventDestroy(start));
  STRATA_CUDA_CHECK(cudaEventDestroy(stop));
  return median(times);
}

template <class T>
void run_attention(int B, int T_, int NH, int hs, int repeats, const std::string& dtype) {
  const int C = NH * hs;
  const std::size_t rows = static_cast<std::size_t>(B) * T_;
  std::mt19937 rng(11);
  T* qkv = random_device_array<T>(rows * 3 * C, rng);
  T* dout = random_device_array<T>(rows * C, rng);
  T *out = nullptr, *dqkv = nullptr;
  float* lse = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), rows * C * sizeof(T)));
  STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dqkv), rows * 3 * C * sizeof(T)));
  STRATA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&lse), rows * NH * sizeof(float)));
  cuda::DeviceArena arena(std::size_t{64} << 20);
  cudaStream_t stream;
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double forward_ms = median_ms(
      stream, repeats, [&] { cuda::attention_forward(out, lse, qkv, B, T_, C, NH, stream); });
  const double backward_ms = median_ms(stream, repeats, [&] {
    cuda::attention_backward(dqkv, dout, qkv, out, lse, B, T_, C, NH, arena, stream);
  });
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  STRATA_CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* p : {static_cast<void*>(qkv), static_cast<void*>(dout), static_cast<void*>(out),
                  static_cast<void*>(dqkv), static_cast<void*>(lse)})
    STRATA_CUDA_CHECK(cudaFree(p));

  const double forward_flops = 2.0 * B * NH * static_cast<double>(T_) * T_ * hs;
  const double backward_flops = 2.5 * forward_flops;
  cudaDeviceProp properties{};
  STRATA_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  JsonFields json;
  json.text("bench", "attention")
      .text("device_name", properties.name)
      .text("dtype", dtype)
      .integer("batch", B)
      .integer("seq_len", T_)
      .integer("heads", NH)
      .integer("head_size", hs)
      .integer("repeats", repeats)
      .number("forward_ms", forward_ms, "%.4f")
      .number("backward_ms", backward_ms, "%.4f")
      .number("forward_tflops", forward_flops / forward_ms * 1e-9, "%.2f")
      .number("backward_tflops", backward_flops / backward_ms * 1e-9, "%.2f")
      .number("total_tflops", (forward_flops + backward_flops) / (forward_ms + backward_ms) * 1e-9,
              "%.2f");
  std::printf("%s\n", json.str().c_str());
}

}  // namespace
#endif

void bench_attention(const ToolArgs& args) {
  const int B = positive(args, "--batch", 8), T_ = positive(args, "--seq-len", 1024);
  const int NH = positive(args, "--heads", 12), hs = positive(args, "--head-size", 64);
  const int repeats = positive(args, "--repeats", 20);
  const std::string dtype = args.get("--dtype", "bf16");
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    fail("--dtype must be fp32, bf16 or fp16, got '", dtype, "'");
#if STRATA_HAVE_CUDA
  if (cuda_device_count() == 0) fail("bench attention: no usable CUDA device");
  if (!cuda::attention_head_size_supported(hs))
    fail("--head-size ", hs, " is not supported by the attention kernel (16, 32, 64, 128)");
  if (dtype == "bf16")
    run_attention<__nv_bfloat16>(B, T_, NH, hs, repeats, dtype);
  else if (dtype == "fp16")
    run_attention<__half>(B, T_, NH, hs, repeats, dtype);
  else
    run_attention<float>(B, T_, NH, hs, repeats, dtype);
#else
  (void)B, (void)T_, (void)NH, (void)hs, (void)repeats;
  fail("bench attention needs the CUDA backend (this build has none)");
#endif
}

}  // namespace strata::bench
