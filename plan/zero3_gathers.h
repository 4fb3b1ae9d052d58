// The segments a ZeRO-3 rank gathers in one step, in order (Gpt's order of weight acquisitions):
// a forward pass gathers wte and wpe (first stage), the blocks ascending, then lnf and wte (last
// stage, the tied head); a backward pass gathers wte and lnf (last stage), then the blocks
// descending (one acquisition serves a block's recomputation and its backward); the embedding's
// backward needs no weights. With virtual stages each op runs the model of its chunk, which
// reaches the rank's segments (zbv's rank 0 gathers its one wte for both its embedding chunk and
// its head chunk). Every entry is one gather: a segment is released after each use, and
// from the second step on the prefetch fetches exactly the next entry. The memory model prices
// the gathered peak from it, the communication model the bytes.
#pragma once

#include <vector>

#include "model/parameter_access.h"
#include "model/parameter_layout.h"
#include "parallel/pipeline/pipeline_schedule.h"

namespace strata {

struct SegmentGatherUse {
  int segment = 0;  // index in the layout's segments()
  WeightUse use = WeightUse::forward;
};

// The gathers of one stage holding `partition` (every chunk of it) whose step runs `program`
// (its pipeline instruction list), over the segments of the partition's layout.
std::vector<SegmentGatherUse> zero3_gather_sequence(const ModelPartition& partition,
                                                    const SegmentIndex& index,
                                                    const std::vector<PipelineOp>& program);

}  // namespace strata
