// DiLoCo's outer loop (Douillard et al., arXiv 2311.08105, Algorithm 1; streaming fragments as in
// arXiv 2501.18512) around one worker's inner training. The world is cut into diloco.workers
// workers, contiguous blocks of ranks, each training alone with its own layout, data stream and
// AdamW state (train/trainer.cpp); every inner_steps optimizer steps the workers meet:
//   θ̄  = the average of the workers' parameters θ_i (parallel/diloco/worker_averaging.h:
//   all_reduce,
//        butterfly, gossip or moshpit), or, with compression, anchor − the average of the
//        compressed outer gradients Δ_i = anchor − θ_i (parallel/diloco/outer_compression.h, error
//        feedback optional);
//   then the outer optimizer (train/diloco/outer_optimizer.h) moves the anchor with Δ = anchor − θ̄
//   and every worker continues from the new anchor. Uncompressed, the parameters themselves are
//   averaged so that one worker with outer lr 1 and momentum 0 is plain training bit for bit.
//
// Each rank does this for its replica share only (parallel/mesh/reduction_plan.h: replica_share):
// the anchor, the outer momentum and the error-feedback residual are held for that share, as ZeRO
// holds optimizer state, and the rank averages it with the same share of every other worker (the
// `outer` group: one rank per worker). Where the master weights are replicated over the worker's
// data-parallel ranks (ZeRO < 3), the updated shares are then all-gathered over dp. Under expert
// parallelism the shares tile each rank's layout over expert_dp (the ranks holding the same
// experts) and are gathered over it: the ep members of a worker each average their share's dense
// elements (the same values, so they stay equal), so the dense part of the outer traffic is ep
// times what a share over dp would send, the price of one contiguous share per rank. The tied wte
// is averaged in calls of its own, so both pipeline ends make identical calls and their copies
// stay bitwise equal.
//
// Streaming (diloco.fragments F): the model's tensors are cut into F fragments of about equal
// size (train/diloco/diloco_fragments.h); fragment f meets after inner steps s ≡ f·H/F (mod H), its
// first time at s = f·H/F (f > 0) or H (f = 0), so each sync moves about 1/F of the model.
//
// Overlap (diloco.overlap): a sync due after step s is prepared then (θ_s read), its reduction
// runs on a thread of its own while inner step s+1 computes (begin_inner_step starts it), and is
// applied after step s+1: θ ← new anchor + (θ_{s+1} − θ_s), the outer update one step late with
// the step's own progress kept. A run stopped after step s has not started that reduction: a
// resume prepares it again from the checkpoint's θ_s (resume), so stopping changes nothing;
// finish applies a sync still pending when training ends.
//
// Robust averaging (docs/ARCHITECTURE.md §2 "Robust averaging"): before each sync's averaging the
// members exchange the norms of their outer gradients (8 bytes each over the outer group, counted),
// and the screen (parallel/diloco/robust_aggregation.h, diloco.outlier_factor) leaves out a
// non-finite one or one far above the median: it sends nothing into the average and takes the
// others' (AveragingRound::excluded). diloco.aggregation trimmed_mean or centered_clip combines
// the kept members' vectors by that rule instead of the mean (gathered, worker_averaging.h),
// each piece of a rank's share on its own, as hivemind clips each part: trimmed_mean is
// per coordinate, so its result is layout independent; centered_clip's distances are a piece's.
//
// Simulated failures (diloco.drop_probability p): for each sync, dropped_workers(seed, round, …)
// decides who fails, the same on every rank; a dropped worker's values are left out of the
// others' averages and it keeps its own θ_i, restarting its period from there (its anchor := θ_i,
// its momentum kept).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/core/element_range.h"
#include "model/parameter_layout.h"
#include "parallel/comm/communicator.h"
#include "parallel/diloco/outer_compression.h"
#include "parallel/diloco/worker_averaging.h"
#include "plan/config.h"
#include "train/backend/master_weights.h"
#include "train/checkpoint/checkpoint.h"
#include "train/core/test_hooks.h"
#include "train/diloco/outer_optimizer.h"

