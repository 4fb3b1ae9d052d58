// parallel.auto: the planner chooses a run's layout (the parallel keys of docs/ARCHITECTURE.md §3)
// at start-up.
//
// The cluster is parallel.cluster's file or, when that is empty, this machine measured on the
// spot (plan/calibrate.h, at the model's width and sequence length, about a second; its nodes
// are the config's parallel.gpus_per_node blocks, as the trainer simulates them). A cuda run
// needs a file: the quick measurement times the CPU kernels. Rank 0 searches (plan/search.h) for
// the world (under DiLoCo, one worker's ranks) and every rank applies the same choice, or fails
// with the same error when nothing fits. The report says what was chosen, the prediction, and
// the runner-up.
//
// Resuming re-plans: with a measured cluster the choice may differ from the first run's (the
// checkpoint reshards, so the run goes on, but not bitwise); name a cluster file to pin it.
#pragma once

#include <string>

#include "plan/config.h"

namespace strata {

struct AutoLayout {
  Config config;       // the config with the chosen layout's keys
  std::string report;  // lines for the run's start-up output
};

// Collective over MPI_COMM_WORLD (`world_size` ranks, `ranks_on_host` of them on this machine).
// Returns `config` unchanged (and an empty report) when parallel.auto is off.
AutoLayout choose_run_layout(const Config& config, int world_size, int ranks_on_host);

}  // namespace strata
