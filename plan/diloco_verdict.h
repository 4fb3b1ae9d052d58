// Whether DiLoCo beats synchronous training on a cluster whose nodes are joined by a slow link
// (plan/cluster.h: links.inter_worker, or an inter_node link that slow): one worker per node.
//
//   synchronous: the best layout of the whole world (search_layouts) training workers × the
//     per-worker global batch, the nodes joined by the inter-worker link;
//   DiLoCo with H inner steps: every worker runs the best layout of its node on its own global
//     batch (train.global_batch is per worker under DiLoCo), and every H steps the workers
//     average their replicas over the inter-worker link: the bytes a worker sends are the
//     averaging's own count (parallel/diloco/worker_averaging.h averaging_bytes_sent, with the
//     config's diloco.averaging, diloco.compression and diloco.aggregation, plus the screen's
//     norms, screening_bytes_sent) over the whole replica, all of a site's
//     devices sharing the one link. With diloco.overlap the averaging runs behind the next inner
//     steps.
// Throughput is tokens per second over all workers. What it does not price is convergence: DiLoCo's
// loss per token is not synchronous training's (the papers report parity at H in the hundreds for
// their settings); the verdict is about speed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/search.h"

namespace strata {

struct DilocoOption {
  int inner_steps = 0;  // H
  double tokens_per_s = 0;
};

struct DilocoVerdict {
  int workers = 0;
  double sync_tokens_per_s = 0;
  std::string sync_layout;
  double worker_step_seconds = 0;  // one inner step of a worker
  std::string worker_layout;
  double outer_sync_seconds = 0;  // one averaging over the slow link
  std::uint64_t outer_sync_bytes = 0;
  std::vector<DilocoOption> options;  // per H, ascending
  int break_even_inner_steps = 0;     // the least H that beats synchronous training (0: none)
  std::string summary;                // one sentence
};

// nullopt when the cluster has one node or no slow link between its nodes (inter_worker absent
// and inter_node no slower than a tenth of intra_node), or the world is within one node.
std::optional<DilocoVerdict> diloco_verdict(const Config& base, const ClusterSpec& cluster,
                                            int world_size);

}  // namespace strata
