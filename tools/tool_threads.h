// The threads of the tools that run a model in one process (eval, generate), which often share a
// host with other work.
//
// How many: `--threads N` when given, else OMP_NUM_THREADS when it is a positive integer, else
// what one forward pass's work warrants: a thread per kFlopsPerThread of it, at least 1, at most
// the cores this process may run on. A pass is split into a dozen OpenMP regions per layer, each
// costing a fork and a join; `generate`'s pass is one token, 2·N FLOPs for N parameters, which for
// the demo model (2.6 M parameters, 5 MFLOP) is too little to split: on a loaded 2-core host it
// ran at 8.5 tokens/s on the default two threads and about 2,000 on one. GPT-2 124M's 250 MFLOP a
// token, or eval's micro_batch·seq_len tokens a pass, split well.
//
// How they wait: libgomp's idle threads spin (GOMP_SPINCOUNT, 300,000 iterations by default)
// before they sleep, taking cores that other processes of a loaded host need. libgomp reads
// OMP_WAIT_POLICY and GOMP_SPINCOUNT once, when it is loaded, before main runs, so setting them
// in main is too late: passive_openmp_wait sets OMP_WAIT_POLICY=PASSIVE and re-executes the tool
// (/proc/self/exe, the same arguments) so that the runtime starts with it. A value the user set
// for either variable is kept. OMP_DISPLAY_ENV=verbose shows it took: GOMP_SPINCOUNT '0' (plain
// OMP_DISPLAY_ENV=true prints PASSIVE even for the spinning default).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "model/core/command_line.h"
#include "model/kernels/cpu/thread_budget.h"

namespace strata {

// Call first in main: returns only in a process whose OpenMP runtime waits passively (or as the
// user asked), or where re-executing failed (the tool then runs with the default policy).
inline void passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
}

// A forward pass's FLOPs per thread below which another thread costs more in forks and joins than
// it saves (an estimate: about 5 ms of one core's GEMM work, against some 10 regions a layer at
// tens of microseconds each).
constexpr double kFlopsPerThread = 50e6;

// Sets OpenMP's (and the GEMM library's) thread count for passes of `flops_per_pass` FLOPs by the
// rule above and returns it.
inline int set_tool_threads(const ToolArgs& args, double flops_per_pass) {
  if (args.has("--threads")) {
    const long long threads = args.integer("--threads");
    if (threads < 1) fail("--threads must be at least 1, got ", threads);
    return set_thread_budget(1, static_cast<int>(std::min(threads, 4096LL))).threads;
  }
  const ThreadBudget budget = set_thread_budget(1, std::nullopt);
  if (budget.reason == "OMP_NUM_THREADS") return budget.threads;
  const double warranted = std::max(1.0, std::floor(flops_per_pass / kFlopsPerThread));
  return set_thread_budget(1, static_cast<int>(std::min<double>(warranted, available_cores())))
      .threads;
}

}  // namespace strata
