#include "train/metrics/report_figures.h"

#include <mpi.h>

#include <cstdio>

#include "model/core/error.h"
#include "parallel/comm/mpi_communicator.h"

namespace strata {

JobLinkBytes job_link_bytes_total(const CommStats& stats, MpiCommunicator& world) {
  std::uint64_t by_link[3] = {0, 0, 0};  // LinkClass order
  for (const auto& [kind, links] : stats.bytes)
    for (const auto& [link, bytes] : links) by_link[static_cast<int>(link)] += bytes;
  if (MPI_Allreduce(MPI_IN_PLACE, by_link, 3, MPI_UINT64_T, MPI_SUM, world.comm()) != MPI_SUCCESS)
    fail("MPI_Allreduce of the job's bytes failed");
  return {by_link[static_cast<int>(LinkClass::intra_node)],
          by_link[static_cast<int>(LinkClass::inter_node)],
          by_link[static_cast<int>(LinkClass::inter_worker)]};
}

JsonLine JobLinkBytes::json() const {
  JsonLine line;
  line.add(link_class_name(LinkClass::intra_node), intra_node)
      .add(link_class_name(LinkClass::inter_node), inter_node);
  if (inter_worker > 0) line.add(link_class_name(LinkClass::inter_worker), inter_worker);
  return line;
}

JsonLine job_link_bytes_of(const CommStats& stats, MpiCommunicator& world) {
  return job_link_bytes_total(stats, world).json();
}

namespace {

// `value` scaled by `base` until below it, with three significant digits at most and never an
// exponent, followed by the unit reached.
std::string with_unit(double value, double base, const char* const* units, int last_unit,
                      const char* separator) {
  int unit = 0;
  while (value >= base && unit < last_unit) {
    value /= base;
    ++unit;
  }
  const int decimals = unit == 0 || value >= 100 ? 0 : value >= 10 ? 1 : 2;
  char text[48];
  std::snprintf(text, sizeof text, "%.*f%s%s", decimals, value, separator, units[unit]);
  return text;
}

}  // namespace

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  return with_unit(bytes, 1024, kUnits, 4, " ");
}

std::string human_count(double count) {
  static constexpr const char* kUnits[] = {"", "k", "M", "B", "T"};
  return with_unit(count, 1000, kUnits, 4, "");
}

}  // namespace strata
