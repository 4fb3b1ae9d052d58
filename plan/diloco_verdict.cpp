#include "plan/diloco_verdict.h"

#include <cstdio>

#include "model/gpt_shape.h"
#include "parallel/diloco/worker_averaging.h"

namespace strata {

std::optional<DilocoVerdict> diloco_verdict(const Config& base, const ClusterSpec& cluster,
                                            int world_size) {
  const bool slow_link = cluster.inter_worker.has_value() ||
                         cluster.inter_node.bandwidth_gbs * 10 <= cluster.intra_node.bandwidth_gbs;
  if (!slow_link || world_size <= cluster.devices_per_node ||
      world_size % cluster.devices_per_node != 0)
    return std::nullopt;
  const LinkSpec link = cluster.inter_worker.value_or(cluster.inter_node);
  DilocoVerdict v;
  v.workers = world_size / cluster.devices_per_node;

  ClusterSpec joined = cluster;  // synchronous training crosses the slow link between nodes
  joined.inter_node = link;
  Config sync = base;
  sync.train.global_batch = base.train.global_batch * v.workers;
  const PlanCost together = best_layout(sync, joined, world_size);
  v.sync_tokens_per_s = together.time.tokens_per_s;
  v.sync_layout = together.layout.name();

  const PlanCost worker = best_layout(base, cluster, cluster.devices_per_node);
  v.worker_step_seconds = worker.time.seconds;
  v.worker_layout = worker.layout.name();
  const ModelConfig& m = base.model;
  const GptShape shape = gpt_shape_of(m);  // every expert: a worker holds them all
  const std::size_t parameters = static_cast<std::size_t>(shape.params_excluding_positions()) +
                                 static_cast<std::size_t>(m.seq_len) * m.d_model;
  AveragingRound round;  // no drops; the rule decides whether the vectors are gathered
  round.aggregation.rule = base.diloco.aggregation;
  v.outer_sync_bytes = averaging_bytes_sent(base.diloco.averaging, base.diloco.compression,
                                            parameters, v.workers, 0, round) +
                       screening_bytes_sent(v.workers, 0);
  v.outer_sync_seconds = 2.0 * (v.workers - 1) * link.latency_us * 1e-6 +
                         static_cast<double>(v.outer_sync_bytes) / (link.bandwidth_gbs * 1e9);

  const double tokens = static_cast<double>(base.train.global_batch) * m.seq_len * v.workers;
  for (int h : {1, 10, 30, 100, 300, 1000}) {
    const double per_step = base.diloco.overlap
                                ? std::max(v.worker_step_seconds, v.outer_sync_seconds / h)
                                : v.worker_step_seconds + v.outer_sync_seconds / h;
    v.options.push_back(DilocoOption{h, tokens / per_step});
  }
  // The least H with workers · tokens / (step + sync / H) > synchronous throughput.
  const double needed = tokens / v.sync_tokens_per_s - v.worker_step_seconds;  // sync / H < this
  if (needed > 0) v.break_even_inner_steps = static_cast<int>(v.outer_sync_seconds / needed) + 1;
  char text[512];
  if (v.break_even_inner_steps > 0)
    std::snprintf(text, sizeof(text),
                  "DiLoCo over %d workers beats synchronous training once H >= %d inner steps "
                  "(one outer sync moves %.3g GB per worker in %.3g s; at H = %d: %.0f against "
                  "%.0f tokens/s)",
                  v.workers, v.break_even_inner_steps, v.outer_sync_bytes * 1e-9,
                  v.outer_sync_seconds, base.diloco.inner_steps,
                  tokens / (v.worker_step_seconds + v.outer_sync_seconds / base.diloco.inner_steps),
                  v.sync_tokens_per_s);
  else
    std::snprintf(text, sizeof(text),
                  "synchronous training is at least as fast as DiLoCo for any H: one worker's "
                  "step alone (%.3g s) already exceeds the synchronous step's share",
                  v.worker_step_seconds);
  v.summary = text;
  return v;
}

}  // namespace strata
