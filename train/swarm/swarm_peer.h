// A swarm peer (docs/ARCHITECTURE.md §2 "SWARM"): what `train` runs when swarm.join is set. The
// one process of this job joins the swarm in the rendezvous store (parallel/swarm/
// stage_registry.h), takes a stage (swarm.stage, or auto: the least served), binds its request
// server (parallel/swarm/swarm_transport.h) and then either drives micro-batches (the first stage:
// train/swarm/swarm_driver.h) or serves its stage's requests, stepping its stage each time it
// holds swarm.target_batch samples' gradients (train/swarm/swarm_stage.h). A peer has its own run
// directory (config.yaml, metrics.jsonl; the run-directory lock applies). It leaves when its
// stage has made train.steps steps and the first stage's drivers are done (or gone).
#pragma once

#include "parallel/comm/mpi_communicator.h"
#include "plan/config.h"

namespace strata {

struct SwarmPeerOptions {
  bool overwrite = false;  // train --overwrite
};

// Runs the peer to its end; errors are strata::Error (one `error:` line).
void run_swarm_peer(const Config& config, MpiCommunicator& world, const SwarmPeerOptions& options);

}  // namespace strata
