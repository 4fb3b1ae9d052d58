#include "train/diloco/diloco_run.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>

#include "model/core/error.h"
#include "parallel/mesh/reduction_plan.h"
#include "train/metrics/report_figures.h"

namespace strata {

DilocoPlacement diloco_placement(const ProcessGroups& groups, const BackendPlacement& placement,
                                 const ParameterLayout& layout, ElementRange share) {
  DilocoPlacement d;
  d.worker = groups.worker_index();
  d.workers = groups.workers();
  d.outer = &groups.outer();
  d.metrics = &groups.outer_metrics();
  d.worker_group = &groups.worker_metrics();
  // Under expert parallelism the shares tile a rank's layout over the ranks holding the same
  // tensors (replica_share), so the updated shares are gathered over those; under context
  // parallelism over the dp × cp replicas.
  d.dp = groups.expert_dp() != nullptr ? groups.expert_dp() : &groups.dp_cp();
  d.share = share;
  d.gather_over_dp = d.dp->size() > 1 && !placement.plan.parameters_by_segment;
  const ModelPartition& p = placement.partition;
  for (const TensorView& t : layout.tensors())
    if (!is_tied_copy(p, t) && !(replicated_over_tp(p, t) && p.tp_rank != 0) &&
        (p.ep_rank == 0 || is_expert_tensor(t)))
      d.counted.push_back({t.offset, t.offset + t.size});
  return d;
}

DilocoPlacement logical_diloco_placement(const ProcessGroups& groups, bool leads,
                                         std::size_t elements) {
  DilocoPlacement d;
  // The elastic worker's one-rank groups until each sync's members replace outer and metrics;
  // rank 0's norm sums are its own.
  d.outer = &groups.outer();
  d.metrics = &groups.outer_metrics();
  d.worker_group = &groups.outer();
  d.dp = &groups.outer();
  d.share = leads ? ElementRange{0, elements} : ElementRange{0, 0};
  d.counted = {d.share};
  return d;
}

std::vector<StateDatasets> every_workers_datasets(const std::vector<StateDatasets>& datasets,
                                                  int workers) {
  std::vector<StateDatasets> all;
  for (int w = 0; w < workers; ++w)
    for (const StateDatasets& d : datasets)
      all.push_back({diloco_state_prefix(w) + d.name, d.stored});
  return all;
}

void report_outer_syncs(const std::vector<OuterSyncReport>& syncs, double loss,
                        const CommStats& outer_stats, const ProcessGroups& groups,
                        MetricsWriter* metrics) {
  std::vector<double> losses(static_cast<std::size_t>(groups.workers()));
  groups.outer_metrics().all_gather(&loss, losses.data(), 1);
  MpiCommunicator& job = groups.job();
  const JobLinkBytes link_bytes = job_link_bytes_total(outer_stats, job);
  const JsonLine bytes = link_bytes.json();
  // The sync ends when its slowest rank is done; of it, what every rank hid behind compute.
  double seconds = 0, exposed = 0;
  for (const OuterSyncReport& r : syncs) {
    seconds += r.seconds;
    exposed += r.seconds - r.hidden_seconds;
  }
  double slowest[2] = {seconds, exposed};
  if (MPI_Allreduce(MPI_IN_PLACE, slowest, 2, MPI_DOUBLE, MPI_MAX, job.comm()) != MPI_SUCCESS)
    fail("MPI_Allreduce of the outer sync's seconds failed");
  if (metrics == nullptr) return;
  for (const OuterSyncReport& r : syncs) {
    std::vector<double> dropped;  // worker indices; elastic: the slots gone since the last sync
    const bool elastic = !r.member_slots.empty();
    if (elastic)
      dropped.assign(r.lost_slots.begin(), r.lost_slots.end());
    else
      for (std::size_t w = 0; w < r.dropped.size(); ++w)
        if (r.dropped[w]) dropped.push_back(static_cast<double>(w));
    JsonLine line;
    line.add("step", r.step)
        .add("outer_step", r.round + 1)
        .add("fragment", r.fragment)
        .add("fragments", r.fragments)
        .add("fragment_params", r.elements)
        .add("outer_grad_norm", r.outer_gradient_norm)
        .add("worker_loss", losses, "%.6f")
        .add("dropped_workers", dropped)
        .add("outer_sync_s", slowest[0], "%.6f")
        .add("outer_hidden_s", std::max(0.0, slowest[0] - slowest[1]), "%.6f")
        .add("outer_comm_bytes_job", bytes);
    if (!r.left_out.empty()) {
      std::vector<JsonLine> left_out;
      for (const OuterSyncReport::LeftOut& out : r.left_out)
        left_out.push_back(
            JsonLine().add(elastic ? "slot" : "worker", out.member).add("why", out.why));
      line.add("left_out", left_out);
    }
    if (r.consensus_distance >= 0) line.add("consensus_distance", r.consensus_distance, "%.6e");
    if (r.outer_scale >= 0) line.add("outer_scale", r.outer_scale, "%.6f");
    if (elastic)
      line.add("members", std::vector<double>(r.member_slots.begin(), r.member_slots.end()))
          .add("joining", std::vector<double>(r.joining_slots.begin(), r.joining_slots.end()))
          .add("outer_wall_s", r.wall_seconds, "%.6f")
          .add("outer_wait_s", r.wait_seconds, "%.6f")
          .add("sync_attempts", r.attempts);
    metrics->write(line);
  }
  // "fragment 2/4 (1.2M of 4.9M parameters)", or "fragments 1+2/4 (...)" when two met at once.
  std::string fragments = syncs.size() == 1 ? "fragment " : "fragments ";
  std::size_t elements = 0;
  for (std::size_t i = 0; i < syncs.size(); ++i) {
    fragments += (i > 0 ? "+" : "") + std::to_string(syncs[i].fragment + 1);
    elements += syncs[i].elements;
  }
  // Other links carry a sync's traffic only in some layouts (the gather over dp of ZeRO < 3).
  std::string other_links;
  if (link_bytes.inter_node > 0)
    other_links += ", " + human_bytes(static_cast<double>(link_bytes.inter_node)) + " inter-node";
  if (link_bytes.intra_node > 0)
    other_links += ", " + human_bytes(static_cast<double>(link_bytes.intra_node)) + " intra-node";
  // Elastic: who met, who joined, who is gone.
  const OuterSyncReport& first = syncs.front();
  if (!first.member_slots.empty()) {
    const auto slots = [](const std::vector<int>& list) {
      std::string text;
      for (int s : list) text += (text.empty() ? "" : ",") + std::to_string(s);
      return text;
    };
    other_links += " | members " + slots(first.member_slots);
    if (!first.joining_slots.empty()) other_links += ", joining " + slots(first.joining_slots);
    if (!first.lost_slots.empty()) other_links += ", lost " + slots(first.lost_slots);
    // Shown when it is more than the store's round trips: a member late, or a silent one's timeout.
    if (first.wait_seconds >= 0.1) {
      char waited[64];
      std::snprintf(waited, sizeof waited, ", waited %.1f s for members", first.wait_seconds);
      other_links += waited;
    }
  }
  // Who the screen left out, and why (parallel/diloco/robust_aggregation.h).
  std::string left_out;
  for (const OuterSyncReport& r : syncs)
    for (const OuterSyncReport::LeftOut& out : r.left_out)
      left_out += (left_out.empty() ? " | left out " : "; ") +
                  std::string(first.member_slots.empty() ? "worker " : "slot ") +
                  std::to_string(out.member) + " (" + out.why + ")";
  other_links += left_out;
  std::printf(
      "outer sync after step %lld | %s/%d (%s of %s parameters) | outer grad norm %.4f | sent %s "
      "across workers%s\n",
      static_cast<long long>(syncs.front().step), fragments.c_str(), syncs.front().fragments,
      human_count(static_cast<double>(elements)).c_str(),
      human_count(static_cast<double>(syncs.front().model_elements)).c_str(),
      syncs.front().outer_gradient_norm,
      human_bytes(static_cast<double>(link_bytes.inter_worker)).c_str(), other_links.c_str());
  std::fflush(stdout);
}

}  // namespace strata
