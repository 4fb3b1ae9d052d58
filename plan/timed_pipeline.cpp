#include "plan/timed_pipeline.h"

#include <algorithm>

#include "model/core/error.h"

namespace strata {

TimedPipeline run_pipeline_clock(const PipelineProgram& program,
                                 const std::vector<StageDurations>& durations) {
  const std::size_t stages = program.size();
  STRATA_CHECK(durations.size() == stages, "one duration per pipeline stage");
  std::vector<std::size_t> next(stages, 0);
  TimedPipeline t;
  t.finish.assign(stages, 0.0);
  t.busy.assign(stages, 0.0);
  const auto done = [&](std::size_t s) { return next[s] >= program[s].size(); };
  for (bool progress = true; progress;) {
    progress = false;
    for (std::size_t s = 0; s < stages; ++s) {
      while (!done(s)) {
        const PipelineOp& op = program[s][next[s]];
        const int offset = pipeline_op_peer_offset(op.kind);
        if (offset == 0) {  // a pass
          const double seconds =
              op.kind == PipelineOpKind::forward ? durations[s].forward : durations[s].backward;
          t.finish[s] += seconds;
          t.busy[s] += seconds;
          ++next[s];
          progress = true;
          continue;
        }
        // A transfer waits for its mirror at the head of the peer's list (the matching contract
        // makes the peer's next op towards this stage the mirror).
        const std::size_t peer = s + offset;
        if (done(peer) || pipeline_op_peer_offset(program[peer][next[peer]].kind) != -offset) break;
        const double start = std::max(t.finish[s], t.finish[peer]);
        const double end = start + durations[std::min(s, peer)].message;
        t.finish[s] = t.finish[peer] = end;
        ++next[s];
        ++next[peer];
        progress = true;
      }
    }
  }
  double busy = 0;
  for (std::size_t s = 0; s < stages; ++s) {
    if (!done(s))
      fail("pipeline clock: stage ", s, " deadlocked at ", to_string(program[s][next[s]]));
    t.makespan = std::max(t.makespan, t.finish[s]);
    busy += t.busy[s];
  }
  t.bubble_fraction = t.makespan > 0 ? 1 - busy / (static_cast<double>(stages) * t.makespan) : 0;
  return t;
}

}  // namespace strata
