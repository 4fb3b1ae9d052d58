#include "train/step_report.h"

#include <sys/resource.h>

#include <cstdio>
#include <string>

namespace strata {

namespace {

const char* const kAxisNames[3] = {"tp", "pp", "dp"};

const Communicator& axis_group(const ProcessGroups& groups, int axis) {
  return axis == 0 ? groups.tp() : axis == 1 ? groups.pp() : groups.dp();
}

std::string comm_json(const CommStats& stats) {
  std::string out = "{";
  for (const auto& [kind, by_link] : stats.bytes) {
    if (out.size() > 1) out += ", ";
    out += "\"" + kind + "\": {";
    bool first = true;
    for (const auto& [link, bytes] : by_link) {
      out += std::string(first ? "" : ", ") + "\"" +
             (link == LinkClass::intra_node ? "intra_node" : "inter_node") +
             "\": " + std::to_string(bytes);
      first = false;
    }
    out += "}";
  }
  return out + "}";
}

}  // namespace

StepWatch::StepWatch(const ProcessGroups& groups)
    : groups_(groups),
      start_(std::chrono::steady_clock::now()),
      total_before_(groups.total_stats()) {
  for (int axis = 0; axis < 3; ++axis) axis_before_[axis] = axis_group(groups, axis).stats();
}

double StepWatch::elapsed_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
      .count();
}

void StepWatch::add_communication(JsonLine& line) const {
  std::string bytes = "{", seconds = "{";
  for (int axis = 0; axis < 3; ++axis) {
    const CommStats& now = axis_group(groups_, axis).stats();
    const std::string sep = axis == 0 ? "\"" : ", \"";
    bytes += sep + kAxisNames[axis] +
             "\": " + std::to_string(now.total_bytes() - axis_before_[axis].total_bytes());
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.6f",
                  now.total_seconds() - axis_before_[axis].total_seconds());
    seconds += sep + kAxisNames[axis] + "\": " + buffer;
  }
  line.add_raw("comm_bytes", comm_json(groups_.total_stats() - total_before_))
      .add_raw("comm_bytes_by_axis", bytes + "}")
      .add_raw("comm_seconds_by_axis", seconds + "}");
}

JsonLine step_metrics(const StepReport& report, const StepWatch& watch,
                      const TrainingBackend& backend, bool fp16) {
  const StepResult& r = report.result;
  JsonLine line;
  line.add("step", report.step)
      .add("loss", r.loss)
      .add("lr", report.lr)
      .add("grad_norm", r.grad_norm)
      .add("tokens_per_s", report.tokens_per_step / (report.step_ms / 1000.0))
      .add("step_ms", report.step_ms)
      .add("skipped", !r.applied)
      .add("peak_rss_mib", peak_rss_mib())
      .add("activation_mib", backend.activation_bytes() / 1048576.0)
      .add("activation_mib_per_layer", backend.activation_bytes_per_layer() / 1048576.0);
  watch.add_communication(line);
  if (fp16) line.add("loss_scale", r.loss_scale);  // the scale this step used
  if (backend.device_bytes() > 0) line.add("device_mib", backend.device_bytes() / 1048576.0);
  return line;
}

void print_step(const StepReport& report, int total_steps) {
  const StepResult& r = report.result;
  std::printf("step %6lld/%d | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | %.1f ms%s\n",
              static_cast<long long>(report.step), total_steps, r.loss, report.lr, r.grad_norm,
              report.tokens_per_step / (report.step_ms / 1000.0), report.step_ms,
              r.applied          ? ""
              : r.scale_overflow ? " | skipped (fp16 overflow, loss scale halved)"
                                 : " | skipped (non-finite)");
  std::fflush(stdout);
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

}  // namespace strata
