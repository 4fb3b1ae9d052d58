// The pieces of the `bench` tool (tools/bench.cpp: entry point, helpers and `bench sgemm`;
// tools/bench_train.cpp: `bench train`; tools/bench_attention.cpp and bench_attention_cpu.cpp:
// `bench attention`; tools/bench_checkpoint.cpp: `bench checkpoint`). Every benchmark prints one
// JSON line on stdout (built with train/metrics/metrics.h's JsonLine, each figure with the
// precision it means); timings are measured here and reported, never asserted by tests.
#pragma once

#include <chrono>
#include <vector>

#include "model/core/command_line.h"
#include "model/kernels/cpu/precision.h"
#include "train/metrics/metrics.h"

namespace strata::bench {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start);
// Median of per-repeat times: robust to the odd scheduler hiccup on a shared machine.
double median(std::vector<double> values);
// The integer value of `flag` (or its default), which must be > 0.
int positive(const ToolArgs& args, const char* flag);

// The BLAS library's name, version, threading and kernels as keys blas, blas_version,
// blas_threading, blas_kernels.
void add_blas_library(JsonLine& json);
// The float GEMM rate (model/kernels/cpu/blas.h's library), GFLOP/s: C (m, n) = A (m, k) · B (k, n)
// on random data, median of `repeats` products after one warm-up, with this process's threads.
double sgemm_gflops(int m, int n, int k, int repeats);

// Each benchmark's flags, defaults and help (ToolArgs parses with them; --help prints them).
CommandSpec train_command();
CommandSpec attention_command();
CommandSpec calibrate_command();
CommandSpec checkpoint_command();
CommandSpec sgemm_command();

// `bench train ...`: argv[first..] are its flags.
void bench_train(int argc, char** argv, int first);
// `bench attention ...` (tools/bench_attention.cpp; --device cuda is an error in builds without
// CUDA).
void bench_attention(const ToolArgs& args);
// tools/bench_attention_cpu.cpp: `bench attention --device cpu`; `probs` rounds the backward's
// recomputed probabilities.
void bench_attention_cpu(int B, int T_, int NH, int hs, cpu::ComputeDtype probs, int repeats);
// tools/bench_calibrate.cpp: `bench calibrate` (initialises MPI itself).
void bench_calibrate(int argc, char** argv, const ToolArgs& args);
// tools/bench_checkpoint.cpp: `bench checkpoint`.
void bench_checkpoint(const ToolArgs& args);

}  // namespace strata::bench
