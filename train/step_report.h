// What the trainer reports about each step: one metrics.jsonl line (docs/ARCHITECTURE.md §5: step,
// loss, lr, grad_norm, tokens_per_s, step_ms; memory and communication figures) and, every
// log_every steps, one console line. StepWatch measures a step's time and communication from
// snapshots of the running totals taken before it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "parallel/mesh/process_groups.h"
#include "train/backend/training_backend.h"
#include "train/metrics/metrics.h"
#include "train/metrics/report_figures.h"
#include "train/training_step.h"

namespace strata {

class MpiCommunicator;

// Axes with a figure of their own in comm_bytes_by_axis: tp, pp, dp, ep, expert_dp (these two
// under expert parallelism only), cp and dp_cp (context parallelism only: its attention, and the
// weights' replicas that gradients and ZeRO's shards then move over instead of dp).
inline constexpr int kReportedAxes = 7;

class StepWatch {
 public:
  // The step's figures are those of groups.total_stats(): DiLoCo's outer group included.
  explicit StepWatch(const ProcessGroups& groups);
  double elapsed_ms() const;
  // The step's comm_bytes (by kind and link class) and bytes and seconds by parallel axis.
  void add_communication(JsonLine& line) const;
  // The step's comm_bytes_job: what every rank of the job sent, by link class. Collective over
  // the job (every rank calls it after the step); the sum runs on raw MPI, outside the counted
  // communicators, so it never enters a step's figures.
  JsonLine job_link_bytes() const;

 private:
  const ProcessGroups& groups_;
  std::chrono::steady_clock::time_point start_;
  CommStats total_before_;
  CommStats axis_before_[kReportedAxes];  // tp, pp, dp, ep, expert_dp, cp, dp_cp
};

struct StepReport {
  const StepResult& result;
  std::int64_t step;
  double lr;
  double step_ms;
  double tokens_per_step;
};

// The memory account as a JSON object of byte counts.
JsonLine memory_json(const MemoryAccount& memory);

// The metrics line of a step (rank 0 writes it).
JsonLine step_metrics(const StepReport& report, const StepWatch& watch,
                      const TrainingBackend& backend, bool fp16);
// The console line of a step.
void print_step(const StepReport& report, int total_steps);

}  // namespace strata
