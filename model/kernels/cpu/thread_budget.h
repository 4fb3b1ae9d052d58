// How many threads (OpenMP loops and the GEMMs, which share them) each rank of a CPU run uses.
//
// Left alone, OpenMP and OpenBLAS start one thread per core in every rank, so `mpirun -np 4` on
// 2 cores runs 8 busy threads that preempt each other inside every collective: a tp-2 step of
// configs/fortunes.yaml took 1,796 ms instead of 40 ms with one thread per rank. The ranks of a
// host therefore share its cores. Precedence, first that applies:
//   1. the config's `threads: N` (N >= 1, checked at load);
//   2. OMP_NUM_THREADS from the environment, when it is a positive integer (or a list such as
//      "4,2", whose first entry is the outermost level's count, as OpenMP reads it); any other
//      value is ignored, as OpenMP itself ignores it, and the reason says so;
//   3. auto: the cores this process may run on (its CPU affinity mask: taskset, cpusets, mpirun's
//      binding) divided by the ranks of the job on this host, rounded down, at least 1.
// The decision (choose_thread_budget) is a pure function of those inputs; set_thread_budget
// gathers them from the system and applies the result.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace strata {

struct ThreadBudget {
  int threads = 1;     // per rank, >= 1
  std::string reason;  // where it came from, for the start-up line: "config threads", ...
};

// The decision. available_cores and ranks_on_host count from 1 (smaller values are taken as 1);
// omp_num_threads is the environment variable's text (std::nullopt when unset); config_threads is
// the config's `threads` (std::nullopt for auto).
ThreadBudget choose_thread_budget(int available_cores, int ranks_on_host,
                                  std::optional<std::string_view> omp_num_threads,
                                  std::optional<int> config_threads);

// The number of CPUs in this process's affinity mask (sched_getaffinity), at least 1.
int available_cores();

// Reads the affinity mask and OMP_NUM_THREADS, chooses, and sets OpenMP's (and the GEMM library's)
// thread counts for this process. ranks_on_host: MpiRuntime::ranks_on_host(), the real host, not
// the simulated parallel.gpus_per_node.
ThreadBudget set_thread_budget(int ranks_on_host, std::optional<int> config_threads);

// "threads: 1 per rank (2 cores available / 4 ranks on this host)": the start-up line.
std::string describe(const ThreadBudget& budget);

}  // namespace strata
