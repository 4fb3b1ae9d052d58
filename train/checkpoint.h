// Checkpoints (DESIGN §5): one HDF5 file per checkpoint, <dir>/step_<8 digits>.h5, holding the
// logical full fp32 tensors whatever layout wrote them:
//   /model/<name>            parameters, logical shapes of DESIGN §5 (weights [out, in])
//   /optimizer/m/<name>, /optimizer/v/<name>   AdamW moments; attribute adam_steps on /optimizer
//   /state                   attributes step, data_position (samples consumed), seed, loss_scale,
//                            loss_scale_clean_steps, adam_steps
//   /tokenizer/model         the SentencePiece model bytes (uint8), when the run has one
//   root attributes          config (effective YAML), format
// Every tensor carries a `checksum` attribute, the wrapping sum over its elements of a hash of
// (logical index, value): independent of how the tensor was sliced, so each rank adds the share of
// the slices it wrote, and verified on load over the whole tensor, so a damaged file is an error,
// never silently wrong weights. Files are written to a hidden temporary name in the same directory
// and renamed when complete, so a crash never leaves a partial step_*.h5.
//
// A partitioned model (tensor/pipeline parallel) writes one file together: rank 0 creates it with
// every logical dataset, then the writing ranks, one after another, put their slices in place
// (hyperslabs). Reading takes each local tensor's slice out of the logical one, so any layout
// resumes any checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/gpt_shape.h"
#include "model/parameter_layout.h"
#include "parallel/communicator.h"

namespace strata {

inline constexpr const char* kCheckpointFormat = "strata-checkpoint-2";

struct CheckpointState {
  std::int64_t step = 0;           // optimizer steps completed
  std::int64_t data_position = 0;  // training samples consumed (global sample index of the next)
  std::uint64_t seed = 0;
  double loss_scale = 1.0;  // the scale of the next step (1 without fp16 loss scaling)
  std::int64_t adam_steps = 0;
  // Clean fp16 steps since a dynamic loss scale last changed; −1 when the run had no dynamic
  // scale (and in checkpoints that predate the attribute), so a resume knows not to restore it.
  std::int64_t loss_scale_clean_steps = -1;
};

struct Checkpoint {
  std::string config_yaml;
  CheckpointState state;
  std::vector<float> params;  // flat, in ParameterLayout order
  std::vector<float> adam_m;  // empty when not loaded
  std::vector<float> adam_v;
  std::string tokenizer_model;  // empty when the run had none
};

std::string checkpoint_file_name(std::int64_t step);  // "step_00000010.h5"

// This rank's part in writing a checkpoint: its tensors (`layout`, slices of the logical model
// `shape`) and, per tensor, whether it writes it (together the writing ranks cover every logical
// element exactly once). `world` spans every rank of the job; null for a single process.
struct CheckpointShard {
  const ParameterLayout* layout = nullptr;
  GptShape shape;
  std::vector<bool> writes;
  Communicator* world = nullptr;
};

// Writes atomically (temporary name + rename) into `directory` (created if missing); returns the
// final path. Never touches other checkpoints. Collective over shard.world: every rank calls it
// with its own tensors in `checkpoint` (state, config and tokenizer are taken from rank 0).
std::string write_checkpoint(const std::string& directory, const CheckpointShard& shard,
                             const Checkpoint& checkpoint);
// The whole model from one process.
std::string write_checkpoint(const std::string& directory, const GptShape& shape,
                             const ParameterLayout& layout, const Checkpoint& checkpoint);

// Reads the config text only (to build the model before reading tensors).
std::string read_checkpoint_config(const std::string& path);

// Reads this rank's slices (`layout`) of each logical tensor, verifying shapes and checksums.
// With with_optimizer false the AdamW moments are not read (eval, generate).
Checkpoint read_checkpoint(const std::string& path, const ParameterLayout& layout,
                           bool with_optimizer);

// Newest complete checkpoint (highest step) in `directory`, if any.
std::optional<std::string> latest_checkpoint(const std::string& directory);

// Deletes all but the newest `keep` checkpoints (keep 0 keeps all).
void prune_checkpoints(const std::string& directory, int keep);

// 64-bit checksum of a byte range (word-wise mixing; detects corruption, not tampering).
std::uint64_t checksum_bytes(const void* data, std::size_t bytes);
// Share of a tensor's checksum held by the local elements `values` of `slice`.
std::uint64_t checksum_slice(const float* values, const TensorSlice& slice);

}  // namespace strata
