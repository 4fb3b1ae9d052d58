// Writing a checkpoint (train/checkpoint/checkpoint.h): rank 0 creates the file with every
// logical dataset, each writer adds the element ranges it owns in turn, and the file is sealed and
// renamed into place; every rank agrees on the outcome.
#include "train/checkpoint/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "data/hdf5_handle.h"
#include "data/token_shards.h"
#include "model/core/error.h"
#include "parallel/mesh/reduction_plan.h"
#include "train/checkpoint/checkpoint_datasets.h"
#include "train/checkpoint/checkpoint_seal.h"

namespace strata {
namespace fs = std::filesystem;
using namespace checkpoint_detail;

std::vector<ElementRange> checkpoint_write_ranges(const ParameterLayout& layout,
                                                  const ModelPartition& partition,
                                                  const ElementRange& share) {
  std::vector<ElementRange> writes;
  for (const TensorView& t : layout.tensors()) {
    if (is_tied_copy(partition, t) || (replicated_over_tp(partition, t) && partition.tp_rank != 0))
      continue;
    if (partition.ep_rank != 0 && !is_expert_tensor(t)) continue;
    append_merged(writes, intersect({t.offset, t.offset + t.size}, share));
  }
  return writes;
}

bool writes_statistic(const ParameterLayout& layout, const std::vector<ElementRange>& writes,
                      const std::string& tensor) {
  const TensorView& t = layout.at(tensor);
  if (t.size == 0 || t.slice.logical_index(0) != 0) return false;
  return std::any_of(writes.begin(), writes.end(),
                     [&](const ElementRange& w) { return w.contains(t.offset); });
}

namespace {

// The runs of consecutive logical elements (first logical index, count) that local elements
// [first, first + count) of `t` occupy: one per `outer` block they meet (local order is logical
// order within a block).
std::vector<std::pair<std::uint64_t, std::uint64_t>> logical_runs(const TensorView& t,
                                                                  std::int64_t first,
                                                                  std::int64_t count) {
  const TensorSlice& s = t.slice;
  const std::int64_t block = s.mid_count * s.inner;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> runs;
  for (std::int64_t at = first, end = first + count; at < end;) {
    const std::int64_t run = std::min(end, (at / block + 1) * block) - at;
    runs.emplace_back(static_cast<std::uint64_t>(s.logical_index(at)),
                      static_cast<std::uint64_t>(run));
    at += run;
  }
  return runs;
}

hid_t file_type(StoredType stored) {
  switch (stored) {
    case StoredType::int8:
      return H5T_STD_I8LE;
    case StoredType::uint8:
      return H5T_STD_U8LE;
    case StoredType::float32:
      break;
  }
  return H5T_IEEE_F32LE;
}

// Creates every logical dataset of `logical` under `group` with a zero checksum.
void create_tensors(hid_t file, const std::string& group, const ParameterLayout& logical,
                    StoredType stored) {
  for (const TensorView& t : logical.tensors()) {
    const std::vector<std::uint64_t> dims = logical_dims(t);
    H5Id dataset = create_dataset(file, group + t.name, file_type(stored), dims);
    write_attribute_i64(dataset.get(), "checksum", 0);
  }
}

// Writes local elements [first, first + count) of `t` (values pointing at element `first`) and
// adds their share to the tensor's checksum.
void write_elements(hid_t file, const std::string& path, const float* values, const TensorView& t,
                    std::int64_t first, std::int64_t count) {
  H5Id dataset = open_dataset(file, path);
  // (An int8 or uint8 dataset: HDF5 converts the fp32 values, integers in its range.)
  write_dataset_runs_f32(dataset.get(), logical_runs(t, first, count), values);
  const std::uint64_t sum =
      static_cast<std::uint64_t>(read_attribute_i64(dataset.get(), "checksum")) +
      checksum_slice(values, t.slice, first, count);
  write_attribute_i64(dataset.get(), "checksum", static_cast<std::int64_t>(sum));
}

// The statistics of a per-tensor buffer this writer writes, each a whole dataset of its own.
void write_statistics(hid_t file, const CheckpointWriter& writer, const StateBuffer& buffer) {
  STRATA_CHECK(buffer.stored == StoredType::float32, "per-tensor buffer '", buffer.name,
               "' must be float32");
  std::size_t at = 0;
  for (const TensorStatistic& s : buffer.statistics) {
    const float* values = buffer.values.data() + at;
    at += static_cast<std::size_t>(s.size);
    if (!writes_statistic(*writer.layout, writer.writes, s.tensor)) continue;
    const std::vector<std::uint64_t> dims{static_cast<std::uint64_t>(s.size)};
    write_dataset<float>(file, dataset_group(buffer.name) + s.tensor,
                         std::span<const float>(values, dims[0]), dims);
    H5Id dataset = open_dataset(file, dataset_group(buffer.name) + s.tensor);
    write_attribute_i64(
        dataset.get(), "checksum",
        static_cast<std::int64_t>(checksum_slice(values, statistic_slice(s.size), 0, s.size)));
  }
  STRATA_CHECK(at == buffer.values.size(), "state buffer '", buffer.name,
               "' does not hold its statistics");
}

// The same decision on every rank: an error anywhere fails the write everywhere, with the reason
// of the lowest failing rank.
void agree_or_fail(Communicator* world, const std::string& local_error,
                   const std::string& final_path) {
  std::string error = local_error;
  if (world) {
    std::int64_t lowest = local_error.empty() ? 0 : world->size() - world->rank();
    world->all_reduce_max(&lowest, 1);
    if (lowest == 0) return;
    const int root = world->size() - static_cast<int>(lowest);
    std::int64_t size = static_cast<std::int64_t>(error.size());
    world->broadcast(&size, sizeof(size), root);
    error.resize(static_cast<std::size_t>(size));
    world->broadcast(error.data(), error.size(), root);
  }
  if (error.empty()) return;
  fail_together("cannot write checkpoint '", final_path, "': ", error,
                " (earlier checkpoints are untouched)");
}

}  // namespace

void create_checkpoint_file(const std::string& path, const GptShape& shape,
                            const CheckpointMeta& ckpt, const std::vector<StateDatasets>& datasets,
                            const ParameterLayout* tensors, CheckpointFormat format) {
  const ParameterLayout logical = tensors ? *tensors : ParameterLayout::for_gpt(shape);
  H5File file = H5File::create(path, kSealBytes);
  write_attribute_string(file.id(), "format", checkpoint_format_name(format));
  write_attribute_string(file.id(), "config", ckpt.config_yaml);
  if (ckpt.swarm_stage >= 0) write_attribute_i64(file.id(), "swarm_stage", ckpt.swarm_stage);
  if (ckpt.without_tokenizer) write_attribute_string(file.id(), "tokenizer_sha256", kNoTokenizer);
  for (const StateDatasets& d : datasets)
    create_tensors(file.id(), dataset_group(d.name), logical, d.stored);
  H5Id state = create_group(file.id(), "/state");
  write_state_attributes(state.get(), ckpt.state);
  for (std::size_t w = 0; w < ckpt.worker_states.size(); ++w) {
    H5Id worker = create_group(file.id(), "/state/worker_" + std::to_string(w + 1));
    write_state_attributes(worker.get(), ckpt.worker_states[w]);
  }
  if (!ckpt.tokenizer_model.empty()) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(ckpt.tokenizer_model.data());
    const std::uint64_t n = ckpt.tokenizer_model.size();
    write_dataset<std::uint8_t>(file.id(), "/tokenizer/model",
                                std::span<const std::uint8_t>(bytes, n),
                                std::span<const std::uint64_t>(&n, 1));
    H5Id dataset = open_dataset(file.id(), "/tokenizer/model");
    write_attribute_i64(dataset.get(), "checksum",
                        static_cast<std::int64_t>(checksum_bytes(bytes, n)));
  }
  file.close();
}

