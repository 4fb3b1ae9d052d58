// Elastic DiLoCo on one worker job (docs/ARCHITECTURE.md §2 "Elastic DiLoCo"): this job, with
// its own layout, is one worker of a group of independent jobs that meet in a rendezvous store
// (diloco.join). Its rank 0 holds the group membership (parallel/elastic/elastic_group.h: slot,
// heartbeat, each sync's decided members) and tells the job's other ranks; every rank then
// averages its replica share with the same rank of every other member over Gloo
// (parallel/elastic/gloo_communicator.h), a new Gloo group whenever the members change. Workers of
// different layouts (diloco.layouts any) average the logical model from their rank 0 alone
// (train/diloco/logical_replica.h).
//
// What a worker job reads and does is what the in-job mode's worker of the same index does: slot
// w reads the samples worker w reads (every diloco.workers-th from w), so a full group that never
// changes trains the in-job run. A worker that starts when the group has synced before, or that a
// sync left out, joins: it meets the group at its next sync as a joining member, takes the
// anchor and outer momentum from a contributor over Gloo, and goes on from the group's step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "parallel/comm/mpi_communicator.h"
#include "parallel/elastic/elastic_group.h"
#include "parallel/elastic/gloo_communicator.h"
#include "plan/config.h"

namespace strata {

class ElasticWorker {
 public:
  // Collective over the job: rank 0 opens the group (an unreachable store, settings that differ
  // from the group's, a full group: a CollectiveError on every rank, naming the problem).
  // `mesh`: the resolved layout, which every worker of a group shares.
  ElasticWorker(const Config& config, const MeshShape& mesh, MpiCommunicator& job);
  ~ElasticWorker();
  ElasticWorker(const ElasticWorker&) = delete;
  ElasticWorker& operator=(const ElasticWorker&) = delete;

  int slot() const { return slot_; }
  const std::string& group_name() const { return group_name_; }  // diloco.group
  // The newest decided sync of the group (nullopt: a fresh group); collective.
  std::optional<std::int64_t> newest_sync();
  // A fresh group: waits until diloco.min_workers slots are held; collective.
  void wait_for_workers();
  // Attempt `attempt` of the sync after inner step `step` (`previous`: the sync before it in the
  // schedule, or -1): the decided members, with this rank's Gloo groups for them (outer() and
  // metrics()) when this worker is a member and connected() says they could be made (a member
  // that died before connecting makes them fail). Collective over the job.
  SyncMembers sync(std::int64_t step, std::int64_t previous, bool joining, int attempt);
  // With diloco.layouts any only rank 0 meets the other members (train/diloco/logical_replica.h):
  // the other ranks make no Gloo groups and are connected when rank 0 is.
  bool connected() const { return leader_only_ ? leader_connected_ : outer_ != nullptr; }
  // After the averaging of sync `m` (`averaged`: it completed on this rank): the group's verdict
  // (ElasticGroup::settle), from this job's outcome (every rank's) and every other member's.
  // On a retry the Gloo groups are closed, so that members still waiting on this one stop.
  // Collective over the job.
  ElasticGroup::Outcome settle(const SyncMembers& m, bool averaged);
  // Every rank of the job says `ok` (raw MPI, uncounted); true when all do.
  bool all_ranks(bool ok);
  Communicator& outer() { return *outer_; }
  Communicator& metrics() { return *metrics_; }
  // Every Gloo group's counted traffic so far, the retired ones included.
  CommStats outer_stats() const;
  // The group's secret (diloco.secret_file), or null: an unauthenticated group.
  const SharedSecret* secret() const { return secret_.get(); }
  // The deathrattle (rank 0): why this worker leaves.
  void leave(const std::string& why);

 private:
  // This rank's Gloo groups for `members` (none when a member cannot be reached).
  void connect(const SyncMembers& members, std::int64_t step);
  void close_groups();

  MpiCommunicator& job_;
  std::string url_, group_name_;
  double timeout_s_;
  std::string interface_;
  bool leader_only_ = false;                    // diloco.layouts any
  std::shared_ptr<const SharedSecret> secret_;  // diloco.secret_file's; null: none
  bool leader_connected_ = false;
  std::unique_ptr<ElasticGroup> leader_;    // rank 0 only
  std::unique_ptr<RendezvousStore> store_;  // the other ranks' connection (Gloo's rendezvous)
  int slot_ = -1;
  // The membership the Gloo groups belong to: (group_step, group_attempt) of its decision.
  std::optional<std::pair<std::int64_t, int>> membership_;
  std::unique_ptr<GlooCommunicator> outer_, metrics_;
  CommStats retired_;
};

// The settings every worker of a group shares, as the config YAML of just those keys: the model,
// the DiLoCo algorithm, the optimizer and its schedule (train.steps), the batch and, unless
// diloco.layouts is any, the resolved layout (each rank meets the same rank of the other workers).
std::string elastic_shared_settings(const Config& config, const MeshShape& mesh);

}  // namespace strata
