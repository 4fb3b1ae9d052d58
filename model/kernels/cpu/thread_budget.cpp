// The thread budget of a rank: the pure decision, then the system queries and calls that apply it.
#include "model/kernels/cpu/thread_budget.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <thread>

#include "model/kernels/cpu/blas.h"

namespace strata {
namespace {

// "1 core" / "4 cores".
std::string count_of(int count, const char* noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

// The outermost level's count from an OMP_NUM_THREADS value ("4", " 4 ", "4,2"); std::nullopt
// when that is not a positive integer.
std::optional<int> outermost_thread_count(std::string_view text) {
  text = text.substr(0, text.find(','));
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return std::nullopt;
  text = text.substr(first, text.find_last_not_of(" \t") + 1 - first);
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 1) return std::nullopt;
  return value;
}

}  // namespace

ThreadBudget choose_thread_budget(int available_cores, int ranks_on_host,
                                  std::optional<std::string_view> omp_num_threads,
                                  std::optional<int> config_threads) {
  if (config_threads) return {std::max(*config_threads, 1), "config threads"};
  std::string ignored;
  if (omp_num_threads) {
    if (const auto threads = outermost_thread_count(*omp_num_threads))
      return {*threads, "OMP_NUM_THREADS"};
    ignored =
        "; OMP_NUM_THREADS='" + std::string(*omp_num_threads) + "' ignored: not a positive integer";
  }
  const int cores = std::max(available_cores, 1);
  const int ranks = std::max(ranks_on_host, 1);
  return {std::max(cores / ranks, 1), count_of(cores, "core") + " available / " +
                                          count_of(ranks, "rank") + " on this host" + ignored};
}

int available_cores() {
  // cpu_set_t holds 1024 CPUs; sched_getaffinity fails with EINVAL when the kernel's mask is
  // larger, so grow the set until it fits.
  for (int cpus = CPU_SETSIZE; cpus <= (1 << 20); cpus *= 2) {
    const std::unique_ptr<cpu_set_t, void (*)(cpu_set_t*)> set(CPU_ALLOC(cpus),
                                                               [](cpu_set_t* s) { CPU_FREE(s); });
    if (!set) break;
    const std::size_t bytes = CPU_ALLOC_SIZE(cpus);
    if (sched_getaffinity(0, bytes, set.get()) == 0)
      return std::max(CPU_COUNT_S(bytes, set.get()), 1);
    if (errno != EINVAL) break;
  }
  return static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u));
}

ThreadBudget set_thread_budget(int ranks_on_host, std::optional<int> config_threads) {
  const char* omp_num_threads = std::getenv("OMP_NUM_THREADS");
  const ThreadBudget budget = choose_thread_budget(
      available_cores(), ranks_on_host,
      omp_num_threads ? std::optional<std::string_view>(omp_num_threads) : std::nullopt,
      config_threads);
  omp_set_num_threads(budget.threads);
  // The GEMMs' library shares OpenMP's pool; OpenBLAS and BLIS are told the count as well.
  cpu::blas_set_threads(budget.threads);
  return budget;
}

std::string describe(const ThreadBudget& budget) {
  return "threads: " + std::to_string(budget.threads) + " per rank (" + budget.reason + ")";
}

}  // namespace strata