void write_checkpoint_elements(const std::string& path, const CheckpointWriter& writer,
                               const std::vector<StateBuffer>& buffers) {
  H5File file = H5File::open_write(path);
  for (const StateBuffer& buffer : buffers) {
    if (buffer.per_tensor) {
      write_statistics(file.id(), writer, buffer);
      continue;
    }
    STRATA_CHECK(buffer.values.size() == buffer.range.size(), "state buffer '", buffer.name,
                 "' does not hold its range");
    for (const TensorView& t : writer.layout->tensors()) {
      const ElementRange tensor{t.offset, t.offset + t.size};
      for (const ElementRange& w : writer.writes) {
        const ElementRange part = intersect(intersect(w, tensor), buffer.range);
        if (part.empty()) continue;
        write_elements(file.id(), dataset_group(buffer.name) + t.name,
                       buffer.values.data() + (part.begin - buffer.range.begin), t,
                       static_cast<std::int64_t>(part.begin - t.offset),
                       static_cast<std::int64_t>(part.size()));
      }
    }
  }
  file.close();
}

std::vector<StateDatasets> state_datasets(const CheckpointWriter& writer,
                                          const std::vector<StateBuffer>& buffers) {
  if (!writer.datasets.empty()) return writer.datasets;
  std::vector<StateDatasets> datasets;
  for (const StateBuffer& b : buffers)
    if (!b.per_tensor) datasets.push_back({b.name, b.stored});
  return datasets;
}

