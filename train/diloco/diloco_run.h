// How the trainer sets DiLoCo up and reports it (train/diloco/diloco.h is the algorithm): a rank's
// DilocoPlacement (its groups are slices of the worker axis of ProcessGroups), the checkpoint
// names of every worker, and the `outer_step` metrics lines.
#pragma once

#include <string>
#include <vector>

#include "parallel/mesh/process_groups.h"
#include "train/backend/training_backend.h"
#include "train/diloco/diloco.h"
#include "train/metrics/metrics.h"

namespace strata {

// This rank's DiLoCo placement: its groups, its replica share, whether the worker's dp ranks
// replicate the weights, and the tensors its outer gradient norm counts once.
DilocoPlacement diloco_placement(const ProcessGroups& groups, const BackendPlacement& placement,
                                 const ParameterLayout& layout, ElementRange share);
// The placement of DiLoCo on a logical replica (train/diloco/logical_replica.h): one worker of a
// group it meets through elastic_worker.h, the whole logical model of `elements` on rank 0
// (`leads`) and nothing on the other ranks, which never run it.
DilocoPlacement logical_diloco_placement(const ProcessGroups& groups, bool leads,
                                         std::size_t elements);

// The checkpoint datasets of every worker: `datasets` (one worker's state buffers) under each
// worker's prefix (diloco_state_prefix).
std::vector<StateDatasets> every_workers_datasets(const std::vector<StateDatasets>& datasets,
                                                  int workers);

// One `outer_step` metrics line per sync after a step (`metrics`: rank 0's writer, null on the
// others): the outer gradient norm, every worker's `loss` of the step, the bytes the job sent in
// the syncs (`outer_stats`: this rank's), the slowest rank's seconds and what it hid behind
// compute. Collective over the job; its sums run on uncounted communicators (outer_metrics and
// raw MPI).
void report_outer_syncs(const std::vector<OuterSyncReport>& syncs, double loss,
                        const CommStats& outer_stats, const ProcessGroups& groups,
                        MetricsWriter* metrics);

}  // namespace strata
