#include "plan/calibrate.h"

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "model/core/error.h"
#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "model/kernels/cpu/thread_budget.h"
#include "model/ops/ops.h"

namespace strata {

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

using Clock = std::chrono::steady_clock;

// Median seconds of `repeats` calls of `run` after one warm-up call.
template <class Run>
double timed(int repeats, Run run) {
  run();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct ComputeRates {
  double matmul_tflops = 0, attention_tflops = 0, elementwise_gbs = 0, weight_operand_gbs = 0;
  double gemm_seconds = 0;  // the layer's four GEMMs, once
};

// Median seconds of a layer's four GEMMs ((N, C) → 3C, C, 4C and (N, 4C) → C), forward.
double gemm_seconds(int N, int C, int repeats) {
  double seconds = 0;
  for (const auto& shape : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
    const int in = shape.first, out = shape.second;  // not a structured binding: lambdas capture it
    const std::vector<float> x = random_floats(static_cast<std::size_t>(N) * in, 1);
    const std::vector<float> w = random_floats(static_cast<std::size_t>(in) * out, 2);
    const std::vector<float> b = random_floats(static_cast<std::size_t>(out), 3);
    std::vector<float> y(static_cast<std::size_t>(N) * out);
    seconds += timed(
        repeats, [&] { cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), N, in, out); });
  }
  return seconds;
}

struct PassTiming {
  double seconds = 0, flops = 0, weight_bytes = 0;
};

// Median seconds of a layer's four GEMMs at N rows in a training pass: forward, then backward
// (the input's and the weight's gradients: three GEMM calls per weight, each touching all of it).
// Successive calls use the weights of different layers, 64 MiB in all, so that they come from
// memory as a model's layers do, not from a cache that one layer's would fit.
PassTiming layer_gemm_pass(int N, int C, int repeats) {
  const std::size_t n = static_cast<std::size_t>(N), c = static_cast<std::size_t>(C);
  const std::size_t layer_weights = 12 * c * c;  // C·3C + C·C + C·4C + 4C·C
  const std::size_t layers =
      std::max<std::size_t>(2, (std::size_t{64} << 20) / (2 * layer_weights * sizeof(float)) + 1);
  const std::vector<float> x = random_floats(n * 4 * c, 1), dy = random_floats(n * 4 * c, 7);
  const std::vector<float> b = random_floats(4 * c, 3);
  const std::vector<float> w = random_floats(layers * layer_weights, 2);
  std::vector<float> dw(w.size()), y(n * 4 * c), dx(n * 4 * c), db(4 * c);
  std::size_t layer = 0;
  PassTiming pass;
  pass.seconds = timed(repeats, [&] {
    const float* weights = w.data() + layer * layer_weights;
    float* grads = dw.data() + layer * layer_weights;
    for (const auto& shape : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
      const int in = shape.first,
                out = shape.second;  // not a structured binding: lambdas capture it
      cpu::matmul_forward(y.data(), x.data(), weights, b.data(), N, in, out);
      cpu::matmul_backward(dx.data(), grads, db.data(), dy.data(), x.data(), weights, N, in, out);
      weights += static_cast<std::size_t>(in) * out;
      grads += static_cast<std::size_t>(in) * out;
    }
    layer = (layer + 1) % layers;
  });
  pass.flops = 3 * 2.0 * N * 12 * c * c;
  pass.weight_bytes = 3.0 * layer_weights * sizeof(float);
  return pass;
}

