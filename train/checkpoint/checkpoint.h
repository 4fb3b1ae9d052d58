// Checkpoints (docs/ARCHITECTURE.md §5): one HDF5 file per checkpoint, <dir>/step_<8 digits>.h5,
// holding the logical full fp32 tensors whatever layout wrote them:
//   /model/<name>            parameters, logical shapes of ARCHITECTURE §5 (weights [out, in])
//   /optimizer/m/<name>, /optimizer/v/<name>   AdamW moments (their update count: /state)
//   /state                   attributes step, data_position (samples consumed), seed, loss_scale,
//                            loss_scale_clean_steps, adam_steps
//   /tokenizer/model         the SentencePiece model bytes (uint8), when the run has one
//   root attributes          config (effective YAML), format (strata-checkpoint-4 written, -5 when
//                            it holds optional buffers; -3 still read: checkpoint_format.h)
// Every tensor carries a `checksum` attribute, the wrapping sum over its elements of a hash of
// (logical index, value): independent of how the tensor was sliced, so each rank adds the share of
// the slices it wrote, and verified on load over the whole tensor, so a damaged file is an error,
// never silently wrong weights. The file's first bytes seal the whole of it (checkpoint_seal.h), so
// damage to HDF5's own structures is caught as well, before HDF5 reads them. Files are written to a
// hidden temporary name in the same directory and renamed when complete, so a crash never leaves a
// partial step_*.h5.
//
// Slabs (ARCHITECTURE §2: checkpoints are written as slabs of ranges). A rank's training state is a
// set of named flat buffers (StateBuffer: "model", "optimizer/m", "optimizer/v", later DiLoCo's
// outer state), each holding an element range of its partition's layout. A rank writes the element
// ranges it owns (checkpoint_write_ranges: together the writers of a job cover every logical
// element exactly once) of every buffer it holds into the logical datasets /<buffer name>/<tensor>,
// rank 0 having created the file with every dataset; the writers take turns (HDF5 files take one
// writer at a time). Reading takes each buffer's range of each local tensor out of the logical one,
// so any layout resumes any checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/hdf5_handle.h"
#include "model/core/element_range.h"
#include "model/gpt_shape.h"
#include "model/parameter_layout.h"
#include "parallel/comm/communicator.h"
#include "train/checkpoint/checkpoint_format.h"

