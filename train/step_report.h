// What the trainer reports about each step: one metrics.jsonl line (docs/ARCHITECTURE.md §5: step,
// loss, lr, grad_norm, tokens_per_s, step_ms; memory and communication figures) and, every
// log_every steps, one console line. StepWatch measures a step's time and communication from
// snapshots of the running totals taken before it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "parallel/mesh/process_groups.h"
#include "train/metrics.h"
#include "train/training_backend.h"
#include "train/training_step.h"

namespace strata {

class MpiCommunicator;

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
  CommStats axis_before_[3];  // tp, pp, dp
};

// What every rank of the job sent in `stats` (each rank passes its own), by link class.
// Collective over `world`, on raw MPI (uncounted).
struct JobLinkBytes {
  std::uint64_t intra_node = 0, inter_node = 0, inter_worker = 0;
  // {"intra_node": n, "inter_node": n[, "inter_worker": n when non-zero]}.
  JsonLine json() const;
};
JobLinkBytes job_link_bytes_total(const CommStats& stats, MpiCommunicator& world);
JsonLine job_link_bytes_of(const CommStats& stats, MpiCommunicator& world);

// A byte count for people: "0 B", "812 B", "31.4 KiB", "1.27 MiB", "3.10 GiB".
std::string human_bytes(double bytes);
// A count for people: "812", "52.4k", "1.27M", "3.10B".
std::string human_count(double count);

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
