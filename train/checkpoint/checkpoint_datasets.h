// What the checkpoint's writer and reader share about its datasets (train/checkpoint/checkpoint.h):
// where a state buffer's tensors live in the file, a tensor's logical shape, a statistic's
// checksum view, and the /state attributes. Internal to train/checkpoint/.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "data/hdf5_handle.h"
#include "model/parameter_layout.h"
#include "train/checkpoint/checkpoint.h"

namespace strata::checkpoint_detail {

inline std::vector<std::uint64_t> logical_dims(const TensorView& t) {
  return std::vector<std::uint64_t>(t.slice.logical_shape.begin(), t.slice.logical_shape.end());
}

// "768,3072": a shape in messages.
inline std::string shape_text(const std::vector<std::uint64_t>& dims) {
  std::ostringstream out;
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? "," : "") << dims[i];
  return out.str();
}

// The group of a state buffer's datasets: "/model/", "/optimizer/m/".
inline std::string dataset_group(const std::string& buffer_name) { return "/" + buffer_name + "/"; }

// A statistic of `size` values as a whole 1-D tensor (its checksum's view).
inline TensorSlice statistic_slice(std::int64_t size) {
  TensorSlice s;
  s.logical_shape = {size};
  s.mid = s.mid_count = size;
  return s;
}

inline void write_state_attributes(hid_t group, const CheckpointState& state) {
  write_attribute_i64(group, "step", state.step);
  write_attribute_i64(group, "data_position", state.data_position);
  write_attribute_i64(group, "seed", static_cast<std::int64_t>(state.seed));
  write_attribute_f64(group, "loss_scale", state.loss_scale);
  write_attribute_i64(group, "adam_steps", state.adam_steps);
  write_attribute_i64(group, "loss_scale_clean_steps", state.loss_scale_clean_steps);
}

// Absolute names of every dataset in the file ("/model/wte"), sorted (checkpoint_verify.cpp).
std::vector<std::string> dataset_names_in(hid_t file, const std::string& path);

inline CheckpointState read_state_attributes(hid_t group) {
  CheckpointState state;
  state.step = read_attribute_i64(group, "step");
  state.data_position = read_attribute_i64(group, "data_position");
  state.seed = static_cast<std::uint64_t>(read_attribute_i64(group, "seed"));
  state.loss_scale = read_attribute_f64(group, "loss_scale");
  state.adam_steps = read_attribute_i64(group, "adam_steps");
  if (has_attribute(group, "loss_scale_clean_steps"))
    state.loss_scale_clean_steps = read_attribute_i64(group, "loss_scale_clean_steps");
  return state;
}

}  // namespace strata::checkpoint_detail