namespace strata {

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

// A statistic an optimizer keeps of a whole tensor rather than of each element (Adafactor's
// row and column means): `size` values, the same on every rank that holds part of `tensor`
// (train/optimizer/optimizer.h).
struct TensorStatistic {
  std::string tensor;
  std::int64_t size = 0;
  bool operator==(const TensorStatistic&) const = default;
};

// The element type of a state buffer's datasets.
enum class StoredType { float32, int8, uint8 };

// A flat buffer of training state: `values[i]` is element range.begin + i of the layout. Stored
// under /<name>/<tensor> ("model" holds the parameters: /model/<tensor>).
// A per-tensor buffer instead (`range` unused): `values` holds its `statistics` one after another
// (this rank's tensors': possibly none), each stored whole as the 1-D dataset /<name>/<tensor>,
// written by the one rank that writes its tensor's first logical element (writes_statistic) and
// read by every rank that holds part of the tensor (always float32).
struct StateBuffer {
  std::string name;
  ElementRange range;
  std::vector<float> values;
  bool per_tensor = false;
  std::vector<TensorStatistic> statistics{};
  // The element type of its datasets: values of an int8 or uint8 buffer are integers in that
  // type's range (the 8-bit optimizer's codes), held as floats and converted by HDF5 on write and
  // read.
  StoredType stored = StoredType::float32;
  // A per-tensor buffer a checkpoint may lack, in part or whole (state that runs of other
  // settings do not keep: the FP8 amax histories): each statistic the file lacks, or holds in
  // another shape, is read as zeros.
  bool optional = false;
};

// Everything of a checkpoint but the tensors.
struct CheckpointMeta {
  std::string config_yaml;
  CheckpointState state;
  std::string tokenizer_model;  // empty when the run had none
  // DiLoCo workers 1 … k−1 (worker 0's is `state`), stored as /state/worker_<w>: their AdamW
  // step counts and loss scales differ when steps are skipped. Empty without DiLoCo.
  std::vector<CheckpointState> worker_states;
  // The run trained on ids converted without a tokenizer (shards' tokenizer_sha256 "none"):
  // stored as the root attribute tokenizer_sha256 = "none", so that generate can say so.
  bool without_tokenizer = false;
  // A swarm stage's checkpoint (train/swarm/stage_checkpoints.h): the file holds that stage's
  // tensors alone, those of the writer's layout, and the root attribute swarm_stage; −1: a whole
  // model's.
  int swarm_stage = -1;
};

// A whole checkpoint as one process holds it (tools, tests): the parameters and, when loaded,
// the AdamW moments, flat in ParameterLayout order.
struct Checkpoint {
  std::string config_yaml;
  CheckpointState state;
  std::vector<float> params;
  std::vector<float> adam_m;  // empty when not loaded
  std::vector<float> adam_v;
  std::string tokenizer_model;
  bool without_tokenizer = false;  // as CheckpointMeta's
};

std::string checkpoint_file_name(std::int64_t step);  // "step_00000010.h5"

// The elements of `layout` (partition `partition`) this rank writes: `share` of every tensor this
// partition writes, i.e. every tensor but the last pipeline stage's copy of the tied wte and, on
// tensor-parallel ranks other than 0, the tensors replicated over the tensor-parallel group. The
// data-parallel ranks of a replica are its writers, each with its own share (layout.shard of the
// rank, or the ZeRO shard it owns): every logical element is then written once by the job.
// Under expert parallelism the writers are the ranks holding the same tensors (replica_share
// tiles each rank's layout over them), and only ep rank 0's write the dense tensors.
std::vector<ElementRange> checkpoint_write_ranges(const ParameterLayout& layout,
                                                  const ModelPartition& partition,
                                                  const ElementRange& share);

// Whether the writer of element ranges `writes` of `layout` writes the statistics of `tensor`: it
// writes the tensor's first logical element.
bool writes_statistic(const ParameterLayout& layout, const std::vector<ElementRange>& writes,
                      const std::string& tensor);

// The datasets of one element-range buffer: /<name>/<tensor> for every tensor, of type `stored`.
struct StateDatasets {
  std::string name;
  StoredType stored = StoredType::float32;
  bool operator==(const StateDatasets&) const = default;
};

// This rank's part in writing a checkpoint: its tensors (`layout`, slices of the logical model
// `shape`) and the element ranges of them it writes. `world` spans every rank of the job; null
// for a single process.
struct CheckpointWriter {
  const ParameterLayout* layout = nullptr;
  GptShape shape;
  std::vector<ElementRange> writes;
  Communicator* world = nullptr;
  // Every element-range buffer of the job, when ranks hold buffers of different names (DiLoCo
  // workers); empty: rank 0's element-range buffers.
  std::vector<StateDatasets> datasets;
};

// Writes atomically (temporary name + rename) into `directory` (created if missing); returns the
// final path. Never touches other checkpoints. Collective over writer.world: every rank calls it
// with the buffers it holds (meta is taken from rank 0; every rank must hold buffers of the same
// names). The file's datasets are those buffers' names.
std::string write_checkpoint(const std::string& directory, const CheckpointWriter& writer,
                             const CheckpointMeta& meta, const std::vector<StateBuffer>& buffers);
// The whole model from one process.
std::string write_checkpoint(const std::string& directory, const GptShape& shape,
                             const ParameterLayout& layout, const Checkpoint& checkpoint);

// One checkpoint of `meta` in `directory`, step_<meta.state.step>.h5 written as write_checkpoint
// writes (temporary name, seal, rename), holding every tensor of the checkpoints `parts`, which
// hold disjoint tensors (a swarm's stage checkpoints, train/swarm/stage_checkpoints.h): each
// dataset is copied with its checksum (checkpoint_merge.cpp). A tensor that two parts hold, or a
// file of that name already in `directory`, is an error. Returns the path.
std::string write_merged_checkpoint(const std::string& directory, const GptShape& shape,
                                    const CheckpointMeta& meta,
                                    const std::vector<std::string>& parts);

// The parts of write_checkpoint, for a caller that orders the writers itself: the file (rank 0:
// every dataset of the buffers' names with a zero checksum, the state, config and tokenizer),
// then, one writer at a time, each writer's elements of its buffers, then (rank 0)
// seal_checkpoint_file (checkpoint_seal.h).
// The datasets of whole tensors a job's checkpoint holds: writer.datasets, or those of `buffers`
// of element ranges (each per-tensor buffer's writer creates its datasets).
std::vector<StateDatasets> state_datasets(const CheckpointWriter& writer,
                                          const std::vector<StateBuffer>& buffers);
// `tensors`: the tensors the file holds (a swarm stage's layout); null: every tensor of `shape`.
// `format`: its `format` attribute (checkpoint_format.h checkpoint_format_to_write).
void create_checkpoint_file(const std::string& path, const GptShape& shape,
                            const CheckpointMeta& meta, const std::vector<StateDatasets>& datasets,
                            const ParameterLayout* tensors = nullptr,
                            CheckpointFormat format = CheckpointFormat::v4);
void write_checkpoint_elements(const std::string& path, const CheckpointWriter& writer,
                               const std::vector<StateBuffer>& buffers);

// How many tensors /model holds (0 without the group): a bound on the model a config may claim
// before its layout is built.
std::int64_t read_checkpoint_model_tensors(const std::string& path);

// The stage of a swarm stage's checkpoint (CheckpointMeta::swarm_stage); nullopt: a whole model's.
std::optional<int> read_checkpoint_swarm_stage(const std::string& path);

// How many DiLoCo workers' states the checkpoint holds (1 without DiLoCo).
int read_checkpoint_workers(const std::string& path);

// Opens a checkpoint for reading once its seal (train/checkpoint/checkpoint_seal.h) and format
// check out. `check_seal` false is for locate_checkpoint_damage alone (checkpoint_verify.h).
H5File open_checkpoint(const std::string& path, bool check_seal = true);
// The format of an open checkpoint (its `format` attribute, checkpoint_format.h): which byte
// checksum its tokenizer bytes carry. An error naming both accepted formats for any other value.
CheckpointFormat read_checkpoint_format(hid_t file, const std::string& path);

// Reads the config text only (to build the model before reading tensors).
std::string read_checkpoint_config(const std::string& path);

// Fills every buffer (name and range set by the caller, values resized) with its range of each
// tensor of `layout`, verifying shapes and checksums; elements past layout.total() (padding) are
// zero. Returns the rest of the checkpoint.
CheckpointMeta read_checkpoint(const std::string& path, const ParameterLayout& layout,
                               std::vector<StateBuffer>& buffers);
// The whole of `layout` (its parameters; with_optimizer: also the AdamW moments).
Checkpoint read_checkpoint(const std::string& path, const ParameterLayout& layout,
                           bool with_optimizer);

// The checkpoint files (step_<digits>.h5) of `directory` with their steps, oldest first.
std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(const std::string& directory);

// Newest complete checkpoint (highest step) in `directory`, if any.
std::optional<std::string> latest_checkpoint(const std::string& directory);

// Deletes all but the newest `keep` checkpoints (keep 0 keeps all).
void prune_checkpoints(const std::string& directory, int keep);

}  // namespace strata
