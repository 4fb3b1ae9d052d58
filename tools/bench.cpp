// Benchmarks of the CPU backend, one JSON line each on stdout (the numbers for
// docs/PERFORMANCE.md; timing is measured here, never asserted by tests):
//
//   bench train [--n-layer 4 --n-head 4 --d-model 256 --seq-len 256 --vocab 2048
//                --micro-batch 8 --steps 20 --warmup 3]
//     One training step as the trainer runs it on one rank: zero the gradients, forward,
//     backward, global gradient norm, AdamW. Reports step time, tokens/s, model GFLOP/s
//     (6·N + 12·L·C·T per token) and peak resident memory.
//   bench sgemm [--m 2048 --n 768 --k 256 --repeats 20]
//     OpenBLAS sgemm rate on one shape (default: the model's widest GEMM, (B·T, C) x (C, 3C)).
//
// Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS as for the trainer.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "model/kernels/cpu/blas.h"
#include "model/parameter_layout.h"
#include "tools/tool_args.h"
#include "train/optimizer.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: bench train [--n-layer N --n-head N --d-model N --seq-len N --vocab N "
    "--micro-batch N --steps N --warmup N] | bench sgemm [--m M --n N --k K --repeats R]";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

// Median of the per-step times: robust to the odd scheduler hiccup on a shared machine.
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

void bench_train(const ToolArgs& args) {
  GptShape shape;
  shape.n_layer = positive(args, "--n-layer", 4);
  shape.n_head = positive(args, "--n-head", 4);
  shape.d_model = positive(args, "--d-model", 256);
  shape.seq_len = positive(args, "--seq-len", 256);
  shape.vocab_size = positive(args, "--vocab", 2048);
  if (shape.d_model % shape.n_head != 0) fail("--d-model must be a multiple of --n-head");
  const int batch = positive(args, "--micro-batch", 8);
  const int steps = positive(args, "--steps", 20);
  const int warmup = static_cast<int>(args.integer("--warmup", 3));

  Gpt<float> model(shape, batch);
  const ParameterLayout& layout = model.layout();
  std::vector<float> params(layout.total()), grads(layout.total());
  initialize_gpt_parameters(layout, shape, 1234, params.data());
  OptimizerConfig optimizer_config;
  AdamW optimizer(layout, optimizer_config);

  std::mt19937 rng(7);
  const int T = shape.seq_len;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch) * (T + 1));
  for (auto& token : tokens) token = static_cast<std::int32_t>(rng() % shape.vocab_size);
  std::vector<std::int32_t> inputs, targets;
  for (int b = 0; b < batch; ++b) {
    const auto row = tokens.begin() + static_cast<std::ptrdiff_t>(b) * (T + 1);
    inputs.insert(inputs.end(), row, row + T);
    targets.insert(targets.end(), row + 1, row + T + 1);
  }

  std::vector<double> step_seconds;
  double loss = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto start = Clock::now();
    std::fill(grads.begin(), grads.end(), 0.0f);
    loss = model.forward(params.data(), inputs.data(), targets.data(), batch, T);
    model.backward(params.data(), grads.data(), 1.0f);
    double sum_squares = 0;
    for (float g : grads) sum_squares += static_cast<double>(g) * g;
    const double scale = clip_factor(std::sqrt(sum_squares), 1.0);
    optimizer.step(params.data(), grads.data(), 1e-4, scale);
    if (step >= warmup) step_seconds.push_back(seconds_since(start));
  }
  const double step_s = median(step_seconds);
  const double tokens_per_step = static_cast<double>(batch) * T;
  std::printf(
      "{\"bench\": \"train\", \"n_layer\": %d, \"n_head\": %d, \"d_model\": %d, \"seq_len\": %d, "
      "\"vocab\": %d, \"micro_batch\": %d, \"params\": %zu, \"steps\": %d, \"step_ms\": %.2f, "
      "\"tokens_per_s\": %.1f, \"gflops\": %.2f, \"peak_rss_mib\": %.1f, \"final_loss\": %.4f}\n",
      shape.n_layer, shape.n_head, shape.d_model, shape.seq_len, shape.vocab_size, batch,
      layout.total(), steps, 1e3 * step_s, tokens_per_step / step_s,
      shape.flops_per_token() * tokens_per_step / step_s * 1e-9, peak_rss_mib(), loss);
}

void bench_sgemm(const ToolArgs& args) {
  const int m = positive(args, "--m", 2048), n = positive(args, "--n", 768);
  const int k = positive(args, "--k", 256), repeats = positive(args, "--repeats", 20);
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
  const double gflops = 2.0 * m * n * k / median(times) * 1e-9;
  std::printf("{\"bench\": \"sgemm\", \"m\": %d, \"n\": %d, \"k\": %d, \"gflops\": %.2f}\n", m, n,
              k, gflops);
}

void run(int argc, char** argv) {
  if (argc < 2) fail("missing benchmark name (", kUsage, ")");
  const std::string name = argv[1];
  if (name == "train") {
    bench_train(ToolArgs(argc, argv, 2,
                         {"--n-layer", "--n-head", "--d-model", "--seq-len", "--vocab",
                          "--micro-batch", "--steps", "--warmup"},
                         kUsage));
  } else if (name == "sgemm") {
    bench_sgemm(ToolArgs(argc, argv, 2, {"--m", "--n", "--k", "--repeats"}, kUsage));
  } else {
    fail("unknown benchmark '", name, "' (", kUsage, ")");
  }
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  try {
    strata::run(argc, argv);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
