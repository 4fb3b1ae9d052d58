// Checking checkpoint files without a model: `ckpt verify`, `ckpt diff`, and `train --resume`'s
// choice of the newest intact checkpoint.
//
// A checkpoint is intact when its bytes match its seal (train/checkpoint/checkpoint_seal.h: a
// truncated file, or a flipped bit anywhere, fails there, before HDF5 reads anything), it opens as
// an HDF5 file of a format Strata reads (strata-checkpoint-4 or -5, or -3 from earlier versions),
// every dataset in it carries a `checksum` attribute that its whole contents match (fp32 tensors:
// the index-and-value checksum of train/checkpoint/checkpoint_format.h; the tokenizer bytes: the
// file's format's checksum_bytes), and its /state group holds the training state. Every failure is
// a strata::Error naming the file and, where there is one, the tensor (locate_checkpoint_damage
// finds it for a file that fails its seal).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "plan/config.h"
#include "train/checkpoint/checkpoint_format.h"

namespace strata {

struct CheckpointSummary {
  std::int64_t step = 0;
  int tensors = 0;          // fp32 datasets (model, optimizer, DiLoCo state)
  std::int64_t values = 0;  // their elements
  int workers = 1;          // DiLoCo workers whose state it holds
  CheckpointFormat format = kCurrentCheckpointFormat;
};

// Reads the whole file and checks it as above; throws on the first problem.
CheckpointSummary verify_checkpoint(const std::string& path);

// Where the damage of a checkpoint that fails its seal lies, for `ckpt verify`: the first failure
// of the per-tensor checks run without the seal (naming the tensor), or a sentence saying that
// the damage is in HDF5's structures. Those checks make HDF5 read a damaged file, which may crash
// it, so they run in a child process (fork): for a tool, not inside an MPI job. "" when no child
// process could be started.
std::string locate_checkpoint_damage(const std::string& path);

// Calls `visit(name, values)` for every fp32 dataset of the file (absolute names such as
// "/model/wte"), in name order, after checking that it matches its checksum.
void for_each_checkpoint_tensor(
    const std::string& path,
    const std::function<void(const std::string& name, const std::vector<float>& values)>& visit);

// The newest checkpoint of `directory` that verify_checkpoint accepts. Each newer one it rejects
// is reported through `skipped(path, reason)`. nullopt when there is none.
std::optional<std::string> latest_intact_checkpoint(
    const std::string& directory,
    const std::function<void(const std::string& path, const std::string& reason)>& skipped);

// Hidden temporary files (".step_*.h5.tmp<pid>") that a job killed while writing a checkpoint
// left in `directory`: removed, their names returned.
std::vector<std::string> remove_abandoned_checkpoint_writes(const std::string& directory);

// The checkpoint a resume reads: `requested`, or when it is empty the newest intact one of
// `directory` (a warning line on stderr for each newer one skipped, and why). Rank 0 of `world`
// decides, removing abandoned temporary writes first, and every rank gets the same answer or the
// same error.
std::string choose_resume_checkpoint(const std::string& requested, const std::string& directory,
                                     Communicator& world);

// Refuses, naming why, a checkpoint that this run cannot continue: one of another number of DiLoCo
// workers (it lacks, or has more of, their state), or of another model (an imported GPT-2 of
// another size, say: n_head changes no tensor's shape, so the tensors' checks alone would miss it),
// or of another optimizer (its state is another optimizer's).
void check_resumable(const std::string& path, const ModelConfig& model, int workers,
                     OptimizerName optimizer);

// The first key of `model:` that defines the network (its tensors' shapes, or what they compute:
// n_head, the experts' routing) on which the checkpoint's config differs from `model`; `before`
// is the checkpoint's value, `after` this run's. The MoE keys that only shape training
// (capacity_factor, group_sequences, aux_loss, z_loss) may differ. nullopt when the models agree,
// or when the checkpoint's config is not one this version reads (its tensors' shape checks then
// still apply). `train --init` refuses a checkpoint of another model with it.
std::optional<ConfigChange> checkpoint_model_difference(const std::string& path,
                                                        const ModelConfig& model);

}  // namespace strata
