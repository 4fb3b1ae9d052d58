// Figures that the trainer's report lines share (train/step_report.h for each step,
// train/diloco/diloco_run.h for each outer sync): what the whole job sent by link class, and byte
// counts and counts written for people.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/comm/communicator.h"
#include "train/metrics/metrics.h"

namespace strata {

class MpiCommunicator;

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

}  // namespace strata
