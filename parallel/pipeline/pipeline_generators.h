// The multi-chunk and zero-bubble generators behind make_pipeline_schedule
// (parallel/pipeline/pipeline_schedule.h), which checks their arguments first. Their programs use
// single transfers and need sends that do not block.
#pragma once

#include "parallel/pipeline/pipeline_schedule.h"

namespace strata {

// Megatron-LM's interleaved 1F1B with v looped chunks; micro_batches is a multiple of stages.
PipelineProgram interleaved_program(int stages, int micro_batches, int chunks);

// ZB-H1 from 1F1B's program: every stage keeps 1F1B's order of forwards and backwards, each
// backward split into B and W, and in unit time slots runs its next F or B when it is ready, else
// its oldest pending W, holding at most `max_held` micro-batches (forwarded, not through W). With
// max_held = min(p, m), 1F1B's peak, this reaches 3m + p - 1 slots for m >= p: a third of 1F1B's
// bubble, the paper's ZB-H1.
PipelineProgram zb_h1_program(const PipelineProgram& one_f_one_b, int micro_batches, int max_held);

// A list schedule over the virtual stages of `layout`, in unit time slots: each rank, when free,
// runs a ready B (the previous virtual stage waits for it), else a ready F while it holds fewer
// than `max_held` (chunk, micro-batch) pairs, else its oldest pending W. zb_h2 (one chunk,
// 2p - 1 held) and zbv (v_shape, 2p held) are this scheduler with their limits.
PipelineProgram greedy_zero_bubble_program(int stages, int micro_batches,
                                           const PipelineLayout& layout, int max_held);

}  // namespace strata
