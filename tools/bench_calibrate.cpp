// `bench calibrate`: measures this machine as the planner describes a cluster (plan/cluster.h)
// and writes the description:
//
//   mpirun -np N bench calibrate [--out FILE] [--name NAME] [--rows 2048 --width 256
//                                 --seq-len 256 --heads 4 --repeats 20]
//
// N ranks describe N devices on one node (the ranks a planned job will run here); the file is
// backend: cpu, with cores_per_node = the cores this process may use.
//   compute, per core: rank 0 alone (the others sleep), one thread, times the CPU kernels Gpt
//     runs on a layer's shapes (rows = micro-batch · sequence, width C): the GEMMs (C → 3C, C → C,
//     C → 4C, 4C → C), causal attention (4·B·T²·C FLOPs as the model counts them), and
//     LayerNorm and GELU (elementwise bytes: each element read and written once). The CPU
//     backend computes bf16/fp16 in fp32 storage, so every precision gets the fp32 rates, and
//     the peak is the GEMM rate (a CPU has no datasheet peak for these kernels).
//   links: every rank at once, paired (0-1, 2-3, ...; an odd last rank idles), ping-pongs 8-byte
//   and 4 MiB messages; latency = half the small round
//     trip, bandwidth = 4 MiB over (half the large round trip − latency). All ranks run, as in a
//     job, so the figure includes their sharing the cores. The nodes a config simulates
//     (parallel.gpus_per_node) are on this one machine: inter_node gets the same figures.
//   memory: this machine's RAM shared by the N ranks.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "model/kernels/cpu/attention.h"
#include "model/kernels/cpu/gelu.h"
#include "model/kernels/cpu/layernorm.h"
#include "model/kernels/cpu/matmul.h"
#include "parallel/mpi_communicator.h"
#include "plan/cluster.h"
#include "tools/bench.h"
#include "train/metrics.h"
#include "train/thread_budget.h"

namespace strata::bench {

namespace {

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

// Median seconds of `repeats` calls of `run` after one warm-up call.
template <class Run>
double timed(int repeats, Run run) {
  run();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    run();
    times.push_back(seconds_since(start));
  }
  return median(times);
}

struct ComputeRates {
  double matmul_tflops = 0, attention_tflops = 0, elementwise_gbs = 0;
};

ComputeRates measure_compute(int rows, int width, int seq_len, int heads, int repeats) {
  const int N = rows, C = width;
  ComputeRates rates;
  double flops = 0, seconds = 0;
  for (const auto& [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}}) {
    const std::vector<float> x = random_floats(static_cast<std::size_t>(N) * in, 1);
    const std::vector<float> w = random_floats(static_cast<std::size_t>(in) * out, 2);
    const std::vector<float> b = random_floats(static_cast<std::size_t>(out), 3);
    std::vector<float> y(static_cast<std::size_t>(N) * out);
    seconds += timed(
        repeats, [&] { cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), N, in, out); });
    flops += 2.0 * N * in * out;
  }
  rates.matmul_tflops = flops / seconds * 1e-12;

  const int B = std::max(1, N / seq_len);
  const std::vector<float> qkv = random_floats(static_cast<std::size_t>(B) * seq_len * 3 * C, 4);
  std::vector<float> att(static_cast<std::size_t>(B) * seq_len * C);
  std::vector<float> probs(static_cast<std::size_t>(B) * heads * seq_len * seq_len);
  const double attention = timed(repeats, [&] {
    cpu::attention_forward(att.data(), probs.data(), qkv.data(), B, seq_len, C, heads);
  });
  rates.attention_tflops = 4.0 * B * seq_len * static_cast<double>(seq_len) * C / attention * 1e-12;

  const std::vector<float> x = random_floats(static_cast<std::size_t>(N) * C, 5);
  const std::vector<float> weight = random_floats(static_cast<std::size_t>(C), 6);
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(N)), rstd(mean.size());
  const double layernorm = timed(repeats, [&] {
    cpu::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                           weight.data(), N, C);
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

void bench_calibrate(int argc, char** argv, const ToolArgs& args) {
  MpiRuntime mpi(&argc, &argv);
  const int rank = mpi.world_rank(), ranks = mpi.world_size();
  if (ranks < 2)
    fail(
        "bench calibrate measures the links between ranks: run it under mpirun -np N (N >= 2, "
        "the ranks a job will run on this machine)");
  const int rows = positive(args, "--rows", 2048), width = positive(args, "--width", 256);
  const int seq_len = positive(args, "--seq-len", 256), heads = positive(args, "--heads", 4);
  const int repeats = positive(args, "--repeats", 20);
  if (width % heads != 0) fail("--width ", width, " must be a multiple of --heads ", heads);
  const int cores = available_cores();
  set_thread_budget(mpi.ranks_on_host(), 1);

  ComputeRates rates;
  if (rank == 0) rates = measure_compute(rows, width, seq_len, heads, repeats);
  sleeping_barrier();

  // Links: pairs (2k, 2k+1) at once; rank 0's pair reports.
  const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  double latency = 0, large = 0;
  constexpr std::size_t kLarge = 4 << 20;
  if (peer < ranks) {
    latency = half_round_trip(rank, peer, 8, 20 * repeats);
    large = half_round_trip(rank, peer, kLarge, repeats);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 0) return;

  ClusterSpec c;
  c.name = args.get("--name",
                    "cpu-" + std::to_string(cores) + "core-" + std::to_string(ranks) + "ranks");
  c.backend = "cpu";
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
  const double bandwidth = kLarge / std::max(1e-9, large - latency) * 1e-9;
  c.intra_node = LinkSpec{bandwidth, latency * 1e6};
  c.inter_node = c.intra_node;
  std::string text = "# Written by `mpirun -np " + std::to_string(ranks) +
                     " bench calibrate` (tools/bench_calibrate.cpp says what it measures).\n" +
                     cluster_to_yaml(c);
  const std::string out = args.get("--out");
  if (!out.empty()) {  // through a temporary file: an existing description stays whole
    const std::string temporary = out + ".tmp";
    {
      std::ofstream file(temporary);
      file << text;
      if (!file) fail("cannot write ", temporary);
    }
    if (std::rename(temporary.c_str(), out.c_str()) != 0) fail("cannot replace ", out);
  }
  std::printf("%s\n", JsonLine()
                          .add("bench", "calibrate")
                          .add("ranks", ranks)
                          .add("cores", cores)
                          .add("matmul_gflops", rates.matmul_tflops * 1e3, "%.2f")
                          .add("attention_gflops", rates.attention_tflops * 1e3, "%.2f")
                          .add("elementwise_gbs", rates.elementwise_gbs, "%.2f")
                          .add("latency_us", latency * 1e6, "%.2f")
                          .add("bandwidth_gbs", bandwidth, "%.3f")
                          .str()
                          .c_str());
  if (out.empty()) std::printf("%s", text.c_str());
}

}  // namespace strata::bench
