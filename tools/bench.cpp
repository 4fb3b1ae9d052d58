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
//   bench attention [--device auto --batch 8 --seq-len 1024 --heads 12 --head-size 64
//                    --dtype bf16 --repeats 20]
//     The CUDA flash-attention kernel's forward and backward, and for bf16/fp16 cuDNN's fused
//     flash attention on the same inputs where the build has that comparison (STRATA_CUDNN_BENCH;
//     tools/bench_attention.cpp); with --device cpu (or auto without a GPU) the CPU backend's
//     attention and the scratch memory it grew (tools/bench_attention_cpu.cpp).
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

int positive(const ToolArgs& args, const char* flag) {
  const long long value = args.integer(flag);
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

CommandSpec sgemm_command() {
  return {"usage: bench sgemm [--m M] [--n N] [--k K] [--repeats R]",
          "Times the float GEMM C (M, N) = A (M, K) · B (K, N) of the CPU's BLAS library with this "
          "process's threads: one JSON line with GFLOP/s (median of the repeats after a warm-up) "
          "and the library's name, version and threading.",
          {{"--m", "M", "2048", "rows of A and C"},
           {"--n", "N", "768", "columns of B and C"},
           {"--k", "K", "256", "columns of A, rows of B"},
           {"--repeats", "R", "20", "timed products"}}};
}

namespace {

void bench_sgemm(const ToolArgs& args) {
  const int m = positive(args, "--m"), n = positive(args, "--n");
  const int k = positive(args, "--k"), repeats = positive(args, "--repeats");
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

struct Benchmark {
  const char* name;
  CommandSpec (*command)();
};
const Benchmark kBenchmarks[] = {{"train", train_command},
                                 {"attention", attention_command},
                                 {"calibrate", calibrate_command},
                                 {"checkpoint", checkpoint_command},
                                 {"sgemm", sgemm_command}};

// `bench --help`: every benchmark's usage.
CommandSpec tool_command() {
  CommandSpec tool{"usage: bench train|attention|calibrate|checkpoint|sgemm [FLAGS]",
                   "Measures: each benchmark prints one JSON line on stdout. `bench NAME --help` "
                   "prints a benchmark's own flags and defaults.",
                   {},
                   ""};
  for (const Benchmark& benchmark : kBenchmarks)
    tool.notes += "  " + benchmark.command().usage.substr(std::string("usage: ").size()) + "\n";
  tool.notes.pop_back();
  return tool;
}

void run(int argc, char** argv) {
  const CommandSpec tool = tool_command();
  if (argc < 2 || std::string(argv[1]).starts_with("-")) {
    exit_with_help(argc, argv, tool);
    fail("missing benchmark name (", tool.usage, ")");
  }
  const std::string name = argv[1];
  const auto known = std::ranges::find(kBenchmarks, name, &Benchmark::name);
  if (known == std::end(kBenchmarks)) fail("unknown benchmark '", name, "' (", tool.usage, ")");
  if (name == "train") return bench_train(argc, argv, 2);
  const ToolArgs args(argc, argv, 2, known->command());
  if (name == "attention") return bench_attention(args);
  if (name == "calibrate") return bench_calibrate(argc, argv, args);
  if (name == "checkpoint") return bench_checkpoint(args);
  bench_sgemm(args);
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
