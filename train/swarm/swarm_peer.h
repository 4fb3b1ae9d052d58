// A swarm peer (docs/ARCHITECTURE.md §2 "SWARM"): what `train` runs when swarm.join is set. The
// one process of this job joins the swarm in the rendezvous store (parallel/swarm/
// stage_registry.h), takes a stage (swarm.stage, or auto: the least served), a slot in the
// stage's averaging group (train/swarm/stage_rounds.h; a stage that has averaged before is joined
// by taking its state), binds its request server (parallel/swarm/swarm_transport.h), and then
// either drives micro-batches (the first stage: train/swarm/swarm_driver.h) or serves its stage's
// requests (train/swarm/stage_server.h). A peer has its own run directory (config.yaml,
// metrics.jsonl, its stage's checkpoints: train/swarm/stage_checkpoints.h; the run-directory lock
// applies). It stops once the swarm's data has come through (train/swarm/swarm_progress.h).
#pragma once

#include <optional>
#include <string>

#include "parallel/comm/mpi_communicator.h"
#include "plan/config.h"
#include "train/core/test_hooks.h"

namespace strata {

struct SwarmPeerOptions {
  // train --resume: nullopt, a fresh peer; "", its newest intact checkpoint; else that checkpoint
  // (train/swarm/stage_checkpoints.h).
  std::optional<std::string> resume_from;
  bool overwrite = false;  // train --overwrite
  TestHooks test_hooks;    // STRATA_TEST_HOOKS: kill_in_request, kill_in_averaging
};

// Runs the peer to its end; errors are strata::Error (one `error:` line).
void run_swarm_peer(const Config& config, MpiCommunicator& world, const SwarmPeerOptions& options);

}  // namespace strata
