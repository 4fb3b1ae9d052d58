// Benchmarks, one JSON line each on stdout (the numbers for
// docs/PERFORMANCE.md; timing is measured here, never asserted by tests):
//
//   bench train --config CONFIG.yaml [--set key.path=value]... [--steps 20 --warmup 3]
//               [--peak TFLOPS]
//     That config's model, micro-batch, precision.compute and recompute, trained on synthetic
//     tokens in this one process (the parallel layout is not used). tools/bench_train.cpp.
//   bench train [--n-layer 4 --n-head 4 --d-model 256 --seq-len 256 --vocab 2048
//                --micro-batch 8 --steps 20 --warmup 3 --peak TFLOPS]
//     The same for a shape given by flags, in fp32 without recomputation.
//     Both report step time, tokens/s, model TFLOP/s (6·N + 12·L·C·T per token), MFU against a
//     peak (--peak, or the measured sgemm 2048³ rate), peak resident and activation memory.
//   bench attention [--batch 8 --seq-len 1024 --heads 12 --head-size 64 --dtype bf16
//                    --repeats 20]
//     The CUDA flash-attention kernel's forward and backward, and for bf16/fp16 cuDNN's fused
//     flash attention on the same inputs where the build has that comparison (STRATA_CUDNN_BENCH;
//     tools/bench_attention.cpp).
//   mpirun -np N bench calibrate [--out FILE] [--name NAME] [--rows 2048 --width 256
//                                 --seq-len 256 --heads 4 --repeats 20]
//     This machine as a planner cluster description (plan/cluster.h) for N ranks: per-core
//     GEMM, attention and elementwise rates of the CPU kernels, MPI latency and bandwidth between
//     ranks, memory per rank. tools/bench_calibrate.cpp.
//   bench checkpoint [--n-layer 12 --n-head 12 --d-model 768 --seq-len 1024 --vocab 50257
//                     --dir DIR]
//     Writing and verifying a checkpoint of that shape's parameters and AdamW moments (GPT-2 124M
//     by default: about 1.5 GB), the seal alone, and the checksum rates
//     (tools/bench_checkpoint.cpp).
//   bench sgemm [--m 2048 --n 768 --k 256 --repeats 20]
//     The float GEMM rate (the BLAS library blas.h chose) on one shape (default: the model's widest
//     GEMM, (B·T, C) x (C, 3C)).
//
// Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS as for the trainer.
#include "tools/bench.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "model/kernels/cpu/blas.h"
#include "train/metrics/metrics.h"

namespace strata::bench {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

int positive(const ToolArgs& args, const char* flag, long long fallback) {
  const long long value = args.integer(flag, fallback);
  if (value <= 0) fail(flag, " must be positive, got ", value);
  return static_cast<int>(value);
}

void add_blas_library(JsonLine& json) {
  const cpu::BlasLibrary& blas = cpu::blas_library();
  json.add("blas", blas.name)
      .add("blas_version", blas.version)
      .add("blas_threading", blas.threading)
      .add("blas_kernels", blas.kernels);
}

double sgemm_gflops(int m, int n, int k, int repeats) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (auto& x : a) x = uniform(rng);
  for (auto& x : b) x = uniform(rng);
  cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);  // warm-up
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    times.push_back(seconds_since(start));
  }
  return 2.0 * m * n * k / median(times) * 1e-9;
}

namespace {

constexpr const char* kUsage =
    "usage: bench train --config CONFIG.yaml [--set key.path=value]... [--steps N] [--warmup N] "
    "[--peak TFLOPS] | bench train [--n-layer N --n-head N --d-model N --seq-len N --vocab N "
    "--micro-batch N --steps N --warmup N --peak TFLOPS] | bench sgemm [--m M --n N --k K "
    "--repeats R] | bench calibrate [--out FILE --name NAME --rows N --width C --seq-len T --heads "
    "H --repeats R] | bench attention [--batch B --seq-len T --heads H --head-size D --dtype "
    "fp32|bf16|fp16 --repeats R] | bench checkpoint [--n-layer N --n-head N --d-model N "
    "--seq-len N --vocab N --dir DIR]";

void bench_sgemm(const ToolArgs& args) {
  const int m = positive(args, "--m", 2048), n = positive(args, "--n", 768);
  const int k = positive(args, "--k", 256), repeats = positive(args, "--repeats", 20);
  const double gflops = sgemm_gflops(m, n, k, repeats);
  JsonLine json = JsonLine()
                      .add("bench", "sgemm")
                      .add("m", m)
                      .add("n", n)
                      .add("k", k)
                      .add("gflops", gflops, "%.2f");
  add_blas_library(json);
  std::printf("%s\n", json.str().c_str());
}

void run(int argc, char** argv) {
  exit_with_usage_on_help(argc, argv, kUsage);
  if (argc < 2) fail("missing benchmark name (", kUsage, ")");
  const std::string name = argv[1];
  if (name == "train") {
    bench_train(argc, argv, 2);
  } else if (name == "attention") {
    bench_attention(ToolArgs(
        argc, argv, 2, {"--batch", "--seq-len", "--heads", "--head-size", "--dtype", "--repeats"},
        kUsage));
  } else if (name == "calibrate") {
    bench_calibrate(
        argc, argv,
        ToolArgs(argc, argv, 2,
                 {"--out", "--name", "--rows", "--width", "--seq-len", "--heads", "--repeats"},
                 kUsage));
  } else if (name == "checkpoint") {
    bench_checkpoint(
        ToolArgs(argc, argv, 2,
                 {"--n-layer", "--n-head", "--d-model", "--seq-len", "--vocab", "--dir"}, kUsage));
  } else if (name == "sgemm") {
    bench_sgemm(ToolArgs(argc, argv, 2, {"--m", "--n", "--k", "--repeats"}, kUsage));
  } else {
    fail("unknown benchmark '", name, "' (", kUsage, ")");
  }
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  try {
    strata::bench::run(argc, argv);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
