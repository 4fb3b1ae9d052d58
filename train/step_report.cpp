#include "train/step_report.h"

#include <cstdio>
#include <string>

#include "model/core/error.h"
#include "parallel/comm/mpi_communicator.h"
#include "train/metrics/process_memory.h"

namespace strata {

namespace {

// The axes reported by name: tp, pp, dp, and with expert parallelism ep and expert_dp (their
// groups are parts of dp, whose own figure leaves them out).
const char* const kAxisNames[kReportedAxes] = {"tp", "pp", "dp", "ep", "expert_dp", "cp", "dp_cp"};

const Communicator* axis_group(const ProcessGroups& groups, int axis) {
  switch (axis) {
    case 0:
      return &groups.tp();
    case 1:
      return &groups.pp();
    case 2:
      return &groups.dp();
    case 3:
      return groups.ep();
    case 4:
      return groups.expert_dp();
    case 5:  // context parallelism's attention
      return groups.cp();
    default:  // with it, the gradients' and shards' group
      return groups.cp() != nullptr ? &groups.dp_cp() : nullptr;
  }
}

}  // namespace

JsonLine memory_json(const MemoryAccount& m) {
  return JsonLine()
      .add("master_weights", m.master_weights)
      .add("compute_weights", m.compute_weights)
      .add("gradients", m.gradients)
      .add("optimizer_state", m.optimizer_state)
      .add("secondary_weights", m.secondary_weights)
      .add("gathered_weights", m.gathered_weights)
      .add("gradient_buckets", m.gradient_buckets)
      .add("activations", m.activations)
      .add("communication", m.communication);
}

StepWatch::StepWatch(const ProcessGroups& groups)
    : groups_(groups),
      start_(std::chrono::steady_clock::now()),
      total_before_(groups.total_stats()) {
  for (int axis = 0; axis < kReportedAxes; ++axis)
    if (const Communicator* group = axis_group(groups, axis)) axis_before_[axis] = group->stats();
}

double StepWatch::elapsed_ms() const {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_)
      .count();
}

void StepWatch::add_communication(JsonLine& line) const {
  JsonLine bytes, seconds;
  for (int axis = 0; axis < kReportedAxes; ++axis) {
    const Communicator* group = axis_group(groups_, axis);
    if (group == nullptr) continue;
    const CommStats& now = group->stats();
    bytes.add(kAxisNames[axis], now.total_bytes() - axis_before_[axis].total_bytes());
    seconds.add(kAxisNames[axis], now.total_seconds() - axis_before_[axis].total_seconds(), "%.6f");
  }
  line.add("comm_bytes", comm_bytes_json(groups_.total_stats() - total_before_))
      .add("comm_bytes_by_axis", bytes)
      .add("comm_seconds_by_axis", seconds);
}

JsonLine StepWatch::job_link_bytes() const {
  return job_link_bytes_of(groups_.total_stats() - total_before_, groups_.job());
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
  line.add("memory_bytes", memory_json(backend.memory()));
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

}  // namespace strata
