// The rules of swarm.* (docs/ARCHITECTURE.md §2 "SWARM", §3): a swarm peer is one process
// serving one stage of an untied model, its stages given by swarm.stages.
#include <cstdint>
#include <numeric>

#include "plan/config_rules.h"

namespace strata::config_detail {

void validate_swarm(const Config& c, const Rules& rules) {
  const SwarmConfig& s = c.swarm;
  if (!s.enabled()) return;
  if (!s.join.starts_with("file:///") && !s.join.starts_with("redis://"))
    rules.fail("swarm.join", "must be file:///absolute/dir or redis://host:port, got '", s.join,
               "'");
  if (s.group.empty() || s.group.find_first_of(" /") != std::string::npos)
    rules.fail("swarm.group", "must be a name without spaces or '/', got '", s.group, "'");
  const int stages = static_cast<int>(s.stages.size());
  if (stages < 2)
    rules.fail("swarm.stages",
               "must list the layers of at least 2 stages (a swarm is a pipeline), got ", stages);
  for (const int layers : s.stages)
    if (layers < 1) rules.fail("swarm.stages", "must give every stage >= 1 layer, got ", layers);
  const std::int64_t total = std::accumulate(s.stages.begin(), s.stages.end(), std::int64_t{0});
  if (total != c.model.n_layer)
    rules.fail("swarm.stages", "must sum to model.n_layer (", c.model.n_layer, "), got ", total);
  if (s.stage >= stages)
    rules.fail("swarm.stage", "must be auto or a stage below ", stages,
               " (the length of swarm.stages), got ", s.stage);
  rules.at_least("swarm.target_batch", s.target_batch, 0);
  if (s.target_batch % c.train.micro_batch != 0)
    rules.fail("swarm.target_batch", "(", s.target_batch,
               ") must be a multiple of train.micro_batch (", c.train.micro_batch,
               "): a stage counts whole micro-batches");
  rules.positive("swarm.timeout", s.timeout);
  rules.positive("swarm.request_timeout", s.request_timeout);
  rules.at_least("swarm.stage_peers", s.stage_peers, 1);
  rules.at_least("swarm.rebalance_every", s.rebalance_every, 0.0);
  rules.at_least("swarm.in_flight", s.in_flight, 1);
  // The stages step independently: the head cannot read the first stage's wte.
  if (c.model.arch.tie_embeddings)
    rules.fail("model.tie_embeddings",
               "must be false in a swarm (swarm.join): its stages step independently, so the "
               "head cannot share the first stage's embedding");
  // A peer is one process; its stage is its whole model.
  const ParallelConfig& p = c.parallel;
  if (p.tp != 1 || p.pp != 1 || p.dp > 1 || p.ep != 1 || p.zero.stage != 0 || p.auto_layout)
    rules.fail("swarm.join",
               "a swarm peer is one process: parallel.tp, pp, dp and ep must be 1, zero.stage 0 "
               "and parallel.auto false (swarm.stages splits the model)");
  if (c.diloco.enabled)
    rules.fail("swarm.join", "a swarm peer cannot also be a DiLoCo worker (diloco.enabled)");
  if (c.precision.compute == cpu::ComputeDtype::fp16)
    rules.fail("precision.compute",
               "fp16 is not for swarm peers (its loss scale would have to agree across peers "
               "that step apart): use bf16 or fp32");
}

}  // namespace strata::config_detail
