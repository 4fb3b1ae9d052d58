// How the trainer sets DiLoCo up and reports it (train/diloco.h is the algorithm): the worker
// communicators of a rank, its DilocoPlacement, the checkpoint names of every worker, and the
// `outer_step` metrics lines.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/mpi_communicator.h"
#include "parallel/mesh/process_groups.h"
#include "plan/config.h"
#include "train/diloco.h"
#include "train/metrics.h"
#include "train/training_backend.h"

namespace strata {

// DiLoCo's communicators: this rank's worker (a contiguous block of world/k ranks, the world of
// its mesh), its counterparts in every worker (the outer group, ranked by worker), and duplicates
// of both for metric sums, whose traffic no figure reports. Without DiLoCo: none (the world
// alone trains one model).
struct WorkerGroups {
  int worker = 0, workers = 1;
  std::unique_ptr<MpiCommunicator> worker_comm, worker_metrics, outer, outer_metrics;
};

// Collective over `world`; sets its inter-worker link class (the subgroups inherit it).
WorkerGroups make_worker_groups(const Config& config, MpiCommunicator& world);

// This rank's DiLoCo placement: its groups, its replica share, whether the worker's dp ranks
// replicate the weights, and the tensors its outer gradient norm counts once.
DilocoPlacement diloco_placement(const WorkerGroups& workers, const ProcessGroups& groups,
                                 const BackendPlacement& placement, const ParameterLayout& layout,
                                 ElementRange share);

// The checkpoint datasets of every worker: `names` (one worker's state buffers) under each
// worker's prefix (diloco_state_prefix).
std::vector<std::string> every_workers_names(const std::vector<std::string>& names, int workers);

// One `outer_step` metrics line per sync after a step (`metrics`: rank 0's writer, null on the
// others): the outer gradient norm, every worker's `loss` of the step, the bytes the job sent in
// the syncs (`outer_stats`: this rank's), the slowest rank's seconds and what it hid behind
// compute. Collective over `world`; its sums run on uncounted communicators.
void report_outer_syncs(const std::vector<OuterSyncReport>& syncs, double loss,
                        const CommStats& outer_stats, const WorkerGroups& workers,
                        MpiCommunicator& world, MetricsWriter* metrics);

}  // namespace strata