namespace strata {

// Where this rank stands in the DiLoCo run.
struct DilocoPlacement {
  int worker = 0, workers = 1;
  Communicator* outer = nullptr;    // this rank's counterpart in every worker; group rank = worker
  Communicator* metrics = nullptr;  // the same ranks, for metric-only sums (never reported)
  Communicator* worker_group = nullptr;  // every rank of this worker (metric sums)
  Communicator* dp = nullptr;   // the worker's data-parallel group (under ep: its expert_dp part)
  ElementRange share;           // replica_share of this rank
  bool gather_over_dp = false;  // the master weights are replicated over dp (ZeRO stage < 3)
  // Tensors whose elements count once in the outer gradient norm (not a tp replica, not the last
  // stage's wte copy), as layout ranges.
  std::vector<ElementRange> counted;
};

// What one sync did (the `outer` metrics line).
struct OuterSyncReport {
  std::int64_t step = 0;  // the inner step after which it ran
  int fragment = 0;
  int fragments = 1;               // diloco.fragments
  std::size_t elements = 0;        // the fragment's parameters (logical, under any layout)
  std::size_t model_elements = 0;  // the model's
  std::int64_t round = 0;          // the fragment's sync count before this one
  double outer_gradient_norm = 0;  // ‖anchor − θ̄‖ over the model (this worker's)
  double seconds = 0;              // wall time of the averaging on this rank
  double hidden_seconds = 0;       // of which an inner step overlapped (diloco.overlap)
  std::vector<bool> dropped;       // per worker
  double consensus_distance = -1;  // gossip and drops: mean ‖θ_i − θ̄‖/‖θ̄‖ after it; else −1
  double outer_scale = -1;  // diloco.outer_schedule inner: the outer step's scale; else −1
  // Elastic DiLoCo (slots; empty in-job): the sync's members, those of them that joined at it, and
  // the members of the sync before that are gone.
  std::vector<int> member_slots, joining_slots, lost_slots;
  // Elastic: the sync's whole wall time on this rank, waiting for the members and connecting
  // included (`seconds` is the averaging's alone).
  double wall_seconds = 0;
  // Elastic: of wall_seconds, the time spent deciding the members: waiting for every live member
  // to arrive, or for a silent one's timeout (not the step's, so not in its step_ms).
  double wait_seconds = 0;
  int attempts = 1;  // elastic: how many times it was decided (a member lost while averaging)
  // The members the screen left out of the average (parallel/diloco/robust_aggregation.h): worker
  // indices in-job, slots in an elastic group; and why.
  struct LeftOut {
    int member = 0;
    std::string why;
  };
  std::vector<LeftOut> left_out;
};

class Diloco {
 public:
  // `inner` and `total_steps`: the inner optimizer's schedule (diloco.outer_schedule: inner).
  // `hooks`: the run's test hooks (train/core/test_hooks.h: kill_in_averaging).
  Diloco(const DilocoConfig& config, std::uint64_t seed, const ParameterLayout& layout,
         const GptShape& shape, const DilocoPlacement& placement, const OptimizerConfig& inner,
         int total_steps, const TestHooks& hooks);

  const DilocoPlacement& placement() const { return placement_; }
  bool overlaps() const { return config_.overlap; }
  // The fragments that meet after inner step `step` (1-based count of optimizer steps).
  std::vector<int> fragments_due(std::int64_t step) const;
  // A fresh run: every anchor := the backend's parameters.
  void start(MasterWeights& weights);
  ~Diloco();
  Diloco(const Diloco&) = delete;
  Diloco& operator=(const Diloco&) = delete;

  // Runs the syncs due after inner step `step` (with overlap: applies the one in flight, prepares
  // the next); one report per fragment synchronised.
  std::vector<OuterSyncReport> after_inner_step(MasterWeights& weights, std::int64_t step);
  // Overlap: starts the prepared reduction; call as inner step s+1 begins.
  void begin_inner_step();
  // Overlap, after a resume at `step`: prepares the sync due then, as the stopped run had.
  void resume(MasterWeights& weights, std::int64_t step);
  // Overlap: applies a sync still pending at the end of training (none: no report).
  std::vector<OuterSyncReport> finish(MasterWeights& weights);

  // The outer state as checkpoint buffers named `prefix` + "outer/anchor", "outer/momentum" (and
  // "outer/residual" with error feedback) over the share.
  std::vector<StateBuffer> state(const std::string& prefix) const;
  void set_state(const std::vector<StateBuffer>& buffers, const std::string& prefix);

  // The fragment's sync count before step `step` (its round number at a sync after `step`).
  std::int64_t round_of(int fragment, std::int64_t step) const;
  // The step of the sync before the one after `step` (-1: none), and of the next after `step`.
  std::int64_t previous_sync_step(std::int64_t step) const;
  std::int64_t next_sync_step(std::int64_t step) const;

