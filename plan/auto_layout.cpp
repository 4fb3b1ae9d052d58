#include "plan/auto_layout.h"

#include <mpi.h>

#include <cstdio>
#include <sstream>

#include "model/core/error.h"
#include "plan/calibrate.h"
#include "plan/search.h"

namespace strata {

namespace {

// Rank 0's text to every rank (MPI_COMM_WORLD).
std::string broadcast_from_rank_0(std::string text) {
  std::uint64_t size = text.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  text.resize(size);
  if (size > 0) MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, MPI_COMM_WORLD);
  return text;
}

ClusterSpec cluster_for(const Config& config, int ranks_on_host) {
  if (!config.parallel.cluster.empty()) return load_cluster(config.parallel.cluster);
  if (config.device == Device::cuda)
    fail(
        "parallel.auto on device cuda needs parallel.cluster, a description of the GPUs "
        "(configs/clusters/ has some; the quick measurement times CPU kernels)");
  CalibrationShape shape;
  shape.width = config.model.d_model;
  shape.heads = config.model.n_head;
  shape.seq_len = config.model.seq_len;
  shape.rows = 4 * config.model.seq_len;
  shape.repeats = 5;
  return calibrate_this_machine(shape, ranks_on_host, "this machine");
}

}  // namespace

AutoLayout choose_run_layout(const Config& config, int world_size, int ranks_on_host) {
  if (!config.parallel.auto_layout) return AutoLayout{config, ""};
  const int world = config.diloco.enabled ? world_size / config.diloco.workers : world_size;
  // Every rank takes part in a measurement; a file is read by each.
  std::string error;
  ClusterSpec cluster;
  try {
    cluster = cluster_for(config, ranks_on_host);  // devices: the world's ranks
  } catch (const Error& e) {
    error = e.what();
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string
      answer;  // rank 0: "ok\n" + overrides (one per line) + "\n\n" + report, or "error\n" + text
  if (rank == 0) {
    try {
      if (!error.empty()) fail(error);
      // Several chunks per rank (interleaved, zbv) run on the CPU backend only so far.
      SearchOptions options;
      options.virtual_stages = cluster.backend == ClusterBackend::cpu;
      const std::vector<PlanCost> plans = search_layouts(config, cluster, world, options);
      const PlanCost best = best_of(plans, cluster, world);
      std::ostringstream out;
      out << "ok\n";
      for (const std::string& set : best.layout.overrides()) out << set << "\n";
      char line[512];
      std::snprintf(line, sizeof(line),
                    "\nparallel.auto: %s for %d ranks on cluster '%s' (%s): predicted %.1f ms per "
                    "step, %.0f tokens/s, %.1f of %.0f MiB per rank; %zu layouts priced",
                    best.layout.name().c_str(), world, cluster.name.c_str(),
                    config.parallel.cluster.empty() ? "measured at start-up"
                                                    : config.parallel.cluster.c_str(),
                    best.time.seconds * 1e3, best.time.tokens_per_s,
                    static_cast<double>(best.memory_bytes) / 1048576.0,
                    static_cast<double>(best.limit_bytes) / 1048576.0, plans.size());
      out << line;
      for (const PlanCost& p : plans)
        if (p.fits() && p.layout.name() != best.layout.name()) {
          std::snprintf(line, sizeof(line), "\nparallel.auto: runner-up %s, predicted %.1f ms",
                        p.layout.name().c_str(), p.time.seconds * 1e3);
          out << line;
          break;
        }
      answer = out.str();
    } catch (const Error& e) {
      answer = std::string("error\n") + e.what();
    }
  }
  answer = broadcast_from_rank_0(answer);
  if (answer.starts_with("error\n")) throw CollectiveError(answer.substr(6));
  std::istringstream in(answer.substr(3));
  std::vector<std::string> overrides;
  for (std::string line; std::getline(in, line) && !line.empty();) overrides.push_back(line);
  std::string report;
  for (std::string line; std::getline(in, line);) report += (report.empty() ? "" : "\n") + line;
  return AutoLayout{parse_config(config_to_yaml(config), "parallel.auto", overrides), report};
}

}  // namespace strata