std::string write_checkpoint(const std::string& directory, const CheckpointWriter& writer,
                             const CheckpointMeta& ckpt, const std::vector<StateBuffer>& buffers) {
  STRATA_CHECK(writer.layout != nullptr);
  Communicator* world = writer.world;
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  const std::string final_path =
      (fs::path(directory) / checkpoint_file_name(ckpt.state.step)).string();
  // Hidden temporary name (rank 0's pid, shared): never matched by latest_checkpoint() or prune.
  std::int64_t pid = ::getpid();
  if (world) world->broadcast(&pid, sizeof(pid), 0);
  const std::string temp_path =
      (fs::path(directory) /
       ("." + checkpoint_file_name(ckpt.state.step) + ".tmp" + std::to_string(pid)))
          .string();
  auto remove_temp = [&] {
    std::error_code ignored;
    if (rank == 0) fs::remove(temp_path, ignored);
  };
  // Format 5 when any rank stores an optional buffer (a pipeline stage may hold no FP8 GEMM).
  std::int64_t optional = 0;
  for (const StateBuffer& b : buffers) optional |= b.optional ? 1 : 0;
  if (world) world->all_reduce_max(&optional, 1);
  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(directory);
      create_checkpoint_file(temp_path, writer.shape, ckpt, state_datasets(writer, buffers),
                             ckpt.swarm_stage >= 0 ? writer.layout : nullptr,
                             checkpoint_format_to_write(optional != 0));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  try {
    agree_or_fail(world, error, final_path);
    for (int turn = 0; turn < ranks; ++turn) {  // HDF5 files take one writer at a time
      if (turn == rank) {
        try {
          write_checkpoint_elements(temp_path, writer, buffers);
        } catch (const std::exception& e) {
          error = e.what();
        }
      }
      if (world) world->barrier();
    }
    agree_or_fail(world, error, final_path);
  } catch (...) {
    remove_temp();
    throw;
  }
  if (rank == 0) {
    try {
      seal_checkpoint_file(temp_path);  // the last write: a file that has its seal is complete
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::error_code ec;
    if (error.empty()) fs::rename(temp_path, final_path, ec);
    if (ec) error = "cannot rename '" + temp_path + "' to it: " + ec.message();
  }
  try {
    agree_or_fail(world, error, final_path);
  } catch (...) {
    remove_temp();
    throw;
  }
  return final_path;
}

std::string write_checkpoint(const std::string& directory, const GptShape& shape,
                             const ParameterLayout& layout, const Checkpoint& ckpt) {
  const ElementRange all{0, layout.total()};
  std::vector<StateBuffer> buffers{{"model", all, ckpt.params}};
  if (!ckpt.adam_m.empty()) {
    buffers.push_back({"optimizer/m", all, ckpt.adam_m});
    buffers.push_back({"optimizer/v", all, ckpt.adam_v});
  }
  const CheckpointWriter writer{&layout, shape, {all}, nullptr, {}};
  return write_checkpoint(
      directory, writer,
      {ckpt.config_yaml, ckpt.state, ckpt.tokenizer_model, {}, ckpt.without_tokenizer}, buffers);
}

}  // namespace strata