  // Elastic DiLoCo (train/diloco/elastic_worker.h): the members of the next sync replace the
  // placement's outer and metrics groups, worker index and count. A joining member contributes
  // nothing (it is left out of the averages as a dropped worker is) and takes the state after.
  struct SyncGroup {
    Communicator* outer = nullptr;
    Communicator* metrics = nullptr;
    int worker = 0, workers = 1;
    std::vector<bool> joining;  // per member
  };
  void set_sync_group(const SyncGroup& group);
  // After a sync with joiners, on every member: member `donor` (a contributor, or a joiner when
  // every member joins, as after a store outage) sends its outer state over the share (anchor and
  // momentum, as sent: bitwise) to each joiner, which takes it and continues from the anchor (θ :=
  // anchor on every fragment; its error-feedback residual starts at zero). Bytes: 2 · 4 · share
  // elements per joiner, counted as "send".
  void hand_state_to_joiners(MasterWeights& weights, int donor);
  // Elastic: the syncs due after `step` averaged and held, not applied (never with overlap), so
  // that a member lost during the averaging costs nothing: apply_averaged applies them,
  // discard_averaged drops them and restores the error-feedback residual the averaging moved.
  void average_due(MasterWeights& weights, std::int64_t step);
  std::vector<OuterSyncReport> apply_averaged(MasterWeights& weights);
  void discard_averaged();
  // Elastic with overlap: the sync due after step s is prepared (prepare_due) once its members
  // are decided, and averaged on its thread while step s+1 computes (begin_inner_step). After
  // step s+1 it is waited for (wait_pending: a member lost rethrows the thread's PeerLost),
  // averaged again synchronously from θ_s for the members of a retry (average_pending_again: the
  // residual restored, the members' dropped flags anew), then applied (apply_pending, with step
  // s+1's progress kept) or dropped (drop_pending: a worker that rejoins instead).
  bool has_pending() const { return pending_ != nullptr; }
  void prepare_due(MasterWeights& weights, std::int64_t step);
  void wait_pending();
  void average_pending_again();
  std::vector<OuterSyncReport> apply_pending(MasterWeights& weights);
  void drop_pending();

 private:
  struct Sync;
  std::unique_ptr<Sync> prepare(MasterWeights& weights, int fragment, std::int64_t step);
  // The outer step's scale after inner step `step` (outer_optimizer.h): 1, or with
  // diloco.outer_schedule inner the inner learning rate of that step over its peak.
  double outer_scale(std::int64_t step) const;
  // The sync's dropped members and the vectors it averages, for the current members, and the norm
  // of this worker's outer gradient (collective over the worker's ranks).
  void set_members(Sync& sync) const;
  // The test hook poison_outer: this worker's outer gradient in `values` made faulty.
  void poison(Sync& sync) const;
  // The screen: every member's outer gradient norm gathered, those it leaves out excluded from the
  // sync's averages and named in its report (collective over the outer group).
  void screen(Sync& sync) const;
  void average(Sync& sync);
  OuterSyncReport apply(MasterWeights& weights, Sync& sync);
  void join(Sync& sync);
  void distribute(MasterWeights& weights, int fragment, const std::vector<float>& updated);
  double outer_gradient_norm(const std::vector<ElementRange>& pieces,
                             const std::vector<std::vector<float>>& deltas) const;
  double consensus_distance(const std::vector<ElementRange>& pieces,
                            const std::vector<std::vector<float>>& values) const;

  DilocoConfig config_;
  OptimizerConfig inner_;
  int total_steps_;
  std::uint64_t seed_;
  DilocoPlacement placement_;
  Averaging averaging_;
  OuterCompression compression_;
  OuterOptimizer optimizer_;
  std::int64_t test_kill_in_averaging_;  // TestHooks::kill_in_averaging (−1: never)
  TestHooks::Poison test_poison_;        // TestHooks::poison_outer
  int test_poison_worker_;
  std::vector<float> residual_;  // error feedback over the share (empty without it)
  // Per fragment: its range of this rank's layout, and the pieces of the share this rank
  // averages (split at the end of wte).
  std::vector<ElementRange> fragment_ranges_;
  std::vector<std::vector<ElementRange>> pieces_;
  std::vector<std::size_t> fragment_sizes_;      // logical elements per fragment
  std::unique_ptr<Sync> pending_;                // overlap: the sync in flight or about to start
  std::vector<bool> joining_;                    // elastic: per member of the next sync
  std::vector<std::unique_ptr<Sync>> averaged_;  // average_due's syncs, not yet applied
  std::vector<float> residual_before_;           // the residual before them (or before pending_)
};

// The DiLoCo state names of worker w in a checkpoint: "" for worker 0 (so /model, /optimizer
// and /outer are the first worker's, what tools read), "diloco/worker_<w>/" for the others.
std::string diloco_state_prefix(int worker);

}  // namespace strata
