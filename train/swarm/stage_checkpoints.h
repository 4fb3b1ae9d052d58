// A swarm stage's checkpoints (docs/ARCHITECTURE.md §2 "SWARM", §5 "Checkpoints"). Every peer
// writes its stage's state after the averaging of every checkpoint.every-th step and of the last
// (train.steps, or train.stop_after), and on a stop signal, into its own run's checkpoint
// directory: a standard checkpoint file (train/checkpoint/checkpoint.h) that holds the stage's
// tensors alone (its layers, the embedding on the first stage, the head on the last) with their
// optimizer state, the root attribute swarm_stage, and /state: the stage's step, its applied
// optimizer steps (adam_steps) and data_position = step · target_batch. Peers of one stage hold the
// same state after each averaging, so any of their checkpoints is the stage's.
//
// `train --resume` of a peer reads its newest intact checkpoint (or the one named): a stage
// checkpoint gives the peer its stage (swarm.stage must agree or be auto), a whole checkpoint
// (`ckpt swarm-assemble`'s, or any of the same model) gives it the tensors of its stage; either
// way the stage goes on from the checkpoint's step (train/swarm/stage_rounds.h: unless the stage
// has live peers, whose state a resumed peer takes as any joiner does).
//
// `ckpt swarm-assemble OUT_DIR INPUT...` (assemble_swarm_checkpoint) picks the newest stage
// checkpoint of each stage among its inputs and writes one whole checkpoint that eval, generate,
// export-hf and train read: its step is the least of the stages' (each named in the report).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "parallel/comm/mpi_communicator.h"
#include "plan/config.h"
#include "train/swarm/swarm_stage.h"

namespace strata {

class StageCheckpoints {
 public:
  // `tokenizer_model`: the run's tokenizer bytes (the first stage's, which reads the data; empty
  // on the others).
  StageCheckpoints(const Config& config, std::string tokenizer_model, bool without_tokenizer);

  // After a stage's step: a checkpoint when one is due.
  void after_step(SwarmStage& stage, const StageStep& step);
  // Writes the stage's state now, unless it was written at this step.
  void save(SwarmStage& stage);

 private:
  const Config& config_;
  std::string tokenizer_model_;
  bool without_tokenizer_;
  int saved_stage_ = -1;  // a peer that moved writes its new stage's steps anew
  std::int64_t saved_step_ = -1;
};

// The checkpoint `train --resume [requested]` reads for a swarm peer, and the stage it serves: a
// stage checkpoint's own (an error when swarm.stage names another), else swarm.stage (−1: auto).
struct StageResume {
  std::string path;
  int stage = -1;
};
StageResume choose_stage_resume(const Config& config, const std::string& requested,
                                MpiCommunicator& world);

// Loads the stage's weights, optimizer state and counts from `path` (a stage checkpoint of this
// stage under the same swarm.stages, or a whole checkpoint of the model). Returns its step.
std::int64_t load_stage_checkpoint(const Config& config, SwarmStage& stage,
                                   const std::string& path);

// `ckpt swarm-assemble`: `inputs` are stage checkpoints or directories holding them (a peer's
// run directory or its checkpoints/); the newest of each stage are merged into `out_dir`. Every
// stage must be found, all under the same model and swarm.stages. Says on `report` which
// checkpoint of which step each stage came from; returns the written path.
std::string assemble_swarm_checkpoint(const std::vector<std::string>& inputs,
                                      const std::string& out_dir, std::ostream& report);

}  // namespace strata