ComputeRates measure_compute(int rows, int width, int seq_len, int heads, int repeats) {
  const int N = rows, C = width;
  ComputeRates rates;
  rates.gemm_seconds = gemm_seconds(N, C, repeats);
  // A GEMM pass costs FLOPs / rate + weight bytes / weight rate: timing it at N and N/8 rows
  // separates the two (the weights' part does not shrink with the rows: OpenBLAS packs them).
  const PassTiming full = layer_gemm_pass(N, C, repeats);
  const PassTiming eighth = layer_gemm_pass(std::max(1, N / 8), C, repeats);
  const double per_flop =
      std::max(0.0, full.seconds - eighth.seconds) / (full.flops - eighth.flops);
  // A noisy fit is bounded: the FLOPs take at least half the full pass, the weights at least 1%.
  const double flop_seconds = std::clamp(per_flop * full.flops, full.seconds / 2, full.seconds);
  const double weight_seconds = std::max(full.seconds - flop_seconds, full.seconds / 100);
  rates.matmul_tflops = full.flops / flop_seconds * 1e-12;
  rates.weight_operand_gbs = full.weight_bytes / weight_seconds * 1e-9;

  const int B = std::max(1, N / seq_len);
  const std::vector<float> qkv = random_floats(static_cast<std::size_t>(B) * seq_len * 3 * C, 4);
  std::vector<float> att(static_cast<std::size_t>(B) * seq_len * C), scratch;
  std::vector<float> lse(static_cast<std::size_t>(B) * seq_len * heads);
  const double attention = timed(repeats, [&] {
    cpu::attention_forward(att.data(), lse.data(), qkv.data(), B, seq_len, C, heads, heads,
                           scratch);
  });
  rates.attention_tflops = 4.0 * B * seq_len * static_cast<double>(seq_len) * C / attention * 1e-12;

  const std::vector<float> x = random_floats(static_cast<std::size_t>(N) * C, 5);
  const std::vector<float> weight = random_floats(static_cast<std::size_t>(C), 6);
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(N)), rstd(mean.size());
  const double layernorm = timed(repeats, [&] {
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                           weight.data(), N, C, kGpt2NormEps);
  });
  const double gelu =
      timed(repeats, [&] { cpu::gelu_forward(y.data(), x.data(), static_cast<long>(x.size())); });
  rates.elementwise_gbs = 2.0 * 2 * x.size() * sizeof(float) / (layernorm + gelu) * 1e-9;
  return rates;
}

// Half the median round trip of `bytes` between this rank and `peer` (the lower rank starts).
double half_round_trip(int rank, int peer, std::size_t bytes, int repeats) {
  std::vector<char> buffer(bytes);
  const int count = static_cast<int>(bytes);
  const auto once = [&] {
    if (rank < peer) {
      MPI_Send(buffer.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(buffer.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buffer.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    }
  };
  return timed(repeats, once) / 2;
}

// The cores the ranks share: the union of their affinity masks (a rank that mpirun bound to one
// core sees only that core in its own).
int shared_cores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return available_cores();
  MPI_Allreduce(MPI_IN_PLACE, &mask, sizeof(mask), MPI_BYTE, MPI_BOR, MPI_COMM_WORLD);
  return std::max(1, CPU_COUNT(&mask));
}

// Waits at a barrier without spinning, so that rank 0's single-threaded timings have the cores.
void sleeping_barrier() {
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  for (int done = 0; !done;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

}  // namespace

ClusterSpec calibrate_this_machine(const CalibrationShape& shape, int ranks_on_host,
                                   const std::string& name) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (shape.width % shape.heads != 0)
    fail("calibration width ", shape.width, " must be a multiple of its heads ", shape.heads);
  const int cores = shared_cores();
  set_thread_budget(ranks_on_host, 1);

  ComputeRates rates;
  if (rank == 0)
    rates = measure_compute(shape.rows, shape.width, shape.seq_len, shape.heads, shape.repeats);
  sleeping_barrier();
  MPI_Bcast(&rates, sizeof(rates), MPI_BYTE, 0, MPI_COMM_WORLD);

  // What a rank blocked in MPI costs the others: as many ranks as there are cores time the same
  // GEMMs again while every other rank waits in a blocking receive (as a pipeline stage waits for
  // its input); rank 0's slowdown says what share of a core each waiting rank takes:
  // speed = cores / (cores + share · (ranks − cores)).
  double waiting_share = 0;
  if (ranks > cores) {
    if (rank < cores) {
      const double speed =
          std::min(1.0, rates.gemm_seconds / gemm_seconds(shape.rows, shape.width, shape.repeats));
      if (rank == 0) {
        waiting_share = std::clamp((cores / speed - cores) / (ranks - cores), 0.0, 1.0);
        char token = 0;
        for (int r = cores; r < ranks; ++r) MPI_Send(&token, 1, MPI_CHAR, r, 1, MPI_COMM_WORLD);
      }
    } else {
      char token = 0;
      MPI_Recv(&token, 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Bcast(&waiting_share, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }

  // A message between two ranks while the others compute: ranks 0 and 1 ping-pong, computing
  // between messages as pipeline stages do, and every other rank runs GEMMs until told to stop.
  double busy_latency = 0;
  if (ranks > cores && ranks >= 3) {
    if (rank < 2) {
      std::vector<double> times;
      char token = 0;
      for (int i = 0; i < 10 * shape.repeats; ++i) {
        const auto start = Clock::now();
        if (rank == 0) {
          MPI_Send(&token, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD);
          MPI_Recv(&token, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(&token, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(&token, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
        }
        times.push_back(std::chrono::duration<double>(Clock::now() - start).count() / 2);
        gemm_seconds(shape.rows / 4, shape.width, 1);
      }
      std::sort(times.begin(), times.end());
      busy_latency = times[times.size() / 2];
      if (rank == 0)
        for (int r = 2; r < ranks; ++r) MPI_Send(&token, 1, MPI_CHAR, r, 3, MPI_COMM_WORLD);
    } else {
      MPI_Request stop;
      char token = 0;
      MPI_Irecv(&token, 1, MPI_CHAR, 0, 3, MPI_COMM_WORLD, &stop);
      for (int done = 0; !done; MPI_Test(&stop, &done, MPI_STATUS_IGNORE))
        gemm_seconds(shape.rows / 4, shape.width, 1);
    }
    MPI_Bcast(&busy_latency, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }

  // Links: pairs (2k, 2k+1) at once; rank 0's pair speaks for all. One rank: no link to time, and
  // a plan of one rank sends nothing.
  double link[2] = {1, 1e-6};  // (bandwidth GB/s, latency s)
  if (ranks > 1) {
    const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
    constexpr std::size_t kLarge = 4 << 20;
    if (peer < ranks) {
      const double latency = half_round_trip(rank, peer, 8, 20 * shape.repeats);
      const double large = half_round_trip(rank, peer, kLarge, shape.repeats);
      link[0] = kLarge / std::max(1e-9, large - latency) * 1e-9;
      link[1] = latency;
    }
    MPI_Bcast(link, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  }
  set_thread_budget(ranks_on_host, std::nullopt);

  ClusterSpec c;
  c.name = name.empty() ? "cpu-" + std::to_string(cores) + "core-" + std::to_string(ranks) + "ranks"
                        : name;
  c.backend = ClusterBackend::cpu;
  c.nodes = 1;
  c.devices_per_node = ranks;
  c.cores_per_node = cores;
  c.device.name = "CPU rank (one core of " + std::to_string(cores) + ")";
  const double ram_gib =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / (1024.0 * 1048576);
  c.device.memory_gib = ram_gib / ranks;
  c.device.peak_tflops = {rates.matmul_tflops, rates.matmul_tflops, rates.matmul_tflops};
  c.device.memory_bandwidth_gbs = rates.elementwise_gbs;
  c.device.matmul_tflops = c.device.peak_tflops;
  c.device.attention_tflops = {rates.attention_tflops, rates.attention_tflops,
                               rates.attention_tflops};
  c.device.elementwise_gbs = rates.elementwise_gbs;
  c.device.op_overhead_us = 0;
  c.device.weight_operand_gbs = rates.weight_operand_gbs;
  c.waiting_share = waiting_share;
  c.busy_latency_us = busy_latency * 1e6;
  c.intra_node = LinkSpec{link[0], link[1] * 1e6};
  c.inter_node = c.intra_node;
  return c;
}

}  // namespace strata
